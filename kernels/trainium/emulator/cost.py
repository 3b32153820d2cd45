"""Cost model of the Trainium emulator: engine instruction counts and an estimated kernel time from
the trace, each compute engine in program order, instructions waiting on the data they read and DMA
as a bandwidth timeline. The per-instruction costs with their sources, the scheduling and what is not
modelled are in ``kernels/trainium/README.md`` ("Cost model"); an estimate, never a measurement.
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass, field

from ceiling.trainium.emulator.targets import Target

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")
# Per-instruction costs from the Trainium arch guides (nki/guides/architecture/*_arch.rst); each
# engine's, with its source, is listed in kernels/trainium/README.md ("Cost model").
ACCESS_OVERHEAD_CYCLES = 60  # fixed SBUF/PSUM access bubble per engine instruction
ACCUMULATOR_READ_CYCLES = 64  # ActReadAccumulator
DMA_LATENCY_S = 2e-6  # completion latency, not occupying the queues: an assumption, no published figure
MATMUL_MIN_II = 64  # MultiplyMoving initiation interval: about max(N, 64) cycles for moving free size N
FP32_MATMUL_SLOWDOWN = 4


def matmul_cycles(moving_free: int, fp32: bool) -> float:
    return max(moving_free, MATMUL_MIN_II) * (FP32_MATMUL_SLOWDOWN if fp32 else 1)


def vector_cycles(target: Target, free: int, inputs: int) -> float:
    return inputs * free / target.vector_elems_per_cycle + ACCESS_OVERHEAD_CYCLES


def scalar_cycles(target: Target, free: int, reduce: bool = False) -> float:
    return free / target.scalar_elems_per_cycle + ACCESS_OVERHEAD_CYCLES + (ACCUMULATOR_READ_CYCLES if reduce else 0)


def gpsimd_cycles(target: Target, free: int) -> float:
    # No published per-element figure: charged like ScalarE, at GpSimd's own clock (an assumption).
    return free + ACCESS_OVERHEAD_CYCLES


def engine_hz(target: Target, engine: str) -> float:
    return {"tensor": target.tensor_hz, "vector": target.vector_hz, "scalar": target.scalar_hz, "gpsimd": target.gpsimd_hz}[engine]


@dataclass
class CostReport:
    target: str
    instructions: dict[str, int]  # per engine
    busy_s: dict[str, float]  # per engine: sum of its instruction times
    estimated_s: float  # finish time of the schedule
    bound_s: float  # max over engines of busy time (the no-dependency lower bound)
    bottleneck: str
    dma_bytes: int
    flops: float | None = None
    tensor_peak_flops: float = 0.0
    fraction_of_peak: float | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


class _Accesses:
    """Per-allocation access history for dependency tracking on byte ranges."""

    def __init__(self):
        self.writes: dict[int, list[tuple[int, int, float]]] = {}
        self.reads: dict[int, list[tuple[int, int, float]]] = {}

    def ready(self, reads, writes) -> float:
        t = 0.0
        for aid, lo, hi in reads:  # read-after-write
            for wlo, whi, f in self.writes.get(aid, ()):
                if wlo < hi and lo < whi:
                    t = max(t, f)
        for aid, lo, hi in writes:  # write-after-write and write-after-read
            for lst in (self.writes.get(aid, ()), self.reads.get(aid, ())):
                for olo, ohi, f in lst:
                    if olo < hi and lo < ohi:
                        t = max(t, f)
        return t

    def commit(self, reads, writes, finish: float) -> None:
        for aid, lo, hi in writes:
            # A covering write subsumes older accesses inside it: later ones depend on it alone.
            self.writes[aid] = [(a, b, f) for a, b, f in self.writes.get(aid, []) if not (lo <= a and b <= hi)]
            self.reads[aid] = [(a, b, f) for a, b, f in self.reads.get(aid, []) if not (lo <= a and b <= hi)]
            self.writes[aid].append((lo, hi, finish))
        for aid, lo, hi in reads:
            self.reads.setdefault(aid, []).append((lo, hi, finish))


class _Timeline:
    """Busy intervals of a bandwidth resource; a job takes the earliest gap after it is ready."""

    def __init__(self):
        self.starts: list[float] = []
        self.ends: list[float] = []

    def place(self, ready: float, duration: float) -> float:
        i = bisect.bisect_right(self.ends, ready)
        t = ready
        while i < len(self.starts):
            if t + duration <= self.starts[i]:
                break
            t = max(t, self.ends[i])
            i += 1
        j = bisect.bisect_left(self.starts, t)
        self.starts.insert(j, t)
        self.ends.insert(j, t + duration)
        # Merge touching intervals so a saturated pipe stays one interval (keeps placing fast).
        eps = 1e-15
        if j + 1 < len(self.starts) and self.starts[j + 1] <= self.ends[j] + eps:
            self.ends[j] = self.ends[j + 1]
            del self.starts[j + 1], self.ends[j + 1]
        if j > 0 and self.starts[j] <= self.ends[j - 1] + eps:
            self.ends[j - 1] = self.ends[j]
            del self.starts[j], self.ends[j]
        return t


def estimate(trace, target: Target, flops: float | None = None) -> CostReport:
    counts = {e: 0 for e in ENGINES}
    busy = {e: 0.0 for e in ENGINES}
    engine_free = {e: 0.0 for e in ENGINES if e != "dma"}
    deps = _Accesses()
    dma = _Timeline()
    finish_all = 0.0
    dma_bytes = 0
    for ins in trace:
        counts[ins.engine] += 1
        ready = deps.ready(ins.reads, ins.writes)
        if ins.engine == "dma":
            duration = ins.bytes / target.dma_bytes_per_s
            start = dma.place(ready, duration)
            finish = start + duration + DMA_LATENCY_S
            dma_bytes += ins.bytes
        else:
            duration = ins.cycles / engine_hz(target, ins.engine)
            start = max(ready, engine_free[ins.engine])
            finish = start + duration
            engine_free[ins.engine] = finish
        busy[ins.engine] += duration
        deps.commit(ins.reads, ins.writes, finish)
        finish_all = max(finish_all, finish)
    bottleneck = max(busy, key=busy.get)
    peak = target.tensor_peak_flops
    fraction = flops / (finish_all * peak) if flops and finish_all > 0 else None
    return CostReport(
        target=target.name,
        instructions=counts,
        busy_s=busy,
        estimated_s=finish_all,
        bound_s=busy[bottleneck],
        bottleneck=bottleneck,
        dma_bytes=dma_bytes,
        flops=flops,
        tensor_peak_flops=peak,
        fraction_of_peak=fraction,
    )
