"""The one timing harness: every kernel and every baseline is timed here, the same way.

Protocol, for a group of implementations of the same problem (ours and the
vendor baselines):

* **Rotated inputs.** Each implementation gets ``n`` input sets, all drawn from
  the same random distribution, with ``n`` chosen so the sets together exceed
  twice the L2 cache (:func:`rotation_sets`): consecutive calls never find their
  operands in L2, as in a real model where weights and activations stream from HBM.
* **Warm-up** until compilation, autotuning and allocator growth are done.
* **Device timing.** On a GPU, one *unit* is a pass over the ``n`` sets, captured
  once as a CUDA graph and replayed between two CUDA events (``cuda-graph``: no
  host launch overhead in the figure), or, where capture fails, each call
  bracketed by its own events (``cuda-events``). On a CPU the host clock times
  each call (``host-timer``): good for smoke tests, not for performance claims.
* **No launch gaps.** Each round starts behind about a millisecond of GPU
  busy-wait, so the host has queued the whole round before the first timed
  event fires.
* **Interleaving.** Repetition rounds alternate the implementations (and rotate
  which goes first) so slow drifts in clocks or temperature hit all of them alike.
* **Statistics.** The median and the 20th/80th percentiles of the per-call times.

Timers are objects with ``method``, ``prepare(calls)`` and ``synchronize()``;
tests drive the harness with a fake one.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import numpy as np

Call = Callable[[], Any]
Collect = Callable[[], list[float]]


@dataclass(frozen=True)
class Stats:
    """Per-call times in seconds, and how they were taken."""

    times: tuple[float, ...]
    method: str
    calls_per_sample: int = 1  # calls averaged into each sample (a graph replay holds several)
    notes: tuple[str, ...] = ()

    @property
    def repetitions(self) -> int:
        return len(self.times)

    @property
    def median(self) -> float:
        return quantiles(self.times)[0]

    @property
    def p20(self) -> float:
        return quantiles(self.times)[1]

    @property
    def p80(self) -> float:
        return quantiles(self.times)[2]


def quantiles(times: Sequence[float]) -> tuple[float, float, float]:
    """(median, p20, p80) with linear interpolation between order statistics."""
    if len(times) == 0:
        raise ValueError("times: expected at least one sample, got none")
    med, p20, p80 = np.percentile(np.asarray(times, dtype=np.float64), [50, 20, 80])
    return float(med), float(p20), float(p80)


def rotation_sets(
    bytes_per_set: int,
    l2_bytes: int,
    *,
    factor: float = 2.0,
    max_sets: int = 64,
    memory_budget: int | None = None,
) -> int:
    """How many input sets to rotate through so that together they exceed ``factor`` x L2.

    At least one set; at most ``max_sets``, and no more than ``memory_budget`` bytes
    hold. A single set already larger than ``factor`` x L2 needs no rotation.
    """
    if bytes_per_set <= 0:
        raise ValueError(f"bytes_per_set: expected a positive size, got {bytes_per_set}")
    need = max(1, math.ceil(factor * max(l2_bytes, 0) / bytes_per_set))
    if memory_budget is not None:
        need = min(need, max(1, memory_budget // bytes_per_set))
    return max(1, min(need, max_sets))


def on_gpu(device: str) -> bool:
    return str(device).startswith("cuda")


def l2_cache_bytes(device: str) -> int:
    """The L2 size of a CUDA/ROCm device as PyTorch reports it; 0 for the CPU."""
    if not on_gpu(device):
        return 0
    import torch

    props = torch.cuda.get_device_properties(torch.device(device))
    size = getattr(props, "L2_cache_size", None)
    # Older builds do not report it: assume 64 MiB, larger than any current L2,
    # so the rotation errs on the side of more sets.
    return int(size) if size else 64 * 2**20


class Timer(Protocol):
    method: str

    def prepare(self, calls: Sequence[Call]) -> Callable[[], Collect]:
        """Return ``launch``: it runs one unit (all ``calls``) and returns ``collect``,
        which, after :meth:`synchronize`, gives the unit's per-call times in seconds."""

    def synchronize(self) -> None: ...


class HostTimer:
    """``time.perf_counter`` around each call; a CUDA synchronize when a GPU is in use."""

    method = "host-timer"

    def __init__(self, sync: Callable[[], None] | None = None):
        self._sync = sync or (lambda: None)

    def synchronize(self) -> None:
        self._sync()

    def prepare(self, calls: Sequence[Call]) -> Callable[[], Collect]:
        def launch() -> Collect:
            times = []
            for call in calls:
                t0 = time.perf_counter()
                call()
                self._sync()
                times.append(time.perf_counter() - t0)
            return lambda: times

        return launch


def _gpu_lead(cycles: int = 2_000_000) -> None:
    """Keep the GPU busy (about 1 ms) while the host queues a round of launches.

    Without it the first event of a round fires on an idle GPU and the host's
    launch latency (tens of microseconds for a Python op) lands in the measured
    interval; with it the whole round is queued before any timed work starts.
    """
    import torch

    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(cycles)


