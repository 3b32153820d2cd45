"""Host ceilings: memory bandwidth and BLAS FLOP/s of the CPU this runs on.

So that every machine, with or without an accelerator, has live measurements
and the whole pipeline (measure -> records -> ceilings -> models) runs end to
end. Bandwidth uses NumPy on arrays several times the last-level cache (read =
sum, write = fill, copy = copyto), FLOP/s uses NumPy matmul (the BLAS NumPy
links). Each figure is the median of repeats, timed with perf_counter.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import numpy as np

from ..gpu import spread
from ..records import Record, host_provenance
from .base import Suite, SuiteContext


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def last_level_cache_bytes() -> int | None:
    """Largest cache size the kernel reports for cpu0 (None if unknown)."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        units = {"K": 1024, "M": 1024**2, "G": 1024**3}
        sizes.append(int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text))
    return max(sizes) if sizes else None


def available_memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# Both bandwidth arrays of a quick run together (``ceiling run`` runs it on every machine): under 1 GB
# even where the last-level cache is hundreds of MiB, whose 4x would otherwise set each array's size.
QUICK_ARRAYS_BYTES = 768 * 2**20


def working_set_bytes(quick: bool) -> int:
    """Bytes of each of the two bandwidth arrays: several times the last-level cache, so the traffic is
    DRAM's; at most an eighth of the available memory each, and in quick mode at most half of
    ``QUICK_ARRAYS_BYTES``."""
    llc = last_level_cache_bytes() or 32 * 1024**2
    size = 4 * llc if quick else max(8 * llc, 512 * 1024**2)
    avail = available_memory_bytes()
    if avail:  # two arrays for copy, and leave room for everyone else
        size = min(size, avail // 8)
    if quick:
        return min(size, QUICK_ARRAYS_BYTES // 2)
    return max(size, 4 * llc)


def _timed(fn, repeats: int) -> list[float]:
    fn()  # warm: page in, BLAS threads up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _check(ctx: SuiteContext) -> str | None:
    return None  # NumPy is a core dependency: the host suite runs everywhere


def _run(ctx: SuiteContext) -> list[Record]:
    repeats = 3 if ctx.quick else 7
    provenance = host_provenance(device=f"cpu: {cpu_name()}")
    nbytes = working_set_bytes(ctx.quick)
    llc = last_level_cache_bytes()
    # below 4x the cache (a quick run on a large-cache CPU), part of the traffic may be the cache's
    common = {"threads": os.cpu_count(), "numpy": np.__version__, "llc_bytes": llc,
              "llc_multiple": round(nbytes / llc, 2) if llc else None}
    records: list[Record] = []

    n = nbytes // 8
    ctx.progress(f"host memory bandwidth on {nbytes / 2**20:.0f} MiB arrays")
    a = np.random.default_rng().random(n)
    b = np.empty_like(a)
    cases = {
        "read": (lambda: a.sum(), n * 8, "numpy sum"),
        "write": (lambda: b.fill(1.5), n * 8, "numpy fill"),
        "copy": (lambda: np.copyto(b, a), 2 * n * 8, "numpy copyto (read + write bytes)"),
    }
    for name, (fn, moved, how) in cases.items():
        times = _timed(fn, repeats)
        s = spread(times)
        bw = [moved / t for t in times]
        records.append(
            Record(
                kind="host", op="host-memory-bandwidth", name=name, metric="bandwidth",
                value=moved / s["median"], unit="B/s", backend="numpy",
                shape={"bytes": int(nbytes)}, method="host-timer", repetitions=repeats,
                median=moved / s["median"], p20=spread(bw)["p20"], p80=spread(bw)["p80"],
                extra={**common, "operation": how, "seconds": times},
                provenance=provenance,
            )
        )
    a = b = cases = None  # free the arrays before the matmuls

    sizes = (256, 512) if ctx.quick else (1024, 2048, 4096)
    for dtype in (np.float32, np.float64):
        best = None
        for size in sizes:
            ctx.progress(f"host BLAS matmul {np.dtype(dtype).name} n={size}")
            rng = np.random.default_rng()
            x = rng.standard_normal((size, size)).astype(dtype)
            y = rng.standard_normal((size, size)).astype(dtype)
            out = np.empty((size, size), dtype)
            times = _timed(lambda: np.matmul(x, y, out=out), max(2, repeats // 2))
            flops = 2.0 * size**3
            s = spread([flops / t for t in times])
            rec = Record(
                kind="host", op="host-blas", name=f"matmul-{np.dtype(dtype).name}-n{size}", metric="flops",
                value=s["median"], unit="FLOP/s", backend="numpy",
                shape={"m": size, "n": size, "k": size}, config={"dtype": np.dtype(dtype).name},
                method="host-timer", repetitions=len(times), median=s["median"], p20=s["p20"], p80=s["p80"],
                extra={**common, "seconds": times}, provenance=provenance,
            )
            records.append(rec)
            best = rec if best is None or rec.value > best.value else best
        # the ceiling: best over sizes, named as such so models can pick it directly
        records.append(best.model_copy(update={"name": f"matmul-{np.dtype(dtype).name}-peak", "metric": "peak-flops"}))
    return records


SUITE = Suite(
    name="host",
    needs_gpu=False,
    description="CPU memory bandwidth (read/write/copy) and BLAS FLOP/s (fp32, fp64)",
    check=_check,
    run=_run,
    timeout_s=300.0,
)
