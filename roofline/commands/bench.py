"""``ceiling bench``: our kernels against the vendor baselines, outside pytest.

    ceiling bench                        # every op, full suites on a GPU, tiny ones on a CPU
    ceiling bench gemm --shapes gemm-llm --out results/h200
    ceiling bench attention --shapes tiny

The same cases, checks, timing and records as the pytest benchmark files
(:mod:`ceiling.microbench.benchmarks`); a summary table of speedups against each
baseline is printed at the end.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from ceiling.roofline.tables import key_table


def _fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e6:,.1f} us" if s < 1e-2 else f"{s * 1e3:,.2f} ms"


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return ""
    return f"{n / 2**30:,.2f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def _with_peak(t: str, peak: int | None) -> str:
    """A time with the call's peak memory beside it, when the check run measured one."""
    return t if peak is None or t == "-" else f"{t}, {_fmt_bytes(peak)}"


def console_for(stderr: bool = False) -> Console:
    """A console wide enough for the table when the output is a file or a pipe."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 160)


def hbm_floor(device_name: str | None):
    """``row -> seconds or None``: the roofline's HBM floor of a benchmark row, its bytes (A + B + C) over
    the HBM bandwidth measured on this device in the committed records (4.34 TB/s read on the H200),
    for rows the roofline puts under the memory roof (intensity below the ridge of the row's dtype);
    None when the records know no HBM bandwidth for the device."""
    from ceiling.roofline import ceilings, store

    try:
        dc = ceilings.for_device(store.load(), device_name) if device_name else None
    except KeyError:
        return None
    if dc is None or "hbm" not in dc.bandwidth:
        return None
    hbm = dc.bandwidth["hbm"].value

    def floor(row) -> float | None:
        if not row.bytes or not row.flops:
            return None
        dtype = next((d for d in sorted(dc.compute, key=len, reverse=True) if f"-{d}" in row.shape), "bfloat16")
        dtype = "float8" if "float8" in row.shape and "float8" in dc.compute else dtype
        peak = dc.peak(dtype)
        if peak is not None and row.flops / peak.value > row.bytes / hbm:
            return None  # under the compute roof: the HBM floor is not the bound
        return row.bytes / hbm

    return floor


def print_table(outcome, console: Console, *, title: str = "Speed against the baselines (median)", max_problems: int = 12,
                floor=None) -> None:
    """The summary: one line per (shape, ours), a column per baseline with its time and our speedup over it;
    with ``floor`` (:func:`hbm_floor`), the HBM floor of each memory-bound shape and our share of it."""
    if outcome.rows:
        baselines: list[str] = []
        lines: dict[tuple[str, str, str], dict] = {}
        for r in outcome.rows:
            if r.baseline != "-" and r.baseline not in baselines:
                baselines.append(r.baseline)
            line = lines.setdefault((r.op, r.shape, r.ours), {"ours_s": r.ours_s, "ours_peak": r.ours_peak_bytes,
                                                              "floor_s": floor(r) if floor else None})
            if r.baseline != "-":
                line[r.baseline] = (r.baseline_s, r.speedup, r.baseline_peak_bytes)
        floors = ["HBM floor (ours at)"] if any(line["floor_s"] for line in lines.values()) else []
        speeds = [f"{b} (speedup)" for b in baselines]
        table = key_table(title, ["op", "shape"], ["ours", "ours time, peak memory", *floors, *speeds],
                          numeric=["ours time, peak memory", *floors, *speeds])
        for (op, shape, ours), line in lines.items():
            cells = []
            if floors:
                f, t = line["floor_s"], line["ours_s"]
                cells.append("-" if not f else f"{_fmt_time(f)}" + (f" ({f / t:.0%})" if t else ""))
            for b in baselines:
                t, x, peak = line.get(b, (None, None, None))
                speed = "" if x is None else f" ([{'green' if x >= 1 else 'red'}]{x:.2f}x[/])"
                cells.append("-" if t is None else f"{_with_peak(_fmt_time(t), peak)}{speed}")
            table.add_row(op, shape, ours, _with_peak(_fmt_time(line["ours_s"]), line["ours_peak"]), *cells)
        console.print(table)
    if outcome.checks:
        bad = [c for c in outcome.checks if not c["passed"]]
        console.print(f"correctness: {len(outcome.checks) - len(bad)} of {len(outcome.checks)} outputs within bounds")
    seen = set()
    shown = 0
    for p in outcome.problems:
        key = (p["impl"], p["status"], p["why"])
        if p["status"] == "skipped" and key in seen:
            continue  # one line per skip reason, not per shape
        seen.add(key)
        shown += 1
        if shown > max_problems:
            continue
        color = "yellow" if p["status"] == "skipped" else "red"
        where = p["impl"] if p["status"] == "skipped" else f"{p['group']} {p['impl']}"
        console.print(f"[{color}]{p['status']}[/] {where}: {p['why']}", highlight=False)
    if shown > max_problems:
        console.print(f"... and {shown - max_problems} more skips or failures (see the *-rows.json files)")
    if outcome.cases_left:
        console.print(f"[yellow]not run (time budget spent)[/]: {len(outcome.cases_left)} case(s): "
                      + ", ".join(outcome.cases_left[:8]) + (" ..." if len(outcome.cases_left) > 8 else ""))


def resolve_device(device: str | None) -> str:
    """``device`` as torch names it ("cpu", "cuda", "cuda:1"), or a usage error naming --device."""
    if device:
        from ceiling.microbench.runner import parse_device

        try:
            parse_device(device)
        except ValueError as err:
            raise typer.BadParameter(f"expected cpu, cuda or cuda:N, got {device!r}", param_hint="--device") from err
        return device
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def load_or_measure_ceilings(path: Path | None, device: str, sink) -> dict:
    """Measured ceilings from ``path`` if it exists; else measure them here (GPU only) and save them."""
    from ceiling.microbench.peaks import Ceiling
    from ceiling.microbench.timing import on_gpu

    if path is not None and path.exists():
        data = json.loads(path.read_text())
        return {dtype: Ceiling(**c) for dtype, c in data.items()}
    if not on_gpu(device):
        return {}
    from ceiling.microbench.benchmarks.runner import measure_ceilings

    ceilings, recs = measure_ceilings(device)
    sink.write(recs)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({d: c.__dict__ for d, c in ceilings.items()}, indent=1))
    return ceilings


def bench(
    ops: Optional[list[str]] = typer.Argument(None, help="Ops to run (default: every op with cases)."),
    shapes: Optional[str] = typer.Option(
        None, "--shapes", help="Shape suite: default, device, check, tiny, or an op's own (gemm-llm, attention...). "
        "Default: 'default' on a GPU, 'tiny' on a CPU."
    ),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for the records (Parquet + JSONL) and the summary."),
    device: Optional[str] = typer.Option(None, help="cuda, cuda:1 or cpu (default: cuda when visible)."),
    check_only: bool = typer.Option(False, "--check-only", help="Only check outputs against the oracle; no timing."),
    budget_s: Optional[float] = typer.Option(None, "--budget-s", min=0.001, help="Stop starting new cases after this many seconds."),
    ceilings: Optional[Path] = typer.Option(
        None, "--ceilings", help="JSON of measured ceilings to reuse; measured here (and saved there) when missing."
    ),
    tag: str = typer.Option("bench", help="Name of the JSONL and summary files under --out."),
    seed: int = typer.Option(0, help="Seed of the first random input set."),
    as_json: bool = typer.Option(False, "--json", help="Print the outcome as JSON instead of a table."),
) -> None:
    """Time every case of the chosen ops against each baseline and print the speedups."""
    from ceiling.microbench.benchmarks import OPS
    from ceiling.microbench.benchmarks.suite import Sink, run, select_cases
    from ceiling.microbench.timing import TimingProtocol, on_gpu

    start = time.monotonic()
    console = console_for(stderr=as_json)
    chosen_ops = ops or list(OPS)
    unknown = [op for op in chosen_ops if op not in OPS]
    if unknown:
        raise typer.BadParameter(f"expected ops among {sorted(OPS)}, got {unknown}", param_hint="OPS")
    dev = resolve_device(device)
    suite = shapes or ("default" if on_gpu(dev) else "tiny")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(out / f"{tag}.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger("ceiling").addHandler(handler)
        logging.getLogger("ceiling").setLevel(logging.INFO)
    sink = Sink(out, tag)
    cases, missing = select_cases(chosen_ops, suite, dev)
    if not cases:
        raise typer.BadParameter(f"expected a shape suite of {chosen_ops}, got {suite!r} ({'; '.join(missing)})",
                                 param_hint="--shapes")
    for m in missing:
        console.print(f"[yellow]{m}[/]")
    # On a CPU the figures only show the harness works: keep the run short, and on
    # one thread (tiny ops on a busy machine spend their time waiting for a thread pool).
    if on_gpu(dev):
        protocol = TimingProtocol()
    else:
        protocol = TimingProtocol(warmup_s=0.001, target_s=0.01, min_reps=3, max_reps=10)
        import torch

        torch.set_num_threads(1)
    log = logging.getLogger("ceiling.bench")
    measured: dict = {}
    if not check_only:
        try:
            measured = load_or_measure_ceilings(ceilings, dev, sink)
        except Exception as exc:  # noqa: BLE001 - without measured ceilings the datasheet ones still apply
            log.warning("measuring the ceilings failed: %s: %s", exc.__class__.__name__, exc)
            console.print(f"[yellow]measuring the ceilings failed ({exc}); roofline fractions use the datasheet only[/]")
    deadline = start + budget_s if budget_s else None

    def progress(result) -> None:
        done = ", ".join(
            f"{n}={_fmt_time(r.stats.median)}" if r.stats else f"{n} {r.status}"
            for n, r in result.impls.items()
            if r.status != "skipped"
        )
        log.info("%s %.1fs %s", result.case.group, result.seconds, done)
        if not as_json:
            console.print(f"[dim]{result.case.group}: {done or 'nothing timed'} ({result.seconds:.1f}s)[/]", highlight=False)

    outcome = run(
        cases, dev, sink=sink, check_only=check_only, protocol=protocol, deadline=deadline, measured=measured,
        seed=seed, on_case=progress,
    )
    if as_json:
        sys.stdout.write(json.dumps(outcome.as_dict(), indent=1, default=str) + "\n")
    else:
        title = f"{', '.join(chosen_ops)} on {dev}, suite {suite}"
        if not on_gpu(dev):
            title += " (CPU: kernels interpreted; the times only show the harness runs)"
        from ceiling.microbench.benchmarks.runner import device_name

        print_table(outcome, console, title=title, floor=hbm_floor(device_name(dev)) if on_gpu(dev) else None)
        if out is not None:
            console.print(f"{outcome.records} records in {out}")
    if outcome.failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
