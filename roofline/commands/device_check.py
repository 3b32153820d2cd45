"""``ceiling device-check``: the whole check of a GPU machine in one command, within minutes.

    ceiling device-check --out results/h200-2026-11-30

In order, each in its own process with its own slice of the time budget (so a
crash or a sticky CUDA error in one part cannot take the rest down, and a hang
is cut off):

1. correctness of every op on the device (``ceiling bench --shapes check --check-only``:
   fresh random inputs, odd sizes, the error-ratio rule against the float32/64 oracle);
2. the GEMM benchmark suite (``gemm-llm``) against ``torch.matmul``, after measuring
   this GPU's practical ceilings (bf16 matmul at 8192^3, a 1 GiB copy);
3. the attention benchmark subset against SDPA and FlashAttention;
4. the AlphaFold-3 triangle ops against their eager PyTorch model code,
   ``torch.compile`` of it and cuEquivariance (when ``ceiling.triangle.bench`` exists), and
   one Boltz-2 Pairformer pair stack patched with them against Boltz eager, compiled and
   with cuEquivariance (when Boltz is installed);
5. the GPU microbenchmark suites, each checked against its model
   (``python -m ceiling.microbench.selfcheck``).

Every benchmarked case is also checked against its oracle before it is timed.

Everything lands under ``--out``: the Parquet store ``records/``, one JSONL file
per part and ``records.jsonl`` with all of them, ``device-check.log`` and each
part's output. Unused time of one part passes to the next; a part that runs out
of time stops starting new cases and says which it left. The table of speedups
is printed last. Without a GPU the command refuses to run, exit code 2.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

if TYPE_CHECKING:
    from ceiling.microbench.benchmarks.suite import Outcome

REPO = Path(__file__).resolve().parents[2]

# The GPU microbenchmark suites, most telling first; the host suite (CPU only) is left out.
MICROBENCH_SUITES = ("clocks", "ceilings", "bank-conflicts", "occupancy")


@dataclass(frozen=True)
class Part:
    name: str
    share_s: float  # planned seconds; unused time carries over to the next part
    argv: tuple[str, ...]  # arguments after ``python``
    bench: bool = True  # a ``ceiling bench`` run (takes --budget-s, writes <name>-rows.json)


def gpu_refusal() -> str | None:
    """Why this machine cannot run the device check, or None when it can."""
    try:
        import torch
    except ImportError as exc:
        return f"PyTorch is not installed ({exc})"
    if not torch.cuda.is_available():
        build = torch.version.cuda or getattr(torch.version, "hip", None) or "a CPU-only build"
        return f"no GPU is visible to PyTorch {torch.__version__} ({build}); the device check needs a CUDA or ROCm GPU"
    return None


def plan(out: Path, ops: list[str], microbench: bool = True) -> list[Part]:
    cli = ("-m", "ceiling.roofline.cli", "bench")
    ceilings = str(out / "ceilings.json")
    if "gemm" in ops and "scaled_gemm" not in ops:  # the GEMM's suites are bf16 and FP8
        ops = [*ops, "scaled_gemm"]
    checked = [op for op in ops if op in ("gemm", "scaled_gemm", "attention")]  # the ops with a "check" suite
    parts = [Part("correctness", 50, (*cli, *checked, "--shapes", "check", "--check-only"))] if checked else []
    if "gemm" in ops:
        parts.append(Part("gemm", 100, (*cli, "gemm", "--shapes", "device", "--ceilings", ceilings)))
    if "scaled_gemm" in ops:
        parts.append(Part("scaled_gemm", 100, (*cli, "scaled_gemm", "--shapes", "device", "--ceilings", ceilings)))
    if "attention" in ops:
        parts.append(Part("attention", 100, (*cli, "attention", "--shapes", "device", "--ceilings", ceilings)))
    from ceiling.microbench.benchmarks import unavailable

    # Ops whose cases cannot even be built in this checkout get no part (the log says why).
    triangle = [op for op in ops if op.startswith("triangle") and not unavailable(op)]
    if triangle:
        parts.append(Part("triangle", 60, (*cli, *triangle, "--shapes", "device", "--ceilings", ceilings)))
    if "pair_stack" in ops and not unavailable("pair_stack"):  # needs Boltz (its layers are the baseline)
        parts.append(Part("pair_stack", 90, (*cli, "pair_stack", "--shapes", "device", "--ceilings", ceilings)))
    # The suites write their records as each finishes and check them against their models.
    if microbench:
        selfcheck = ("-m", "ceiling.microbench.selfcheck", "--require-gpu", "--out", str(out / "microbench"), *MICROBENCH_SUITES)
        parts.append(Part("microbench", 110, selfcheck, bench=False))
    return parts


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"  # each part's output file follows it live
    return env


def _environment(out: Path) -> dict:
    from ceiling.backends import report
    from ceiling.microbench.records import library_versions

    import torch

    info = {
        "gpu": torch.cuda.get_device_name(),
        "gpu_count": torch.cuda.device_count(),
        "capability": ".".join(map(str, torch.cuda.get_device_capability())),
        "versions": library_versions(),
        "backends": report(),
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(),
    }
    (out / "environment.json").write_text(json.dumps(info, indent=1))
    return info


def device_check(
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for everything (default: device-check-<UTC time>)."),
    budget_s: float = typer.Option(420.0, "--budget-s", help="Total seconds for all parts (the check is meant to fit in 8 minutes)."),
    ops: Optional[list[str]] = typer.Option(None, "--op", help="Limit to these ops (repeatable; default: every op)."),
    microbench: bool = typer.Option(True, "--microbench/--no-microbench", help="Run the GPU microbenchmark suites last."),
    as_json: bool = typer.Option(False, "--json", help="Print the parts' statuses and the merged outcome as JSON "
                                 "(the log goes to stderr)."),
) -> None:
    """Correctness, benchmarks and microbenchmarks on this GPU, with all records in one folder."""
    from ceiling.roofline.commands.bench import console_for

    from ceiling.microbench.benchmarks import OPS

    unknown = [op for op in ops or () if op not in OPS]
    if unknown:
        raise typer.BadParameter(f"expected ops among {sorted(OPS)}, got {unknown}", param_hint="--op")
    if not budget_s > 0:
        raise typer.BadParameter(f"expected a positive number of seconds, got {budget_s}", param_hint="--budget-s")
    console = console_for(stderr=as_json)
    refusal = gpu_refusal()
    if refusal:
        typer.echo(f"ceiling device-check refuses to run: {refusal}", err=True)
        raise typer.Exit(2)

    from ceiling.roofline.commands.bench import hbm_floor, print_table

    start = time.monotonic()
    out = (out or Path(f"device-check-{_dt.datetime.now(_dt.timezone.utc):%Y%m%dT%H%M%SZ}")).resolve()
    out.mkdir(parents=True, exist_ok=True)  # absolute: the parts run from the repository root
    log_path = out / "device-check.log"
    chosen = ops or list(OPS)

    def log(msg: str) -> None:
        line = f"{_dt.datetime.now(_dt.timezone.utc):%H:%M:%S} {msg}"
        console.print(line, highlight=False)
        with open(log_path, "a") as f:
            f.write(line + "\n")

    info = _environment(out)
    log(f"device check on {info['gpu']} (sm/gfx {info['capability']}), budget {budget_s:.0f}s, out {out}")
    for row in info["backends"]:
        log(f"  backend {row['op']}/{row['backend']}: {row['mode']} ({row['reason']})")
    from ceiling.microbench.benchmarks import unavailable

    for op in chosen:
        if why := unavailable(op):
            log(f"  {op}: no benchmark cases ({why})")

    merged, statuses, clean = run_parts(plan(out, chosen, microbench), out, budget_s - (time.monotonic() - start), log)
    micro = _microbench_records(out / "microbench")
    if micro:  # one store for everything
        from ceiling.microbench.records import append

        append(out / "records", micro)
    _merge_jsonl(out, micro)
    total = time.monotonic() - start
    log(f"done in {total:.0f}s; {merged.records + len(micro)} records under {out}")
    if as_json:
        sys.stdout.write(json.dumps({"out": str(out), "seconds": round(total, 1), "parts": statuses,
                                     "microbench_records": len(micro), "outcome": merged.as_dict()},
                                    indent=1, default=str) + "\n")
        if merged.failed or not clean:
            raise typer.Exit(1)
        return
    console.rule("device check")
    for s in statuses:
        console.print(f"  {s}", highlight=False)
    if micro:
        console.print(f"  microbench: {len(micro)} records", highlight=False)
    print_table(merged, console, title=f"{info['gpu']}: ours against the baselines (median)", floor=hbm_floor(info["gpu"]))
    if merged.failed or not clean:
        raise typer.Exit(1)


def run_parts(parts: list[Part], out: Path, budget_s: float, log) -> tuple["Outcome", list[str], bool]:
    """Run each part in its own process within its slice of ``budget_s``; merge their outcomes.

    A part gets its planned share plus whatever the parts before it left unused
    (the last part gets all that remains); it is killed 10 s after its slice.
    Returns the merged outcome, one status line per part, and whether every
    part that ran exited cleanly (a part's own failures are in the outcome).
    """
    from ceiling.microbench.benchmarks.suite import Outcome

    start = time.monotonic()
    merged = Outcome()
    statuses: list[str] = []
    clean = True
    carry = 0.0
    for i, part in enumerate(parts):
        remaining = budget_s - (time.monotonic() - start)
        last = i == len(parts) - 1
        allot = remaining if last else min(part.share_s + carry, remaining)
        if allot < 15:
            statuses.append(f"{part.name}: not run (time budget spent)")
            log(f"{part.name}: skipped, only {remaining:.0f}s of the budget left")
            continue
        argv = [sys.executable, *part.argv]
        if part.bench:
            # Stop starting cases a little early; process start and the last case take time too.
            argv += ["--out", str(out), "--tag", part.name, "--budget-s", f"{max(5.0, allot - 25):.0f}"]
        log(f"{part.name}: started, {allot:.0f}s allotted")
        t0 = time.monotonic()
        with open(out / f"{part.name}.out", "w") as stream:
            try:
                proc = subprocess.run(
                    argv, cwd=REPO, env=_env(), stdout=stream, stderr=subprocess.STDOUT, timeout=allot + 10
                )
                rc: int | str = proc.returncode
            except subprocess.TimeoutExpired:
                rc = "killed at its time limit"
        took = time.monotonic() - t0
        carry = max(0.0, allot - took)
        if rc == 0:
            status = "ok"
        elif rc == 1 and part.bench:
            status = "ran, with failures (see the table)"
        else:
            status = f"exit {rc}; see {part.name}.out"
            clean = False
        statuses.append(f"{part.name}: {status} ({took:.0f}s)")
        log(f"{part.name}: {status} after {took:.0f}s")
        rows_file = out / f"{part.name}-rows.json"
        if part.bench and rows_file.exists():
            got = Outcome.from_dict(json.loads(rows_file.read_text()))
            merged.rows += got.rows
            merged.problems += got.problems
            merged.checks += got.checks
            merged.records += got.records
            merged.cases_left += got.cases_left

    return merged, statuses, clean


def _microbench_records(folder: Path) -> list:
    """The microbenchmarks' records, wherever under ``folder`` they were stored."""
    if not folder.exists():
        return []
    from ceiling.microbench.records import load

    found = []
    for store in sorted({p.parent for p in folder.rglob("part-*.parquet")}):
        try:
            found += load(store)
        except Exception:  # noqa: BLE001 - an unreadable store is reported by its count
            continue
    return found


def _merge_jsonl(out: Path, extra: list) -> None:
    """``records.jsonl``: every part's JSONL records, then the microbenchmarks'."""
    with open(out / "records.jsonl", "w") as merged:
        for path in sorted(out.glob("*.jsonl")):
            if path.name != "records.jsonl":
                merged.write(path.read_text())
        for r in extra:
            merged.write(r.model_dump_json() + "\n")


def register(app: typer.Typer) -> None:
    app.command("device-check")(device_check)
