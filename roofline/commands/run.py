"""``ceiling run``: the main job. Runs what this machine can, and writes a results folder.

Steps, in order (each is independent: one that fails is recorded and the rest go on):

1. the backend report;
2. this machine's host ceilings (the ``host`` microbenchmark suite in quick mode: memory
   bandwidth and BLAS FLOP/s, a few seconds, measured before anything else runs);
3. ISA inspection of the shipped kernel configs for every target (sm_90a, gfx942, TPU,
   Trainium): by default one representative config per kernel function and target, every
   shipped config with ``--full-isa``;
4. a correctness smoke run of every op on every backend that runs here (3 and 4 share a
   pool of worker processes, one per core);
5. ceilings and the performance model fit from those records and the measurements
   committed with the package, roofline plots, per-op speedup charts, the search templates,
   and the report (``OUT/report/index.html`` and ``summary.md``).

The records of 2-4 are appended to ``OUT/records`` (Parquet, with provenance). Progress
shows as it goes: a live display in a terminal, one line per finished item otherwise (a CI
log, ``| tee``). The last line names the report.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections import defaultdict
from pathlib import Path
from typing import Callable

import typer

from ceiling.roofline import tables
from ceiling.roofline.progress import StepProgress
from ceiling.roofline.tables import key_table


def _write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    tmp.replace(path)


def detect_hardware() -> dict:
    """What this machine is: CPU, memory, and the accelerators each framework sees."""
    import platform

    from ceiling.backends import gpu_name, gpu_vendor
    from ceiling.microbench.suites.host import cpu_name

    hw = {"cpu": cpu_name() or platform.machine(), "cpu cores": os.cpu_count()}
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
    from ceiling.trainium import nki_compat

    hw["neuron"] = "emulated (no Neuron toolchain)" if nki_compat.EMULATED else "nki importable"
    return hw


def step_backends(out: Path, summary: dict, say: Callable[[str], None]) -> str:
    from ceiling.backends import report

    summary["hardware"] = detect_hardware()
    rows = list(report())
    _write_json(out / "backends.json", rows)
    summary["backends"] = {f"{r['op']}/{r['backend']}": r["mode"] for r in rows}
    runs = sum(r["mode"] != "unavailable" for r in rows)
    return f"ok: {runs} of {len(rows)} op/backend pairs run here"


def step_host(out: Path, summary: dict, say: Callable[[str], None]) -> str:
    """This machine's own ceilings, measured now, before the compile workers start."""
    from ceiling.microbench import summary as headline
    from ceiling.microbench.runner import run

    (outcome,) = run(["host"], out / "records", "cpu", quick=True, progress=say, isolate=False)
    if outcome.status != "ok":
        raise RuntimeError(f"host suite {outcome.status}: {outcome.reason}")
    summary["host ceilings"] = {f"{what} {case}".strip(): value for what, case, value in headline.rows(outcome.records)}
    return f"ok: {len(outcome.records)} records"


def step_proofs(out: Path, summary: dict, say: Callable[[str], None]) -> str:
    """The proofs for the report: the contracts the solver decides in full (``ceiling verify --all``
    runs the rest), the TMA descriptors and the Gluon protocols, from the cache when their digests match."""
    from ceiling.verify import launchers, project

    results = []
    for entry, rs, cached in project.verify_all(entries=project.decided()):
        say(f"{entry.name}@{entry.target}{' (cached)' if cached else ''}")
        results += rs
    for group, rs, cached in launchers.verify_all():
        say(f"{group}{' (cached)' if cached else ''}")
        results += rs
    _write_json(out / "proofs.json", [r.as_dict() for r in results])
    counts = {s: sum(r.status.value == s for r in results) for s in ("proved", "counterexample", "unknown")}
    summary["proofs"] = counts
    bad = [r for r in results if r.status.value == "counterexample"]
    if bad:
        return f"failed: {bad[0].kernel} {bad[0].property}: {bad[0].counterexample}"[:300]
    return f"ok: {counts['proved']} proved, {counts['unknown']} unknown, of {len(results)}"


def step_report(out: Path, summary: dict, say: Callable[[str], None]) -> str:
    from ceiling.roofline.analysis import report_step

    paths = report_step(out, summary, progress=say)
    return f"ok: {paths['html']}"


