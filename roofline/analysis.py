"""From records to results: ceilings, roofline plots, the fitted model and the templates.

``fit`` and ``export_templates`` are what ``ceiling fit`` and ``ceiling
export-templates`` print and save; ``analyze`` does both plus the plots and
returns a ``ceiling.roofline.report.ReportData`` for ``ceiling run`` to complete and
render.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ceiling.microbench.records import Record
from ceiling.roofline import ceilings as _ceilings
from ceiling.roofline import devices
from ceiling.roofline import model as _model
from ceiling.roofline import plot as _plot
from ceiling.roofline import report as _report
from ceiling.roofline import selection as _selection
from ceiling.roofline.report import ReportData, Step


@dataclass
class Fit:
    ceilings: dict[str, _ceilings.DeviceCeilings]
    model: _model.PerfModel
    evaluations: dict[str, _model.Evaluation]  # "device|op" -> held-out evaluation (measured devices only)
    modes: dict[str, str]  # "device|op" -> "fitted" / "analytic", every device the templates target too
    selection: _selection.Selection | None = None  # which kernel timings the model was fit and judged on

    def save(self, out: str | Path) -> dict[str, Path]:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"model": out / "model.json", "evaluation": out / "evaluation.json", "ceilings": out / "ceilings.json"}
        self.model.save(paths["model"])
        chosen = self.selection or _selection.Selection()
        paths["evaluation"].write_text(json.dumps(
            {"targets": {"mape": 0.10, "spearman": 0.9, "regret": 0.05},
             "evaluations": {k: e.as_dict() for k, e in self.evaluations.items()},
             "modes": self.modes,
             "selection": {"rules": _selection.REASONS, "event_min_seconds": _selection.EVENT_MIN_SECONDS,
                           "counts": chosen.counts(), "excluded": [e.row() for e in chosen.excluded]}},
            indent=2, default=str))
        paths["ceilings"].write_text(json.dumps([row for dc in self.ceilings.values() for row in dc.rows()], indent=2))
        return paths


def fit(records: list[Record], ops: tuple[str, ...] = ("gemm",), folds: int = 4, seed: int = 0) -> Fit:
    table = _ceilings.fit(records)
    perf, evaluations = _model.fit_and_evaluate(records, folds, seed)
    modes = {}
    for key in {*evaluations, *(f"{d.key}|{op}" for d in devices.PUBLISHED.values() for op in ops)}:
        if key.rsplit("|", 1)[-1] in ("filled", "underfilled"):
            continue  # a regime's evaluation ("h200|gemm|filled"); its mode is the op's
        device, op = key.split("|", 1)
        modes[key] = perf.mode(device, op)
    return Fit(table, perf, evaluations, dict(sorted(modes.items())), _selection.select(records))


def plot_devices(records: list[Record], table: dict[str, _ceilings.DeviceCeilings]) -> list[str]:
    """Devices worth a roofline plot: every measured one, and every one with kernel timings."""
    keys = {k for k, dc in table.items() if dc.measured()}
    for r in records:
        if r.kind == "kernel" and r.metric == "time":
            spec = devices.match(r.provenance.device)
            keys.add(spec.key if spec else r.provenance.device)
    return sorted(k for k in keys if k in table)


def analyze(records: list[Record], out: str | Path, families: list[str] | None = None,
            targets: list[str] | None = None, progress: Callable[[str], None] | None = None,
            always_plot: tuple[str, ...] = ("h200",), origins: dict[int, str] | None = None,
            prove: bool = True) -> ReportData:
    """Fit, plot and export into ``out`` (``fit/``, ``plots/``, ``templates/``); the report's data.

    ``origins`` maps ``id(record)`` to "here" for the records this run took, or to where the
    others were read from; every figure of the report cites it. ``prove`` False: the templates'
    certificates hold only the proofs already cached.
    """
    from ceiling.roofline.templates import export

    out = Path(out)
    data = ReportData(records=list(records), origins=dict(origins or {}))
    say = progress or (lambda msg: None)

    t0 = time.perf_counter()
    say("fitting ceilings and the performance model")
    result = fit(records)
    result.save(out / "fit")
    data.ceilings = [row for dc in result.ceilings.values() for row in dc.rows(data.origins)]
    data.evaluations = {k: e.as_dict() for k, e in result.evaluations.items()}
    data.model_modes = result.modes
    used = result.selection.used if result.selection else []
    data.model_source = ("Fit on " + "; ".join(sorted(_where(used, data.origins))) + "." if used else
                         "No kernel timings to fit: every device uses the analytic model.")
    fitted = [k for k, m in result.modes.items() if m == "fitted"]
    data.steps.append(Step("fit ceilings and model", "ok", time.perf_counter() - t0,
                           f"model fitted for {', '.join(fitted)}" if fitted else
                           "no kernel timings to fit: every device uses the analytic model"))

    t0 = time.perf_counter()
    keys = [*plot_devices(records, result.ceilings), *(k for k in always_plot if k in result.ceilings)]
    timed = {_selection.device_key(r) for r in records if r.kind == "kernel"}
    for key in sorted(dict.fromkeys(keys), key=lambda k: k not in timed):  # devices with kernel timings first
        if any(p["device"] == result.ceilings[key].device for p in data.plots):
            continue
        say(f"plotting the roofline of {key}")
        dc = result.ceilings[key]
        points = _plot.placements(records, key)
        png, svg = _plot.plot(dc, points, out / "plots" / _safe(key))
        kernels = _where([r for r in records if r.kind == "kernel" and _selection.device_key(r) == key], data.origins)
        ours = sum(not p.baseline for p in points)
        caption = (f"{ours} of our kernels and {len(points) - ours} baselines (one point per implementation and "
                   "problem, the time the kernels table gives it), " + "; ".join(sorted(kernels)) if points else
                   "no kernel timings on this device; the roofs alone")
        data.plots.append({"device": dc.device, "png": png, "svg": svg, "caption": caption})
    for (device, op), rows in _by_device_op(_report.problems(records, data.origins)).items():
        say(f"charting {op} speedups on {device}")
        title = f"{op} on {device}"
        png, svg = _plot.speedups(rows, out / "plots" / _safe(f"speedup-{device}-{op}"), title)
        data.charts.append({"device": device, "op": op, "png": png, "svg": svg,
                            "caption": f"{op} on {device}, {len(rows)} problems; " + "; ".join(
                                sorted({r["measured"] for r in rows}))})
    data.steps.append(Step("roofline plots and speedup charts", "ok", time.perf_counter() - t0,
                           f"{len(data.plots)} rooflines, {len(data.charts)} speedup charts"))

    t0 = time.perf_counter()
    say("exporting search templates")
    accuracy = {k: e.as_dict() for k, e in result.evaluations.items()}
    for folder in export.export(out / "templates", records, families, targets, result.model, accuracy, prove):
        from ceiling.roofline.templates.schema import Template

        t = Template.load(folder)
        data.templates.append({"family": t.family, "target": t.target, "path": folder,
                               "valid_points": sum(p["valid_points"] for p in t.cost_model.predictions[:1]),
                               "best_points": len(t.best_points), "mode": t.cost_model.mode})
    data.steps.append(Step("export templates", "ok", time.perf_counter() - t0, f"{len(data.templates)} templates"))
    return data


def _where(records: list[Record], origins: dict[int, str]) -> set[str]:
    """Where a set of records was measured: one line per device, date and origin, with its commits
    ("measured on NVIDIA H200, 2026-11-30, commits 2bcccbe, e69058c (committed records)")."""
    runs: dict[tuple, set[str]] = {}
    for r in records:
        p = r.provenance
        runs.setdefault((p.device, p.timestamp[:10], origins.get(id(r))), set()).add((p.git_commit or "unknown")[:7])
    out = set()
    for (device, date, origin), commits in runs.items():
        where = "measured here" if origin == "here" else f"measured on {device}"
        label = "commit" if len(commits) == 1 else "commits"
        out.add(f"{where}, {date}, {label} {', '.join(sorted(commits))}"
                + (f" ({origin})" if origin and origin != "here" else ""))
    return out


def _by_device_op(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """Problems with our time and at least one baseline, per (device, op)."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if r["ours_s"] is not None and r["baselines"]:
            out.setdefault((r["device"], r["op"]), []).append(r)
    return out


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name).strip("-") or "device"


