"""The report of a run: one HTML page and a Markdown summary, from whatever the run produced.

``ReportData`` collects what a run has (any part may be empty): the hardware it
found, the steps it ran, ceilings, roofline plots, per-op speedup charts, kernel
records, model accuracy and exported templates. ``write`` renders ``index.html``
(jinja2; the charts inlined as SVG, so every point and bar shows what it is on
hover) and ``summary.md`` into the report folder.

Every figure says where it comes from: measured here (by this run, on this machine),
measured on a named device at a date and commit (read from the records committed
with the package), or published (with its source). ``ReportData.origins`` maps
``id(record)`` to "here" for the records the run took and to a name ("committed
records") for the others.

Tables are built here as plain rows (``Table``), so the page and the summary render
them the same way: the page wraps long cells and, on a narrow screen, stacks each
row as label/value pairs, so no table is wider than the screen; abbreviated cells
carry their full text as a hover title.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ceiling.microbench.records import Record
from ceiling.roofline import devices, selection, work
from ceiling.roofline.ceilings import measured_where

TEMPLATES = Path(__file__).parent / "report_templates"
VENDOR_BACKENDS = ("nvidia", "amd", "tpu", "trainium")
# What defines a problem besides its dimensions (a kernel's own tile config does not).
PROBLEM_KEYS = ("direction", "causal", "triangle", "layout")


@dataclass
class Step:
    name: str
    status: str  # "ok", "skipped", "failed"
    seconds: float = 0.0
    note: str = ""


@dataclass
class ReportData:
    hardware: dict[str, Any] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    ceilings: list[dict] = field(default_factory=list)  # DeviceCeilings.rows()
    plots: list[dict] = field(default_factory=list)  # rooflines: {"device", "png", "svg", "caption"}
    charts: list[dict] = field(default_factory=list)  # speedups: {"device", "op", "png", "svg", "caption"}
    records: list[Record] = field(default_factory=list)
    origins: dict[int, str] = field(default_factory=dict)  # id(record) -> "here" or where it was read from
    evaluations: dict[str, dict] = field(default_factory=dict)  # "device|op" -> Evaluation.as_dict()
    model_modes: dict[str, str] = field(default_factory=dict)  # "device|op" -> "fitted" / "analytic"
    model_source: str = ""  # which records the model was fit on
    templates: list[dict] = field(default_factory=list)  # {"family", "target", "path", "valid_points", "best_points"}
    proofs: list[dict] = field(default_factory=list)  # ceiling.verify Result.as_dict() per kernel x property
    notes: list[str] = field(default_factory=list)
    title: str = "ceiling run"


# --------------------------------------------------------------------------- kernels against baselines


def _seconds(r: Record) -> float:
    return float(r.median if r.median is not None else r.value)


def _variant(values: dict) -> str:
    """"fwd causal", "bwd non-causal", "layout NT": what defines a problem besides its dimensions."""
    parts = []
    for key in PROBLEM_KEYS:
        if key not in values:
            continue
        v = values[key]
        parts.append(key if v is True else f"non-{key}" if v is False else
                     str(v) if key in ("direction", "triangle") else f"{key} {v}")
    return " ".join(parts)


_DIM_NAMES = {"batch": "B", "seq": "S", "seq_q": "Sq", "seq_k": "Sk", "n": "N", "heads": "H", "head_dim": "D",
              "c_z": "cz", "c": "c"}  # in the order they are written


def dims_label(op: str, shape: dict) -> str:
    """A problem's dimensions in a few characters: "4096x4096x4096" (M x N x K) for a GEMM, a batched one
    "8x4096x4096x4096", "B4 S4096 H16 D128" for the others."""
    shape = {k: v for k, v in work.normalize_shape(op, shape).items() if k not in ("dtype", *PROBLEM_KEYS)}
    if {"M", "N", "K"} <= set(shape):
        return "x".join(str(shape[a]) for a in ("batch", "M", "N", "K") if a in shape)
    order = list(_DIM_NAMES)
    return " ".join(f"{_DIM_NAMES[k]}{v}" if k in _DIM_NAMES else f"{k}={v}"
                    for k, v in sorted(shape.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else 99,
                                                                      kv[0])))


def short_where(r: Record) -> str:
    """"h200 2026-11-30 e69058c": device, date and commit of a measurement, for a narrow column."""
    p = r.provenance
    return f"{selection.device_key(r)} {p.timestamp[:10]} {(p.git_commit or '?')[:7]}"


def _natural(text: str) -> tuple:
    """Sort key that orders "M=16" before "M=128"."""
    return tuple((0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text))


def problems(records: list[Record], origins: dict[int, str] | None = None) -> list[dict]:
    """Our kernels against the baselines, one row per (device, op, problem, dtype).

    A problem is its dimensions plus what else defines it (direction, causality, layout; not
    a kernel's tile config). Ours and the baselines are compared under one timing method,
    CUDA-graph replay where both were timed so (``selection.METHOD_PREFERENCE``); each
    implementation's best time under it counts. ``baselines`` holds every baseline's time and
    our speedup over it, ``speedup`` the one over the fastest baseline.
    """
    origins = origins or {}
    groups: dict[tuple, dict[str, dict[str, list[Record]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in records:
        if r.kind != "kernel" or r.metric != "time" or r.unit != "s" or selection.timing_reason(r, 0.0):
            continue
        shape = work.normalize_shape(r.op, r.shape)
        dims = dims_label(r.op, r.shape)
        variant = _variant({**{k: v for k, v in r.config.items() if k in PROBLEM_KEYS}, **shape})
        key = (selection.device_key(r), r.op, variant, dims, work.record_dtype(r.shape, r.config, r.extra))
        role = "ours" if selection.is_ours(r) else "baseline"
        groups[key][selection.method_family(r.method) or "?"][role].append(r)
    rows = []
    hbm = _hbm_bandwidths(records)
    for (device, op, variant, dims, dtype), by_method in sorted(groups.items(), key=lambda kv: _natural(str(kv[0]))):
        paired = [m for m in by_method if by_method[m]["ours"] and by_method[m]["baseline"]]
        candidates = paired or [m for m in by_method if by_method[m]["ours"]] or list(by_method)
        method = min(candidates, key=lambda m: (selection.METHOD_PREFERENCE.index(m)
                                                if m in selection.METHOD_PREFERENCE else 99, m))
        g = by_method[method]
        ours = min(g["ours"], key=_seconds, default=None)
        best: dict[str, Record] = {}
        for b in g["baseline"]:
            if b.name not in best or _seconds(b) < _seconds(best[b.name]):
                best[b.name] = b
        base = min(best.values(), key=_seconds, default=None)
        anchor = ours or base
        w = work.count(op, anchor.shape, anchor.config, anchor.extra)  # the config holds causality and direction

        def tflops(r):
            return w.flops / _seconds(r) / 1e12 if (r and w) else None

        floor = _hbm_floor(w, hbm.get(device), dtype)
        rows.append(dict(
            device=device, op=op, variant=variant, shape=dims, dtype=dtype,
            label=" ".join(x for x in (variant, dims) if x),
            ours=ours.name if ours else "-", ours_s=_seconds(ours) if ours else None, ours_tflops=tflops(ours),
            baseline=base.name if base else "-", baseline_s=_seconds(base) if base else None,
            baseline_tflops=tflops(base),
            speedup=(_seconds(base) / _seconds(ours)) if (ours and base) else None,
            baselines={n: (_seconds(b), _seconds(b) / _seconds(ours) if ours else None) for n, b in sorted(best.items())},
            method=anchor.method or "",
            measured=measured_where(anchor, origins.get(id(anchor))),
            where=short_where(anchor),
            hbm_floor_s=floor, hbm_fraction=(floor / _seconds(ours)) if (floor and ours) else None,
        ))
    return rows


def _hbm_bandwidths(records: list[Record]) -> dict[str, tuple[float, Any]]:
    """device key -> (HBM bandwidth, its ceilings) from the run's records, measured first (4.34 TB/s read
    on the H200 in the committed records), published otherwise."""
    from ceiling.roofline import ceilings

    out = {}
    for key in {selection.device_key(r) for r in records if r.kind == "kernel"}:
        try:
            dc = ceilings.for_device(records, key)
        except KeyError:
            continue
        if "hbm" in dc.bandwidth:
            out[key] = (dc.bandwidth["hbm"].value, dc)
    return out


def _hbm_floor(w, bandwidth: tuple[float, Any] | None, dtype: str) -> float | None:
    """The roofline's HBM floor of a memory-bound problem (bytes of A + B + C over the HBM bandwidth);
    None where the compute roof is the higher one."""
    if w is None or bandwidth is None or "hbm" not in w.bytes:
        return None
    hbm, dc = bandwidth
    peak = dc.peak("float8" if dtype.startswith("float8") else dtype)
    memory = w.bytes["hbm"] / hbm
    return memory if peak is None or w.flops / peak.value <= memory else None


comparisons = problems  # the name the report used before it grouped by problem and method


def static_rows(records: list[Record]) -> list[dict]:
    table: dict[tuple, dict] = {}
    for r in records:
        if r.kind != "static":
            continue
        cfg = ",".join(f"{k}={v}" for k, v in sorted(r.config.items()) if k != "dtype")
        row = table.setdefault((r.provenance.device, r.op, r.name, cfg),
                               dict(target=devices.target_of(r.provenance.device), op=r.op, name=r.name,
                                    config=cfg, short=abbreviate(r.config)))
        row[r.metric] = r.value
    return sorted(table.values(), key=lambda row: (row["op"], row["target"], _natural(row["name"])))


_SHORT_KEYS = {"num_warps": "w", "num_stages": "s", "GROUP_M": "g", "SPLIT_K": "splitk", "waves_per_eu": "wpe",
               "matrix_instr_nonkdim": "mfma", "kpack": "kpack", "head_dim": "d", "ROWS": "rows"}
_FLAGS = {"EPILOGUE_SUBTILE": "sub", "WARP_SPECIALIZE": "ws"}  # the kernel names' own abbreviations
_TILE_KEYS = (("BLOCK_M", "BLOCK_N", "BLOCK_K"), ("block_m", "block_n", "block_k"))


def abbreviate(config: dict) -> str:
    """A config in a few characters: the tile MxNxK, then w8 s3 g16 ..., then the flags that are on
    (a false flag and a split-K of 1 are left out), then whatever else it holds."""
    parts, used = [], {"dtype"}
    for keys in _TILE_KEYS:
        tile = [str(config[k]) for k in keys if k in config]
        if tile:
            parts.append("x".join(tile))
            used.update(keys)
    for key, short in _SHORT_KEYS.items():
        if key in config and not (key == "SPLIT_K" and config[key] == 1):
            parts.append(f"{short}{config[key]}")
        used.add(key)
    for key, value in config.items():
        if key in used or value is False or value is None:
            continue
        if value is True:
            parts.append(_FLAGS.get(key, key.lower()))
        else:
            parts.append(str(value) if key in ("kernel", "class") else f"{key}={value}")
    return " ".join(parts)


# --------------------------------------------------------------------------- formatting


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e7:
            return str(int(value))
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
            return f"{value:.{digits}e}"
        return f"{value:.{digits}g}"
    return str(value)


def _time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def rate(value: float, unit: str) -> str:
    """4.34e12 B/s -> "4.34 TB/s"."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float8": "fp8"}


