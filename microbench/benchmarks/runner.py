"""Run benchmark cases: check each implementation's output, time them together, make records.

One failing implementation or case never stops the others: its failure is kept
(with the exception text) and reported next to the measurements.
"""

from __future__ import annotations

import contextlib

import functools
import math
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ceiling.microbench.benchmarks.cases import Case, Check, Impl, error_ratio, nbytes
from ceiling.microbench.clocks import ClockSampler, nvml_device_facts
from ceiling.microbench.peaks import Ceiling, datasheet
from ceiling.microbench.records import Record, host_provenance
from ceiling.microbench.timing import (
    Stats,
    Timer,
    TimingProtocol,
    default_timers,
    l2_cache_bytes,
    measure,
    on_gpu,
    rotation_sets,
)


@dataclass
class ImplResult:
    impl: Impl
    stats: Stats | None = None
    check: Check | None = None
    error: str | None = None
    peak_bytes: int | None = None  # device memory above the inputs at the peak of one call (GPU only)

    @property
    def status(self) -> str:
        if self.impl.skip:
            return "skipped"
        if self.error:
            return "failed"
        if self.check is not None and not self.check.passed:
            return "wrong"
        return "measured" if self.stats else "checked"

    @property
    def why(self) -> str:
        if self.impl.skip:
            return self.impl.skip
        if self.error:
            return self.error
        if self.check is not None and not self.check.passed:
            return f"error {self.check.error:.3g} > bound {self.check.bound:.3g} ({self.check.rule})"
        return ""


@dataclass
class CaseResult:
    case: Case
    device: str
    impls: dict[str, ImplResult]
    rotation_sets: int = 0
    l2_bytes: int = 0
    clocks: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def median(self, name: str) -> float | None:
        r = self.impls.get(name)
        return r.stats.median if r is not None and r.stats is not None else None

    def speedups(self, ours: str) -> dict[str, float]:
        """Baseline median / our median, for every measured baseline (above 1: we are faster)."""
        mine = self.median(ours)
        if mine is None:
            return {}
        return {
            b.name: m / mine
            for b in self.case.baselines
            if (m := self.median(b.name)) is not None
        }


def _sync(device: str) -> None:
    if on_gpu(device):
        import torch

        torch.cuda.synchronize()


def _failure(exc: BaseException) -> str:
    last = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    where = f" at {last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno}" if last else ""
    return f"{exc.__class__.__name__}: {str(exc)[:300]}{where}"


def _detached(out: Any) -> Any:
    if isinstance(out, (tuple, list)):
        return tuple(_detached(o) for o in out)
    return out.detach() if hasattr(out, "detach") else out


@contextlib.contextmanager
def _peak_memory(device: str):
    """Yields a dict that gets "bytes": the peak memory allocated inside the block above what
    was allocated when it started (the call's working set and outputs). On a GPU from the
    caching allocator's statistics; on the CPU from the allocator events the profiler records
    (:func:`cpu_peak_bytes`)."""
    import gc

    # Garbage of earlier calls (reference cycles: autograd graphs, closures) is collected first,
    # or its release inside the block would be netted against the block's own allocations.
    gc.collect()
    found: dict[str, int] = {}
    if not on_gpu(device):
        with cpu_peak_bytes() as cpu:
            yield found
        if "bytes" in cpu:
            found["bytes"] = cpu["bytes"]
        return
    import torch

    try:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    except (AttributeError, RuntimeError):  # an allocator without statistics: no peak to report
        yield found
        return
    yield found
    torch.cuda.synchronize(device)
    found["bytes"] = int(torch.cuda.max_memory_allocated(device) - base)