def report_step(out: Path, summary: dict, families: list[str] | None = None,
                progress: Callable[[str], None] | None = None) -> dict[str, Path]:
    """The last step of ``ceiling run``: fit, plot, export and write ``OUT/report/``.

    Fits from the run's records (``OUT/records``) together with the measurements
    committed with the package, so a machine without a GPU still fits from the
    committed H200 data; the committed host (CPU) records are left out, since they
    describe another machine than this one, whose host ceilings the run measured
    itself. ``summary`` is the run's summary so far: its steps
    (``{"steps": {title: {"status", "seconds"}}}``) and, when present, its
    ``hardware`` table appear in the report. Returns the report's paths.
    """
    from ceiling.roofline import store as _store

    out = Path(out)
    here = _store.load([out / "records"], embedded=False)
    committed = [r for r in _store.load() if r.kind != "host"]
    origins = {id(r): "here" for r in here} | {id(r): "committed records" for r in committed}
    # The certificates carry what the run's proofs step proved; the family's other kernels are marked not
    # verified here (``ceiling export-templates`` proves them), which keeps the main job minutes long.
    data = analyze([*committed, *here], out / "report", families, progress=progress, origins=origins, prove=False)
    steps = []
    for title, info in summary.get("steps", {}).items():
        status = str(info.get("status", ""))
        state = "ok" if status.startswith("ok") else ("skipped" if status.startswith("skipped") else "failed")
        note = status.split(":", 1)[1].strip() if state == "ok" and ":" in status else ("" if state == "ok" else status)
        steps.append(Step(title, state, float(info.get("seconds", 0.0)), note))
    data.steps = steps + data.steps
    hardware = summary.get("hardware")
    if isinstance(hardware, dict):
        data.hardware = hardware
    if (out / "proofs.json").is_file():  # ceiling run's proofs step
        import json

        data.proofs = json.loads((out / "proofs.json").read_text())
    paths = _report.write(data, out / "report")
    summary["report"] = {k: str(v) for k, v in paths.items()}
    return paths