def _tflops(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def _speedup(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def md_cell(value: Any) -> str:
    """A Markdown table cell: ``|`` escaped and line breaks folded, so a note cannot break the table."""
    return re.sub(r"\s*\n\s*", " ", str(value)).replace("|", "\\|")


@dataclass
class Cell:
    text: str
    title: str = ""  # the full text, where ``text`` is abbreviated
    cls: str = ""  # "ok", "failed", "measured", ...


@dataclass
class Table:
    id: str
    columns: list[str]
    rows: list[list[Cell]]
    numeric: set[str] = field(default_factory=set)
    caption: str = ""
    empty: str = "none"


def _cells(*values: Any) -> list[Cell]:
    return [v if isinstance(v, Cell) else Cell(str(v)) for v in values]


def _state(status: str) -> str:
    return "ok" if status.startswith("ok") else "skipped" if status.startswith("skipped") else "failed"


def tables(data: ReportData, rel=str) -> dict[str, Table]:
    """Every table of the report; ``rel`` turns a path into the link the page uses."""
    compare = problems(data.records, data.origins)
    # the devices the report shows a roofline of, or measured; the others' published figures fold away
    shown = {p["device"] for p in data.plots} | {c["device"] for c in data.ceilings if c["source"] == "measured"}
    statics = static_rows(data.records)
    static_where = {devices.target_of(r.provenance.device) for r in data.records if r.kind == "static"}
    out = {
        "hardware": Table("hardware-table", ["property", "value"],
                          [_cells(k, v) for k, v in data.hardware.items()],
                          caption="This machine, as the run detected it.", empty="not reported"),
        "steps": Table("steps-table", ["step", "status", "seconds", "note"],
                       [_cells(s.name, Cell(s.status, cls=s.status), f"{s.seconds:.1f}", s.note) for s in data.steps],
                       numeric={"seconds"}),
        "ceilings": _ceilings_table("ceilings-table", [c for c in data.ceilings if c["device"] in shown]),
        "published": _ceilings_table("published-table", [c for c in data.ceilings if c["device"] not in shown]),
        "kernels": Table("kernels-table", ["op", "problem", "dtype", "ours", "time", "TFLOP/s", "HBM floor", "of floor",
                                           "best baseline", "time ", "TFLOP/s ", "speedup", "timing", "measured"],
                         [_cells(r["op"], r["label"], _DTYPES.get(r["dtype"], r["dtype"]), r["ours"],
                                 _time(r["ours_s"]), _tflops(r["ours_tflops"]), _time(r["hbm_floor_s"]),
                                 "-" if r["hbm_fraction"] is None else f"{r['hbm_fraction']:.0%}",
                                 r["baseline"], _time(r["baseline_s"]),
                                 _tflops(r["baseline_tflops"]),
                                 Cell(_speedup(r["speedup"]), cls="" if r["speedup"] is None else
                                      ("faster" if r["speedup"] >= 1 else "slower")),
                                 r["method"], Cell(r["where"], title=r["measured"])) for r in compare],
                         numeric={"time", "TFLOP/s", "HBM floor", "of floor", "time ", "TFLOP/s ", "speedup"},
                         caption="Each implementation's best time under one timing method per problem "
                                 "(CUDA-graph replay where ours and the baseline were both timed so); GEMM problems "
                                 "are M x N x K, the others B(atch) S(equence) H(eads) D(head dim) N(pairs) c(hannels). "
                                 "The HBM floor of a memory-bound problem is its bytes (A + B + C) over the device's "
                                 "HBM bandwidth (measured where the records have it); of floor: the floor over our time. "
                                 "Measured: device, date, commit (hover for which records).",
                         empty="No kernel timings in this run or the records it read."),
        "model": Table("model-table", ["device | op", "mode", "train", "held out", "split", "MAPE", "Spearman",
                                       "top-1 regret", "worst regret", "timing spread"],
                       [_cells(key, e["mode"], e["n_train"], e["n_test"], e["split"], f"{_fmt(e['mape'] * 100)}%",
                               _fmt(e["spearman"]), f"{_fmt(e['regret'] * 100)}%", f"{_fmt(e['regret_max'] * 100)}%",
                               f"{_fmt(e['noise'] * 100)}%") for key, e in data.evaluations.items()]
                       + [_cells(key, mode, 0, 0, "no measurements: analytic terms only (roofline bound + latency "
                                 "+ launch)", "-", "-", "-", "-", "-")
                          for key, mode in data.model_modes.items() if key not in data.evaluations],
                       numeric={"train", "held out", "MAPE", "Spearman", "top-1 regret", "worst regret",
                                "timing spread"},
                       caption=data.model_source),
        "static": Table("static-table", ["target", "op", "kernel", "config", "registers", "spill bytes",
                                         "shared / LDS bytes", "tensor-core instr."],
                        [_cells(s["target"], s["op"], Cell(_short_name(s["name"]), title=s["name"]),
                                Cell(s["short"], title=s["config"]), _fmt(s.get("registers")),
                                _fmt(s.get("spill_bytes")), _fmt(s.get("shared_bytes")),
                                _fmt(s.get("tensor_core_instructions"))) for s in statics],
                        numeric={"registers", "spill bytes", "shared / LDS bytes", "tensor-core instr."},
                        caption=("Compiled here by this run for each target "
                                 f"({', '.join(sorted(static_where))}); hover a kernel or config for its full key."
                                 if static_where else ""),
                        empty="No static profiles."),
        "proofs": Table("proofs-table", ["kernel", "property", "status", "constexprs", "counterexample or reason"],
                        [_cells(p["kernel"], p["property"], Cell(p["status"], cls="ok" if p["status"] == "proved"
                                                                 else "failed"),
                                ", ".join(f"{k}={v}" for k, v in p["constexprs"].items()), _readable(p))
                         for p in data.proofs],
                        caption="ceiling verify --all over the project's contracts (TTIR, every shape of each "
                                "contract's domain); a counterexample lists the scalars, program and address.",
                        empty="No proofs in this run."),
        "templates": Table("templates-table", ["family", "target", "valid points", "best points", "model", "folder"],
                           [_cells(t["family"], t["target"], t["valid_points"], t["best_points"], t["mode"],
                                   Cell(rel(t["path"]), title=f"{rel(t['path'])}/template.json"))
                            for t in data.templates],
                           numeric={"valid points", "best points"}, empty="No templates exported."),
    }
    return out


def _readable(result: dict) -> str:
    """A counterexample as ``key=value`` pairs (scalars first), or the reason a result is unknown."""
    cx = result.get("counterexample")
    if not cx:
        return result.get("reason") or ""
    scalars = ", ".join(f"{k}={v}" for k, v in (cx.get("scalars") or {}).items())
    rest = ", ".join(f"{k}={v}" for k, v in cx.items() if k not in ("scalars", "constexprs", "target"))
    return f"{scalars}; {rest}" if scalars else rest


def _ceilings_table(table_id: str, rows: list[dict]) -> Table:
    return Table(table_id, ["device", "kind", "name", "value", "provenance"],
                 [_cells(c["device"], c["kind"], c["name"], rate(c["value"], c["unit"]),
                         Cell(c.get("provenance") or f"{c['source']}: {c['detail']}", cls=c["source"])) for c in rows],
                 numeric={"value"})


def _short_name(name: str) -> str:
    """A kernel name with its dtype spelled short (the config column has the rest)."""
    return name.replace("_bfloat16", "_bf16").replace("_float16", "_f16")


def context(data: ReportData, out: Path) -> dict[str, Any]:
    def rel(p: str | os.PathLike) -> str:
        return os.path.relpath(Path(p).resolve(), out.resolve())

    def inline(svg: str | os.PathLike) -> str:
        text = Path(svg).read_text()
        return text[text.find("<svg"):]  # drop the XML declaration and DOCTYPE

    kinds = defaultdict(int)
    for r in data.records:
        kinds[r.kind] += 1
    here = sum(1 for r in data.records if data.origins.get(id(r)) == "here")
    charts = [dict(p, png=rel(p["png"]), svg=rel(p["svg"]), inline=inline(p["svg"])) for p in data.plots]
    speedups = [dict(c, png=rel(c["png"]), svg=rel(c["svg"]), inline=inline(c["svg"])) for c in data.charts]
    return dict(
        title=data.title,
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        hardware=data.hardware,
        tables=tables(data, rel),
        plots=charts,
        charts=speedups,
        templates=[dict(t, path=rel(t["path"])) for t in data.templates],
        notes=data.notes,
        counts=dict(sorted(kinds.items())),
        here=here,
        fmt=_fmt,
        time=_time,
    )


def write(data: ReportData, out: str | Path) -> dict[str, Path]:
    """Render ``index.html`` and ``summary.md`` into ``out``; returns their paths."""
    import jinja2

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=jinja2.select_autoescape(["html"]),
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["md"] = md_cell
    ctx = context(data, out)
    paths = {"html": out / "index.html", "markdown": out / "summary.md"}
    paths["html"].write_text(env.get_template("report.html.j2").render(**ctx))
    paths["markdown"].write_text(env.get_template("summary.md.j2").render(**ctx))
    return paths