class EventTimer:
    """A pair of CUDA events around each call; the host never waits inside a round."""

    method = "cuda-events"

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def lead(self) -> None:
        _gpu_lead()

    def prepare(self, calls: Sequence[Call]) -> Callable[[], Collect]:
        import torch

        def launch() -> Collect:
            pairs = []
            for call in calls:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                call()
                end.record()
                pairs.append((start, end))
            return lambda: [s.elapsed_time(e) / 1e3 for s, e in pairs]

        return launch


class GraphTimer:
    """All calls of a unit captured as one CUDA graph, replayed between two events.

    The calls must have run at least once before (compilation and autotuning
    cannot happen inside a capture). A unit repeats the rotation until it holds
    at least ``min_calls`` calls, so a replay of tiny kernels is long enough for
    the event resolution (about half a microsecond).
    """

    method = "cuda-graph"

    def __init__(self, min_calls: int = 8):
        self.min_calls = min_calls
        self.graphs: list[Any] = []  # kept alive for the harness's lifetime

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def lead(self) -> None:
        _gpu_lead()

    def prepare(self, calls: Sequence[Call]) -> Callable[[], Collect]:
        import torch

        repeats = max(1, math.ceil(self.min_calls / len(calls)))
        sequence = list(calls) * repeats
        # Warm-up on a side stream, as torch.cuda.graphs asks, then capture.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for call in calls:
                call()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for call in sequence:
                call()
        torch.cuda.synchronize()
        self.graphs.append(graph)
        n = len(sequence)

        def launch() -> Collect:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            return lambda: [start.elapsed_time(end) / 1e3 / n]

        return launch


def default_timers(device: str, *, graphs: bool = True) -> list[Timer]:
    """The timers to try in order: graph replay, then events, on a GPU; the host clock on a CPU."""
    if not on_gpu(device):
        return [HostTimer()]
    return ([GraphTimer()] if graphs else []) + [EventTimer()]


@dataclass
class TimingProtocol:
    """How long to warm up and measure; the defaults follow Triton's do_bench."""

    warmup_s: float = 0.025
    target_s: float = 0.1  # measuring time per implementation
    min_reps: int = 10
    max_reps: int = 200
    notes: list[str] = field(default_factory=list)


def _unit_seconds(timer: Timer, launch: Callable[[], Collect], min_s: float, min_units: int = 2) -> float:
    """Run units until ``min_s`` has passed (at least ``min_units``); the host time per unit."""
    timer.synchronize()
    t0 = time.perf_counter()
    units = 0
    while units < min_units or time.perf_counter() - t0 < min_s:
        launch()
        timer.synchronize()
        units += 1
    return (time.perf_counter() - t0) / units


def measure(
    calls: dict[str, Sequence[Call]],
    *,
    timers: Sequence[Timer],
    protocol: TimingProtocol | None = None,
    deadline: float | None = None,
) -> dict[str, Stats]:
    """Time each implementation's calls (one per rotated input set), interleaved.

    ``calls`` maps an implementation's name to its calls, each already run once
    (so compiled). ``timers`` are tried in order: if one cannot prepare every
    implementation (a graph capture fails), the next one times them all, so the
    implementations in a group are always timed the same way; the reason is kept
    in ``Stats.notes``. ``deadline`` (``time.monotonic()``) cuts the rounds short,
    keeping at least three.
    """
    proto = protocol or TimingProtocol()
    if not calls:
        return {}
    notes: list[str] = []
    launches: dict[str, Callable[[], Collect]] = {}
    chosen: Timer | None = None
    for timer in timers:
        try:
            launches = {name: timer.prepare(list(c)) for name, c in calls.items()}
            chosen = timer
            break
        except Exception as exc:  # noqa: BLE001 - fall back to the next timer, saying why
            notes.append(f"{timer.method} failed ({exc.__class__.__name__}: {str(exc)[:200]}); fell back")
            launches = {}
    if chosen is None:
        raise RuntimeError("no timer could prepare the calls: " + "; ".join(notes))

    unit_s = {name: _unit_seconds(chosen, launch, proto.warmup_s) for name, launch in launches.items()}
    slowest = max(unit_s.values())
    rounds = int(min(proto.max_reps, max(proto.min_reps, math.ceil(proto.target_s / max(slowest, 1e-9)))))

    lead = getattr(chosen, "lead", None)
    samples: dict[str, list[float]] = {name: [] for name in launches}
    names = list(launches)
    for r in range(rounds):
        if deadline is not None and r >= 3 and time.monotonic() > deadline:
            notes.append(f"stopped after {r} of {rounds} rounds: time budget spent")
            break
        order = names[r % len(names):] + names[: r % len(names)]
        if lead is not None:
            lead()
        pending = [(name, launches[name]()) for name in order]
        chosen.synchronize()
        for name, collect in pending:
            samples[name].extend(collect())

    per_sample = getattr(chosen, "min_calls", 1)
    return {
        name: Stats(
            times=tuple(samples[name]),
            method=chosen.method,
            calls_per_sample=max(1, math.ceil(per_sample / len(calls[name])) * len(calls[name]))
            if chosen.method == "cuda-graph"
            else 1,
            notes=tuple(notes),
        )
        for name in names
    }