def _isa_records(done: list) -> tuple[list, dict]:
    """The static records of the ISA rows, and one JSON file's rows per (op, target)."""
    from ceiling.microbench.records import Record, host_provenance

    records, files = [], defaultdict(list)
    for d in done:
        files[(d.task.op, d.task.where)] += d.result
        prov = host_provenance(device=f"target {d.task.where} (compiled on the host)")
        for r in d.result:
            for metric, unit in (("registers", "count"), ("spill_bytes", "B"), ("shared_bytes", "B"),
                                 ("tensor_core_instructions", "count")):
                if metric in r:
                    records.append(Record(kind="static", op=d.task.op, name=r.get("name", d.task.op), metric=metric,
                                          value=float(r[metric]), unit=unit, backend=d.task.where,
                                          config=r.get("config", {}), method="static", provenance=prov))
    return records, files


def _smoke_records(results: list) -> list:
    from ceiling.microbench.records import Record, host_provenance

    prov = host_provenance()
    return [Record(kind="correctness", op=r.op, name=r.case, metric="max-abs-error", value=r.error, unit="1",
                   backend=r.backend, method=r.mode, extra={"bound": r.bound, "passed": r.passed, "detail": r.detail},
                   provenance=prov)
            for r in results if r.error == r.error]


def steps_in_pool(out: Path, summary: dict, progress: StepProgress, full_isa: bool, jobs: int) -> None:
    """The ISA inspection and the correctness smoke, side by side on ``jobs`` worker processes."""
    from ceiling.smoke import SmokeResult
    from ceiling.microbench.records import append
    from ceiling.roofline import run_tasks

    titles = {"isa": "ISA of shipped configs" + (" (all)" if full_isa else " (representatives)"),
              "smoke": "correctness smoke"}
    start = time.perf_counter()
    tasks = {"isa": run_tasks.isa_tasks(full=full_isa), "smoke": run_tasks.smoke_tasks()}
    bars = {kind: progress.step(titles[kind], len(ts)) for kind, ts in tasks.items()}
    done: dict[str, list] = {"isa": [], "smoke": []}
    ended: dict[str, float] = {}

    def on_done(d) -> None:
        kind = d.task.kind
        done[kind].append(d)
        if d.error:
            state = "failed"
            progress.note(f"{titles[kind]}: {d.task.label} failed: {d.error}")
        elif kind == "smoke":
            bad = [r for r in d.result if not r["passed"]]
            state = f"{len(d.result) - len(bad)}/{len(d.result)} within bounds"
            for r in bad:
                progress.note(f"correctness smoke: {r['op']}/{r['backend']} {r['case']}: FAIL error {r['error']:.3g} "
                              f"> bound {r['bound']:.3g} {r['detail']}")
        else:
            state = "ok"
        progress.advance(bars[kind], f"{d.task.label} {state} ({d.seconds:.1f} s)")
        if len(done[kind]) == len(tasks[kind]):
            ended[kind] = time.perf_counter()

    finished = run_tasks.run([t for ts in tasks.values() for t in ts], jobs, on_done)
    _write_json(out / "timings.json", sorted(
        ({"task": d.task.label, "kind": d.task.kind, "wall_s": round(d.seconds, 2), "cpu_s": round(d.cpu_seconds, 2),
          "error": d.error} for d in finished), key=lambda row: -row["cpu_s"]))

    # ISA: one JSON file per (op, target), static records, a count (or the failure) per (op, target)
    records, files = _isa_records([d for d in done["isa"] if not d.error])
    (out / "isa").mkdir(exist_ok=True)
    for (op, target), rows in files.items():
        _write_json(out / "isa" / f"{op}-{target}.json", rows)
    append(out / "records", records)
    counts: dict[str, object] = {f"{op}/{target}": len(rows) for (op, target), rows in files.items()}
    failed = [d for d in done["isa"] if d.error]
    for d in failed:
        counts[f"{d.task.op}/{d.task.where}"] = f"failed: {d.task.spec or 'inspection'}: {d.error}"[:300]
    summary["isa"] = counts
    status = (f"ok: {len(records)} facts of {sum(len(d.result) for d in done['isa'])} kernels on "
              f"{len(files)} op/target pairs" if not failed else
              f"failed: {len(failed)} of {len(done['isa'])} compiles ({failed[0].task.label}: {failed[0].error})")
    _finish(summary, progress, bars["isa"], titles["isa"], status, ended.get("isa", time.perf_counter()) - start)

    # smoke
    results = [SmokeResult(**r) for d in done["smoke"] for r in d.result]
    results += [SmokeResult(d.task.op, d.task.where, "", "run", float("nan"), 0.0, False, d.error)
                for d in done["smoke"] if d.error]
    _write_json(out / "correctness.json", [r.as_dict() for r in results])
    append(out / "records", _smoke_records(results))
    summary["correctness"] = {f"{r.op}/{r.backend}: {r.case}": ("pass" if r.passed else f"FAIL {r.detail}")
                              for r in results}
    bad = [r for r in results if not r.passed]
    pairs = len({(r.op, r.backend) for r in results})
    status = (f"ok: {len(results)} checks on {pairs} op/backend pairs" if not bad else
              "failed: " + "; ".join(f"{r.op}/{r.backend} {r.case}" for r in bad)[:300])
    _finish(summary, progress, bars["smoke"], titles["smoke"], status, ended.get("smoke", time.perf_counter()) - start)


