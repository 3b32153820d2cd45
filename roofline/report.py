"""The report of a run: one HTML page and a Markdown summary, from whatever the run produced.

``ReportData`` collects what a run has (any part may be empty): the hardware it
found, the steps it ran, ceilings, roofline plots, kernel records, model
accuracy and exported templates. ``write`` renders ``index.html`` (jinja2) and
``summary.md`` into the report folder; plots are linked by relative path.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from microbench.records import Record
from roofline import devices, work

TEMPLATES = Path(__file__).parent / "report_templates"
VENDOR_BACKENDS = ("nvidia", "amd", "tpu", "trainium")


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
    plots: list[dict] = field(default_factory=list)  # {"device", "png", "svg"} (paths)
    records: list[Record] = field(default_factory=list)
    evaluations: dict[str, dict] = field(default_factory=dict)  # "device|op" -> Evaluation.as_dict()
    model_modes: dict[str, str] = field(default_factory=dict)  # "device|op" -> "fitted" / "analytic"
    templates: list[dict] = field(default_factory=list)  # {"family", "target", "path", "valid_points", "best_points"}
    notes: list[str] = field(default_factory=list)
    title: str = "ceiling run"


def _device_key(r: Record) -> str:
    spec = devices.match(r.provenance.device)
    return spec.key if spec else r.provenance.device


def _seconds(r: Record) -> float:
    return float(r.median if r.median is not None else r.value)


def comparisons(records: list[Record]) -> list[dict]:
    """Our kernels against the vendor baselines, per (device, op, shape, dtype): best time of each."""
    groups: dict[tuple, dict[str, list[Record]]] = defaultdict(lambda: {"ours": [], "baseline": []})
    for r in records:
        if r.kind != "kernel" or r.metric != "time" or r.unit != "s" or _seconds(r) <= 0:
            continue
        if r.extra.get("status", "ok") != "ok":
            continue
        role = r.extra.get("role") or ("ours" if (r.backend in VENDOR_BACKENDS or r.name in VENDOR_BACKENDS)
                                      else "baseline")
        shape = work.normalize_shape(r.op, r.shape)
        order = {a: i for i, a in enumerate(("batch", "M", "N", "K"))}
        dims = ", ".join(f"{k}={v}" for k, v in sorted(shape.items(), key=lambda kv: (order.get(kv[0], 9), kv[0]))
                         if k != "dtype")
        key = (_device_key(r), r.op, dims, work.record_dtype(r.shape, r.config, r.extra))
        groups[key]["ours" if role == "ours" else "baseline"].append(r)
    rows = []
    hbm = _hbm_bandwidths(records)
    for (device, op, dims, dtype), g in sorted(groups.items()):
        ours = min(g["ours"], key=_seconds, default=None)
        base = min(g["baseline"], key=_seconds, default=None)
        w = work.count(op, (ours or base).shape, None, (ours or base).extra)
        def tflops(r):
            return w.flops / _seconds(r) / 1e12 if (r and w) else None
        floor = _hbm_floor(w, hbm.get(device), dtype)
        rows.append(dict(
            device=device, op=op, shape=dims, dtype=dtype,
            ours=ours.name if ours else "-", ours_s=_seconds(ours) if ours else None, ours_tflops=tflops(ours),
            baseline=base.name if base else "-", baseline_s=_seconds(base) if base else None,
            baseline_tflops=tflops(base),
            speedup=(_seconds(base) / _seconds(ours)) if (ours and base) else None,
            method=(ours or base).method or "",
            hbm_floor_s=floor, hbm_fraction=(floor / _seconds(ours)) if (floor and ours) else None,
        ))
    return rows


def _hbm_bandwidths(records: list[Record]) -> dict[str, tuple[float, Any]]:
    """device key -> (HBM bandwidth, its ceilings) from the run's records, measured first (4.34 TB/s read
    on the H200 in the committed records), published otherwise."""
    from roofline import ceilings

    out = {}
    for key in {_device_key(r) for r in records if r.kind == "kernel"}:
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


def static_rows(records: list[Record]) -> list[dict]:
    table: dict[tuple, dict] = {}
    for r in records:
        if r.kind != "static":
            continue
        cfg = ",".join(f"{k}={v}" for k, v in sorted(r.config.items()) if k != "dtype")
        row = table.setdefault((r.provenance.device, r.op, r.name, cfg),
                               dict(target=devices.target_of(r.provenance.device), op=r.op, name=r.name,
                                    config=cfg))
        row[r.metric] = r.value
    return list(table.values())


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
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


def context(data: ReportData, out: Path) -> dict[str, Any]:
    def rel(p: str | os.PathLike) -> str:
        return os.path.relpath(Path(p).resolve(), out.resolve())

    kinds = defaultdict(int)
    for r in data.records:
        kinds[r.kind] += 1
    return dict(
        title=data.title,
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        hardware=data.hardware,
        steps=data.steps,
        ceilings=data.ceilings,
        plots=[dict(p, png=rel(p["png"]), svg=rel(p["svg"])) for p in data.plots],
        comparisons=comparisons(data.records),
        static=static_rows(data.records),
        evaluations=data.evaluations,
        modes=data.model_modes,
        templates=[dict(t, path=rel(t["path"])) for t in data.templates],
        notes=data.notes,
        counts=dict(sorted(kinds.items())),
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
    ctx = context(data, out)
    paths = {"html": out / "index.html", "markdown": out / "summary.md"}
    paths["html"].write_text(env.get_template("report.html.j2").render(**ctx))
    paths["markdown"].write_text(env.get_template("summary.md.j2").render(**ctx))
    return paths