@contextlib.contextmanager
def cpu_peak_bytes():
    """Yields a dict that gets "bytes": the largest running total of the CPU allocations and
    frees made inside the block (PyTorch's allocator only: memory a kernel interpreter
    allocates through NumPy is not counted). Empty when this PyTorch's profiler does not
    expose its memory events."""
    from torch.profiler import ProfilerActivity, profile

    found: dict[str, int] = {}
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _quiet_stderr():  # the profiler's backend logs each start and stop to the process's stderr
        prof.__enter__()
    try:
        yield found
    finally:
        with _quiet_stderr():
            prof.__exit__(None, None, None)
    try:
        # Stable sort on time alone: events that share a timestamp keep the order they were
        # recorded in (a free sorted before the allocation it follows would hide the peak).
        events = sorted(((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                         if e.name() == "[memory]" and e.device_type() == _cpu_device_type()), key=lambda e: e[0])
    except (AttributeError, RuntimeError):
        return
    total = peak = 0
    for _, nbytes in events:
        total += nbytes
        peak = max(peak, total)
    found["bytes"] = peak


@contextlib.contextmanager
def _quiet_stderr():
    """File descriptor 2 pointed at /dev/null for the block (C++ code writes there directly)."""
    import os
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _cpu_device_type():
    import torch

    return torch.autograd.DeviceType.CPU


def check_case(case: Case, device: str, *, seed: int = 0) -> tuple[CaseResult, Any]:
    """Run every implementation once on fresh random inputs and compare with the oracle.

    Ours must pass the error-ratio rule against the first baseline that ran;
    baselines are held to the per-dtype tolerance. Returns the result and the
    inputs (reused as the first rotation set).
    """
    result = CaseResult(case, device, {i.name: ImplResult(i) for i in case.impls})
    runnable = case.runnable
    if not runnable:
        return result, None
    inputs = case.make_inputs(seed, device)
    ref = case.reference(inputs)
    outs: dict[str, Any] = {}
    for impl in runnable:
        try:
            with _peak_memory(device) as peak:
                outs[impl.name] = _detached(case.select(impl.make(inputs)()))
                _sync(device)
            result.impls[impl.name].peak_bytes = peak.get("bytes")
        except Exception as exc:  # noqa: BLE001 - one implementation's failure is its own
            result.impls[impl.name].error = _failure(exc)
    framework = next((outs[b.name] for b in case.baselines if b.name in outs), None)
    for name, out in outs.items():
        role = result.impls[name].impl.role
        try:
            result.impls[name].check = error_ratio(
                name, out, framework if role == "ours" else None, ref, case.out_dtype or case.dtype
            )
        except Exception as exc:  # noqa: BLE001 - a malformed output (shape, count) is a failure
            result.impls[name].error = _failure(exc)
    return result, inputs


def run_case(
    case: Case,
    device: str,
    *,
    seed: int = 0,
    protocol: TimingProtocol | None = None,
    deadline: float | None = None,
    timers: Sequence[Timer] | None = None,
    memory_fraction: float = 0.25,
    sampler: Callable[[], Any] = ClockSampler,
) -> CaseResult:
    """Check, then time every implementation that is correct, interleaved, on rotated inputs."""
    t0 = time.monotonic()
    try:
        result, inputs0 = check_case(case, device, seed=seed)
    except Exception as exc:  # noqa: BLE001 - the inputs or the oracle failed: every impl fails with it
        result = CaseResult(case, device, {i.name: ImplResult(i) for i in case.impls})
        for r in result.impls.values():
            if r.impl.runs:
                r.error = f"case setup failed: {_failure(exc)}"
        return result
    # Ours is timed only when correct; a baseline is timed whenever it ran (it is the vendor's).
    timed = [
        r.impl
        for r in result.impls.values()
        if r.status == "checked" or (r.impl.role == "baseline" and r.status == "wrong")
    ]
    if not timed:
        result.seconds = time.monotonic() - t0
        return result
    try:
        per_set = max(nbytes(inputs0), int(case.bytes))
        result.l2_bytes = l2_cache_bytes(device)
        budget = None
        if on_gpu(device):
            import torch

            free, _ = torch.cuda.mem_get_info(torch.device(device))
            budget = int(free * memory_fraction / max(1, len(timed)))
        n = rotation_sets(per_set, result.l2_bytes, memory_budget=budget)
        result.rotation_sets = n
        sets = [inputs0] + [case.make_inputs(seed + i, device) for i in range(1, n)]
        calls: dict[str, list[Callable[[], Any]]] = {}
        for impl in timed:
            try:
                thunks = [impl.make(s) for s in sets]
                for thunk in thunks:  # compile, autotune and allocate outside the timed region
                    thunk()
                _sync(device)
                calls[impl.name] = thunks
            except Exception as exc:  # noqa: BLE001
                result.impls[impl.name].error = _failure(exc)
        if calls:
            with sampler() as clocks:
                stats = measure(
                    calls,
                    timers=timers if timers is not None else default_timers(device, graphs=case.graphable),
                    protocol=protocol,
                    deadline=deadline,
                )
            result.clocks = clock_summary(clocks)
            for name, s in stats.items():
                result.impls[name].stats = s
    except Exception as exc:  # noqa: BLE001 - timing failed for the whole group
        for impl in timed:
            if result.impls[impl.name].error is None:
                result.impls[impl.name].error = f"timing failed: {_failure(exc)}"
    finally:
        if on_gpu(device):
            import torch

            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    result.seconds = time.monotonic() - t0
    return result


def clock_summary(sampler: Any) -> dict[str, Any]:
    """A clock sampler's summary as plain data, with the fields provenance takes."""
    summary = sampler.summary()
    out = dict(summary.as_dict())
    fields = summary.provenance_fields()
    out["available"] = summary.samples > 0
    out["clocks_mhz"] = {k: float(v) for k, v in fields["clocks_mhz"].items() if v is not None}
    out["throttle_reasons"] = list(fields["throttle_reasons"])
    return out


@functools.cache
def _driver() -> str | None:
    return nvml_device_facts().get("driver")


def device_name(device: str) -> str:
    if on_gpu(device):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    import platform

    return f"cpu: {platform.processor() or platform.machine()}"


def provenance(device: str, clocks: dict[str, Any] | None = None):
    clocks = clocks or {}
    fields: dict[str, Any] = {}
    if clocks.get("available"):
        fields["clocks_mhz"] = clocks["clocks_mhz"]
        fields["throttle_reasons"] = clocks["throttle_reasons"]
    if on_gpu(device):
        import torch

        fields["device_count"] = torch.cuda.device_count()
        fields["driver"] = _driver()
    return host_provenance(device=device_name(device), **fields)


def _finite(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def records(result: CaseResult, *, measured: dict[str, Ceiling] | None = None) -> list[Record]:
    """One ``kernel`` record per timed implementation, one ``correctness`` record per checked one."""
    case = result.case
    prov = provenance(result.device, result.clocks)
    sheet = datasheet(device_name(result.device), case.dtype)
    measured_ceiling = (measured or {}).get(case.dtype)
    out: list[Record] = []
    base_config = {"dtype": case.dtype, **case.config}
    for name, r in result.impls.items():
        common = dict(
            op=case.op,
            name=name,
            backend=r.impl.backend,
            shape=case.shape,
            config=base_config,
            provenance=prov,
        )
        if r.check is not None:
            out.append(
                Record(
                    kind="correctness",
                    metric="passed",
                    value=1.0 if r.check.passed else 0.0,
                    unit="bool",
                    extra={**{k: _finite(v) if isinstance(v, float) else v for k, v in r.check.as_dict().items()},
                           "suite": case.suite, "group": case.group,
                           **({"peak_memory_bytes": r.peak_bytes} if r.peak_bytes is not None else {})},
                    **common,
                )
            )
        if r.stats is None or not r.stats.median > 0:  # a zero median (timer resolution) has no rates
            continue
        s = r.stats
        extra: dict[str, Any] = {
            "group": case.group,
            "suite": case.suite,
            "role": r.impl.role,
            "library": r.impl.library,
            "flops": case.flops,
            "bytes": case.bytes,
            "tflops": case.flops / s.median / 1e12,
            "gbps": case.bytes / s.median / 1e9,
            "rotation_sets": result.rotation_sets,
            "l2_bytes": result.l2_bytes,
            "calls_per_sample": s.calls_per_sample,
            "clocks": result.clocks,
        }
        if s.notes:
            extra["notes"] = list(s.notes)
        if r.peak_bytes is not None:
            extra["peak_memory_bytes"] = r.peak_bytes
        for label, ceiling in (("datasheet", sheet), ("measured", measured_ceiling)):
            if ceiling is not None:
                extra[f"roofline_fraction_{label}"] = ceiling.fraction(case.flops, case.bytes, s.median)
                extra[f"ceiling_{label}"] = {"flops": ceiling.flops, "bandwidth": ceiling.bandwidth}
        if sheet is None:
            extra["roofline_fraction_note"] = f"no published ceiling for {device_name(result.device)} / {case.dtype}"
        if r.impl.role == "ours":
            extra["speedup_vs"] = result.speedups(name)
        out.append(
            Record(
                kind="kernel",
                metric="time",
                value=s.median,
                unit="s",
                method=s.method,
                repetitions=s.repetitions,
                median=s.median,
                p20=s.p20,
                p80=s.p80,
                extra=extra,
                **common,
            )
        )
    return out


@dataclass(frozen=True)
class Row:
    """One line of the summary table: one of ours against one baseline on one shape."""

    op: str
    shape: str
    ours: str
    ours_s: float | None
    baseline: str
    baseline_s: float | None
    speedup: float | None
    note: str = ""
    flops: float | None = None  # the case's work, for the roofline floors the summary shows
    bytes: float | None = None
    ours_peak_bytes: int | None = None  # device memory above the inputs at one call's peak (check run)
    baseline_peak_bytes: int | None = None


def rows(result: CaseResult) -> list[Row]:
    """Each of our runnable implementations against each runnable baseline.

    Skipped implementations (not installed, no such op yet) get no row of their
    own; when none of ours can run, each baseline still gets a row, with the reason.
    """
    case = result.case
    shape = case.group.removeprefix(f"{case.op}-")
    ours = [result.impls[o.name] for o in case.ours if o.runs]
    bases = [result.impls[b.name] for b in case.baselines if b.runs]
    if not ours:
        why = "; ".join(f"{o.name}: {o.skip}" for o in case.ours)
        return [Row(case.op, shape, "-", None, b.impl.name, result.median(b.impl.name), None, why, case.flops, case.bytes,
                    baseline_peak_bytes=b.peak_bytes) for b in bases]
    out: list[Row] = []
    for mine in ours:
        for base in bases or [None]:
            a = result.median(mine.impl.name)
            b = result.median(base.impl.name) if base else None
            notes = [f"{x.impl.name} {x.status}: {x.why}" for x in (mine, base) if x and x.status != "measured"]
            out.append(
                Row(case.op, shape, mine.impl.name, a, base.impl.name if base else "-", b, b / a if a and b else None,
                    "; ".join(notes), case.flops, case.bytes, ours_peak_bytes=mine.peak_bytes,
                    baseline_peak_bytes=base.peak_bytes if base else None)
            )
    return out


def measure_ceilings(device: str, *, protocol: TimingProtocol | None = None) -> tuple[dict[str, Ceiling], list[Record]]:
    """Measure this GPU's practical ceilings: bf16 ``torch.matmul`` at 8192^3 and a 1 GiB copy.

    Returns {dtype: Ceiling(source="measured")} and the records of both measurements.
    """
    import torch

    dev = torch.device(device)
    n = 8192
    g = torch.Generator(device=dev).manual_seed(1234)
    a = torch.randn(n, n, device=dev, generator=g).to(torch.bfloat16)
    b = torch.randn(n, n, device=dev, generator=g).to(torch.bfloat16)
    src = torch.randn(2**28, device=dev, generator=g)  # 1 GiB of float32
    dst = torch.empty_like(src)
    mm = [lambda: torch.matmul(a, b)]
    copy = [lambda: dst.copy_(src)]
    for call in mm + copy:
        call()
    torch.cuda.synchronize()
    with ClockSampler() as clocks:
        stats = measure({"matmul": mm, "copy": copy}, timers=default_timers(device), protocol=protocol)
    flops = 2.0 * n**3 / stats["matmul"].median
    bandwidth = 2.0 * src.numel() * src.element_size() / stats["copy"].median
    ceiling = Ceiling(flops, bandwidth, "measured", device_name(device))
    prov = provenance(device, clock_summary(clocks))
    recs = [
        Record(
            kind="microbench",
            op="peak-flops",
            name="torch.matmul",
            metric="flops",
            value=flops,
            unit="FLOP/s",
            shape={"m": n, "n": n, "k": n},
            config={"dtype": "bfloat16"},
            method=stats["matmul"].method,
            repetitions=stats["matmul"].repetitions,
            median=stats["matmul"].median,
            p20=stats["matmul"].p20,
            p80=stats["matmul"].p80,
            extra={"note": "median time; value is 2*n^3/median on random normal data"},
            provenance=prov,
        ),
        Record(
            kind="microbench",
            op="hbm-bandwidth",
            name="torch.copy_",
            metric="bandwidth",
            value=bandwidth,
            unit="B/s",
            shape={"bytes": src.numel() * src.element_size()},
            method=stats["copy"].method,
            repetitions=stats["copy"].repetitions,
            median=stats["copy"].median,
            p20=stats["copy"].p20,
            p80=stats["copy"].p80,
            extra={"note": "bytes read + bytes written per copy / median time"},
            provenance=prov,
        ),
    ]
    # The measured matmul ceiling applies to bf16 and fp16 (the same tensor-core rate on these GPUs).
    return {"bfloat16": ceiling, "float16": ceiling}, recs
