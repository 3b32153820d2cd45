"""Run microbenchmark suites, write their records, report what ran and what could not.

``run_suites(["host", "clocks"], "records/")`` runs each suite, appends its
records to the store atomically (one Parquet part per suite), and returns all
records. A suite that cannot run here is reported with the reason and the
others go on. GPU suites run in a child process with a time limit, so a device
fault or a hang in one suite does not stop the rest.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from . import records as _records
from .records import Record
from .suites import ORDER, SuiteContext, Unavailable, get


@dataclass
class SuiteOutcome:
    suite: str
    status: str  # "ok", "unavailable", "failed"
    reason: str = ""
    seconds: float = 0.0
    records: list[Record] = field(default_factory=list)


def parse_device(device: str | int | None) -> int | None:
    """None/"auto"/"cuda" -> device 0 if any; "cpu" -> no GPU; "cuda:N" or N -> device N."""
    if device is None:
        return 0
    if isinstance(device, int):
        return device
    s = str(device).strip().lower()
    if s in ("auto", "cuda", "gpu"):
        return 0
    if s == "cpu":
        return None
    s = s.removeprefix("cuda:").removeprefix("gpu:")
    if s.isdigit():
        return int(s)
    raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or N, got {device!r}")


def _child(name: str, ctx_fields: dict, conn) -> None:
    """Runs in the child process: one suite, records sent back as dicts."""
    try:
        ctx = SuiteContext(progress=lambda m: conn.send(("progress", m)), **ctx_fields)
        out = get(name).run(ctx)
        conn.send(("records", [r.model_dump() for r in out]))
    except Unavailable as exc:
        conn.send(("unavailable", str(exc)))
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        conn.send(("failed", f"{exc.__class__.__name__}: {exc}\n{traceback.format_exc(limit=6)}"))
    finally:
        conn.close()


def _run_isolated(name: str, ctx: SuiteContext, timeout_s: float) -> tuple[str, str, list[Record]]:
    spawn = mp.get_context("spawn")
    parent, child = spawn.Pipe(duplex=False)
    fields = {"device_index": ctx.device_index, "quick": ctx.quick, "runtime": ctx.runtime}
    proc = spawn.Process(target=_child, args=(name, fields, child), daemon=True)
    proc.start()
    child.close()
    deadline = time.monotonic() + timeout_s
    status, reason, recs = "failed", "the suite's process ended without a result", []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            status, reason = "failed", f"timed out after {timeout_s:.0f} s"
            proc.kill()
            break
        if parent.poll(min(left, 0.5)):
            try:
                kind, payload = parent.recv()
            except EOFError:
                break
            if kind == "progress":
                ctx.progress(payload)
                continue
            if kind == "records":
                status, reason, recs = "ok", "", [Record.model_validate(d) for d in payload]
            else:
                status, reason = kind, payload
            break
        if not proc.is_alive() and not parent.poll():
            reason = f"the suite's process died (exit code {proc.exitcode})"
            break
    proc.join(timeout=10)
    if proc.is_alive():
        proc.kill()
        proc.join(timeout=10)
    parent.close()
    return status, reason, recs


def run_suite(name: str, out_dir: str | os.PathLike | None, ctx: SuiteContext, gpu_index: int | None,
              isolate: bool | str = True) -> SuiteOutcome:
    """Run one suite; ``isolate``: True runs GPU suites in a child process, "all" every suite, False none."""
    suite = get(name)
    t0 = time.perf_counter()
    if suite.needs_gpu and gpu_index is None:
        return SuiteOutcome(name, "unavailable", "--device cpu: a GPU suite, not run on the CPU")
    try:
        why_not = suite.check(ctx)
    except Exception as exc:  # noqa: BLE001
        why_not = f"availability check failed: {exc}"
    if why_not:
        return SuiteOutcome(name, "unavailable", why_not)
    if isolate == "all" or (suite.needs_gpu and isolate):
        status, reason, recs = _run_isolated(name, ctx, suite.timeout_s)
    else:
        try:
            status, reason, recs = "ok", "", suite.run(ctx)
        except Unavailable as exc:
            status, reason, recs = "unavailable", str(exc), []
        except Exception as exc:  # noqa: BLE001
            status, reason, recs = "failed", f"{exc.__class__.__name__}: {exc}", []
    outcome = SuiteOutcome(name, status, reason, time.perf_counter() - t0, recs)
    if out_dir is not None and recs:
        written, refused = _records.append(out_dir, recs)
        if refused:
            outcome.reason = (outcome.reason + f"; {len(refused)} records refused: {refused[:3]}").lstrip("; ")
    return outcome


def run(
    suites: Iterable[str] | None,
    out_dir: str | os.PathLike | None,
    device: str | int | None = None,
    *,
    quick: bool = False,
    progress: Callable[[str], None] | None = None,
    on_outcome: Callable[[SuiteOutcome], None] | None = None,
    isolate: bool | str = True,
    runtime: str = "auto",
) -> list[SuiteOutcome]:
    """Run the suites in order; ``runtime`` ("auto", "cupy", "pycuda") is the GPU suites' library."""
    from .runtimes import CHOICES

    names = list(suites) if suites else list(ORDER)
    for n in names:
        get(n)  # unknown names fail before anything runs
    runtime = (runtime or "auto").strip().lower()
    if runtime not in CHOICES:
        raise ValueError(f"runtime must be one of {CHOICES}, got {runtime!r}")
    gpu_index = parse_device(device)
    ctx = SuiteContext(device_index=gpu_index or 0, quick=quick, runtime=runtime, progress=progress or (lambda m: None))
    outcomes = []
    for name in names:
        outcome = run_suite(name, out_dir, ctx, gpu_index, isolate=isolate)
        outcomes.append(outcome)
        if on_outcome:
            on_outcome(outcome)
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    return outcomes


def run_suites(suites: Iterable[str] | None, out_dir: str | os.PathLike | None, device: str | int | None = None,
               **kwargs) -> list[Record]:
    """Run the named suites (all when empty), write records to ``out_dir``, return every record."""
    return [r for o in run(suites, out_dir, device, **kwargs) for r in o.records]
