"""Cost model: engine instruction counts and an estimated kernel time from the trace.

Per-instruction costs (Trainium arch guides, ``nki/guides/architecture/*_arch.rst``):

* TensorE ``nc_matmul``: the MultiplyMoving initiation interval is about ``max(N, 64)`` cycles
  for a moving free size N; fp32 operands are about 4x slower. LoadStationary is up to 4x
  faster than a multiply and runs in the background, so it is not charged. A 128x128x512
  bf16 matmul thus takes 512 cycles: the 128x128 PE array at one MAC per PE per cycle, i.e.
  peak. ``nc_transpose`` on TensorE is a matmul against an identity moving tile of P columns.
* VectorE: about N cycles per input operand for N elements per partition (2N for two inputs),
  at ``vector_elems_per_cycle`` elements per partition per cycle (1 on trn1; 2 on trn2, from
  256 elements/cycle over 128 lanes), plus a fixed ~60-cycle SBUF/PSUM access overhead.
* ScalarE: N cycles for N elements per partition plus the same 60 cycles; reading the
  accumulate registers (``reduce_res``) adds ~64 cycles (ActReadAccumulator).
* GpSimd: no published per-element figure; charged like ScalarE at its own clock (assumption).
* DMA: bytes / per-NeuronCore bandwidth (min of the HBM share and the DMA-engine share of the
  chip), plus a fixed ~2 us completion latency (an assumption: no published figure) that does
  not occupy the queues; DMA queues run out of order (16 engines per NC on trn2).

Scheduling: the four compute engines each run their instruction stream in program order
(the hardware has one in-order queue per engine); an instruction starts when its engine is
free and every instruction it depends on has finished. Dependencies are data dependencies
(read-after-write, write-after-read, write-after-write) on overlapping byte ranges of the
same allocation, which is what the compiler's semaphores enforce. DMA transfers take the
earliest gap in the DMA bandwidth timeline after they are ready. The estimate is the finish
time of the last instruction, so it is at least the busiest engine's total time (the
"max over engines" bound) plus whatever dependencies expose (pipeline fill and drain).

Not modelled: SBUF address reuse between allocations (each ``nl.ndarray`` is a fresh buffer,
as if the allocator multi-buffered perfectly: an optimistic assumption), semaphore latency,
instruction fetch, DMA descriptor efficiency, and the bf16 Vector perf mode.
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass, field

from ceiling.trainium.emulator.targets import Target

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")
ACCESS_OVERHEAD_CYCLES = 60  # fixed SBUF/PSUM access bubble per engine instruction
ACCUMULATOR_READ_CYCLES = 64  # ActReadAccumulator
DMA_LATENCY_S = 2e-6  # assumption, see above
MATMUL_MIN_II = 64
FP32_MATMUL_SLOWDOWN = 4


def matmul_cycles(moving_free: int, fp32: bool) -> float:
    return max(moving_free, MATMUL_MIN_II) * (FP32_MATMUL_SLOWDOWN if fp32 else 1)


def vector_cycles(target: Target, free: int, inputs: int) -> float:
    return inputs * free / target.vector_elems_per_cycle + ACCESS_OVERHEAD_CYCLES


def scalar_cycles(target: Target, free: int, reduce: bool = False) -> float:
    return free / target.scalar_elems_per_cycle + ACCESS_OVERHEAD_CYCLES + (ACCUMULATOR_READ_CYCLES if reduce else 0)


def gpsimd_cycles(target: Target, free: int) -> float:
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
