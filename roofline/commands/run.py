"""``ceiling run``: the main job. Runs what this machine can, and writes a results folder.

Steps, in order (each is independent: one that fails is recorded and the rest go on):

1. the backend report;
2. ISA inspection of every shipped kernel config for every target (sm_90a, gfx942, ...);
3. a correctness smoke run of every op on every backend that runs here;
4. ceilings and the performance model fit from those records and the measurements shipped with
   the package, hierarchical roofline plots, the search templates, and the report
   (``OUT/report/index.html`` and ``summary.md``).

and the records of 2-3 appended to ``OUT/records`` (Parquet, with provenance).
"""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path
from typing import Callable

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console()


def _write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    tmp.replace(path)


def detect_hardware() -> dict:
    """What this machine is: CPU, memory, and the accelerators each framework sees."""
    import os
    import platform

    from kernels.backends import gpu_name, gpu_vendor

    hw = {"cpu": platform.processor() or platform.machine(), "cpu cores": os.cpu_count()}
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        hw["memory"] = f"{pages * size / 2**30:.0f} GiB"
    except (ValueError, OSError):
        pass
    hw["gpu"] = f"{gpu_vendor()}: {gpu_name()}" if gpu_vendor() else "none visible to PyTorch"
    try:
        import jax

        hw["jax devices"] = ", ".join(sorted({d.device_kind for d in jax.devices()}))
    except Exception:  # noqa: BLE001 - JAX is optional
        pass
    from kernels.trainium import nki_compat

    hw["neuron"] = "emulated (no Neuron toolchain)" if nki_compat.EMULATED else "nki importable"
    return hw


def step_backends(out: Path, summary: dict) -> None:
    from kernels.backends import report

    summary["hardware"] = detect_hardware()
    rows = report()
    _write_json(out / "backends.json", rows)
    summary["backends"] = {f"{r['op']}/{r['backend']}": r["mode"] for r in rows}


def step_inspect(out: Path, summary: dict) -> None:
    from kernels.backends import OPS
    from kernels.isa import inspect_op, inspect_targets
    from microbench.records import Record, append, host_provenance

    records, counts = [], {}
    (out / "isa").mkdir(exist_ok=True)
    for op in OPS:
        for target in inspect_targets(op):
            try:
                rows = inspect_op(op, target)
            except Exception as exc:  # noqa: BLE001 - e.g. a toolchain missing for one target
                counts[f"{op}/{target}"] = f"failed: {type(exc).__name__}: {exc}"[:300]
                continue
            _write_json(out / "isa" / f"{op}-{target}.json", rows)
            counts[f"{op}/{target}"] = len(rows)
            prov = host_provenance(device=f"target {target} (compiled on the host)")
            for r in rows:
                for metric, unit in (("registers", "count"), ("spill_bytes", "B"), ("shared_bytes", "B"),
                                     ("tensor_core_instructions", "count")):
                    if metric in r:
                        records.append(Record(kind="static", op=op, name=r.get("name", op), metric=metric,
                                              value=float(r[metric]), unit=unit, backend=target, config=r.get("config", {}),
                                              method="static", provenance=prov))
    append(out / "records", records)
    summary["isa"] = counts


def step_smoke(out: Path, summary: dict) -> None:
    from kernels.smoke import run_all
    from microbench.records import Record, append, host_provenance

    results = run_all(device="cpu")
    _write_json(out / "correctness.json", [r.as_dict() for r in results])
    prov = host_provenance()
    append(out / "records", [
        Record(kind="correctness", op=r.op, name=r.case, metric="max-abs-error", value=r.error, unit="1",
               backend=r.backend, method=r.mode, extra={"bound": r.bound, "passed": r.passed, "detail": r.detail},
               provenance=prov)
        for r in results if r.error == r.error
    ])
    summary["correctness"] = {f"{r.op}/{r.backend}: {r.case}": ("pass" if r.passed else f"FAIL {r.detail}") for r in results}
    if not all(r.passed for r in results):
        raise RuntimeError("correctness smoke failed: " + "; ".join(f"{r.op}/{r.backend} {r.case}" for r in results if not r.passed))


def step_report(out: Path, summary: dict) -> None:
    from roofline.analysis import report_step

    report_step(out, summary)


STEPS: list[tuple[str, Callable[[Path, dict], None]]] = [
    ("backend report", step_backends),
    ("ISA inspection of shipped configs", step_inspect),
    ("correctness smoke", step_smoke),
    ("ceilings, model, roofline plots, templates and report", step_report),
]


def run(out: Path = typer.Option(Path("ceiling-run"), "--out", "-o", help="Folder for the results.")) -> None:
    """Run the main job on this machine: backend report, ISA inspection of every shipped kernel
    config for every target, and a correctness smoke of every op on every backend that runs here.
    Works on a CPU-only machine; writes JSON summaries and Parquet records to OUT."""
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {"steps": {}}
    failed = False
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as progress:
        for title, step in STEPS:
            task = progress.add_task(title, total=None)
            start = time.perf_counter()
            try:
                step(out, summary)
                status = "ok"
            except Exception as exc:  # noqa: BLE001 - record and go on
                failed = True
                status = f"failed: {type(exc).__name__}: {exc}"
                (out / "errors.log").open("a").write(f"== {title}\n{traceback.format_exc()}\n")
            summary["steps"][title] = {"status": status, "seconds": round(time.perf_counter() - start, 1)}
            progress.update(task, total=1, completed=1, description=f"{title}: {status[:80]}")
    _write_json(out / "summary.json", summary)
    table = Table(title=f"ceiling run -> {out}")
    table.add_column("step")
    table.add_column("status")
    table.add_column("s", justify="right")
    for title, info in summary["steps"].items():
        table.add_row(title, info["status"][:100], str(info["seconds"]))
    console.print(table)
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