def _finish(summary: dict, progress: StepProgress, bar, title: str, status: str, seconds: float) -> None:
    summary["steps"][title] = {"status": status, "seconds": round(seconds, 1)}
    progress.finish(bar, status)


def _in_process(out: Path, summary: dict, progress: StepProgress, title: str,
                step: Callable[[Path, dict, Callable[[str], None]], str]) -> None:
    bar = progress.step(title)
    start = time.perf_counter()
    try:
        status = step(out, summary, lambda msg: progress.advance(bar, msg))
    except Exception as exc:  # noqa: BLE001 - record and go on
        status = f"failed: {type(exc).__name__}: {exc}"
        with (out / "errors.log").open("a") as log:
            log.write(f"== {title}\n{traceback.format_exc()}\n")
    _finish(summary, progress, bar, title, status, time.perf_counter() - start)


def run(
    out: Path = typer.Option(Path("ceiling-run"), "--out", "-o", file_okay=False, help="Folder for the results."),
    full_isa: bool = typer.Option(False, "--full-isa", help="Compile every shipped config for the ISA table, "
                                  "not one per kernel function and target (several times longer)."),
    jobs: int = typer.Option(0, "--jobs", "-j", min=0, help="Worker processes for the compiles and the smoke "
                             "(default: one per CPU core).", show_default=False),
    as_json: bool = typer.Option(False, "--json", help="Print the run's summary as JSON (progress goes to stderr)."),
) -> None:
    """Run the main job on this machine: backend report, host ceilings, ISA inspection of the shipped
    kernel configs for every target, a correctness smoke of every op on every backend that runs here,
    and the report. Works on a CPU-only machine; writes JSON summaries, Parquet records and the
    report to OUT."""
    console = tables.console(stderr=as_json)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {"steps": {}, "options": {"full_isa": full_isa}}
    start = time.perf_counter()
    with StepProgress(console) as progress:
        _in_process(out, summary, progress, "backend report", step_backends)
        _in_process(out, summary, progress, "host ceilings (microbench host --quick)", step_host)
        try:
            steps_in_pool(out, summary, progress, full_isa, jobs or os.cpu_count() or 1)
        except Exception as exc:  # noqa: BLE001 - the report still gets written
            summary["steps"]["ISA and correctness smoke"] = {"status": f"failed: {type(exc).__name__}: {exc}",
                                                             "seconds": 0.0}
            with (out / "errors.log").open("a") as log:
                log.write(f"== ISA and correctness smoke\n{traceback.format_exc()}\n")
        _in_process(out, summary, progress, "proofs (the decided contracts, TMA, Gluon protocol)", step_proofs)
        _in_process(out, summary, progress, "ceilings, model, plots, templates and report", step_report)
    summary["seconds"] = round(time.perf_counter() - start, 1)
    _write_json(out / "summary.json", summary)
    failed = any(not info["status"].startswith("ok") for info in summary["steps"].values())
    report = summary.get("report", {})
    if as_json:
        typer.echo(json.dumps(summary, indent=2, default=str))
    else:
        table = key_table(f"ceiling run -> {out} ({summary['seconds']:.0f} s)", "step", ["status", "s"],
                          numeric=("s",))
        for title, info in summary["steps"].items():
            table.add_row(title, info["status"], f"{info['seconds']:.1f}")
        console.print(table)
        if "html" in report:
            console.print(f"report: {report['html']} (and {report['markdown']})", highlight=False, soft_wrap=True)
        else:
            console.print(f"no report written; see {out / 'errors.log'}", highlight=False, soft_wrap=True)
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
