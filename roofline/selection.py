"""Which kernel timings the performance model is fit and judged on, and why the others are not.

The model predicts the *device time* of *our* kernels from their configs, so a
timing enters only when:

* it is of one of our implementations: a record whose ``extra["role"]`` says
  ``"baseline"`` (or, without a role, whose backend is not one of our vendor
  backends: cuBLAS, SDPA, eager or compiled PyTorch) is a reference point, not
  a config of ours;
* it is device time: CUDA-graph replay (``method`` says "graph"), or CUDA events
  / host timers around eager launches only when the kernel is long enough that
  the host's launch overhead (tens of microseconds of Python per call, twice for
  a split-K launch) is a few percent of it (median >= ``EVENT_MIN_SECONDS``);
* it succeeded and carries what the model needs (a GEMM tile config);
* its timing method is the one chosen for its fit unit: methods are never
  mixed in one fit; CUDA-graph replay is preferred, then the others in
  ``METHOD_PREFERENCE``. A fit unit is (device, op), split by the problem's
  direction where it names one (``unit_key``): an attention forward and its
  backward are different kernels with their own coefficients, so each takes the
  best method it was timed with.

The same ``select`` decides what the model is fit on (``ceiling.roofline.model``) and
which measurements the templates cite as best points (``ceiling.roofline.templates``).

The store is append-only: nothing is deleted, records are only filtered here,
and every excluded kernel timing is reported with its reason.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from ceiling.microbench.records import Record
from ceiling.roofline import devices

EVENT_MIN_SECONDS = 200e-6  # host launch overhead of ~5 us per call is then <= ~3% of the time
OUR_BACKENDS = ("nvidia", "amd", "tpu", "trainium")  # ceiling.backends.BACKENDS without the framework reference
# device time first; "synthetic" times come from a known law (tests) and carry no host overhead
METHOD_PREFERENCE = ("cuda-graph", "synthetic", "cuda-events", "host-timer")

REASONS = {
    "baseline": "a baseline implementation (vendor library or framework), not one of our kernels",
    "failed": "the run failed or has no positive time",
    "no-method": "the timing method is not recorded, so device time cannot be told from host time",
    "host-overhead": f"timed with events/host timers around eager launches and shorter than "
                     f"{EVENT_MIN_SECONDS * 1e6:.0f} us: host launch overhead is in the number",
    "other-method": "timed by another method than the one its fit unit (device, op, direction) uses "
                    "(methods are never mixed)",
    "no-config": "no kernel config recorded (the dispatcher's pick): the GEMM tile terms need one",
    "no-terms": "no device ceilings, or no work counter for the op and no counted flops/bytes in the record",
}


def method_family(method: str | None) -> str | None:
    """The timing method's family: "cuda-graph", "cuda-events", "host-timer", "synthetic" or None."""
    m = (method or "").lower()
    if not m:
        return None
    if "graph" in m:
        return "cuda-graph"
    if "event" in m or "do_bench" in m:  # triton.testing.do_bench is CUDA events around eager launches
        return "cuda-events"
    if "host" in m or "wall" in m:
        return "host-timer"
    return m


def harness(r: Record) -> str | None:
    """Which harness took a kernel timing, for naming beside its figure: one method (CUDA-graph replay,
    say) gives different times in the benchmark harness (``ceiling bench`` / ``device-check``: the
    dispatcher's config, inputs rotated past twice the L2, ours and the baseline interleaved) and in a
    tuning sweep (``ceiling tune``: one config at a time on one set of inputs)."""
    if r.kind != "kernel" or method_family(r.method) in (None, "synthetic"):
        return None
    return "benchmark harness" if "suite" in r.extra else "tuning sweep"


def timing_label(r: Record) -> str:
    """"cuda-graph, benchmark harness": the method and the harness of a timing."""
    return ", ".join(x for x in (r.method or "method ?", harness(r)) if x)


def device_key(r: Record) -> str:
    spec = devices.match(r.provenance.device)
    return spec.key if spec else r.provenance.device


def direction(shape: dict, config: dict) -> str | None:
    """The direction a problem names ("fwd", "bwd", "fwdbwd"), or None (a GEMM names none)."""
    d = (config or {}).get("direction", (shape or {}).get("direction"))
    return str(d) if d else None


def unit_key(r: Record) -> str:
    """The fit unit of a record: "device|op", or "device|op|direction" where the problem names one."""
    d = direction(r.shape, r.config)
    return f"{device_key(r)}|{r.op}" + (f"|{d}" if d else "")


def is_ours(r: Record) -> bool:
    role = r.extra.get("role")
    if role:
        return role == "ours"
    return r.name.startswith("ceiling") or (r.backend or "") in OUR_BACKENDS


def seconds(r: Record) -> float:
    return float(r.median if r.median is not None else r.value)


@dataclass
class Excluded:
    record: Record
    reason: str  # a key of REASONS

    def row(self) -> dict:
        r = self.record
        return {"device": device_key(r), "op": r.op, "name": r.name, "method": r.method,
                "git_commit": r.provenance.git_commit, "shape": r.shape,
                "config": r.config, "median_us": round(seconds(r) * 1e6, 3), "reason": self.reason}


@dataclass
class Selection:
    used: list[Record] = field(default_factory=list)
    excluded: list[Excluded] = field(default_factory=list)
    methods: dict[str, str] = field(default_factory=dict)  # fit unit (``unit_key``) -> the timing method fit on

    def counts(self) -> dict[str, dict]:
        """Per fit unit: the method fit on, records used, and records excluded per reason."""
        out: dict[str, dict] = defaultdict(lambda: {"method": None, "used": 0, "excluded": Counter()})
        for r in self.used:
            out[unit_key(r)]["used"] += 1
        for e in self.excluded:
            out[unit_key(e.record)]["excluded"][e.reason] += 1
        for key, method in self.methods.items():
            out[key]["method"] = method
        return {k: {**v, "excluded": dict(v["excluded"])} for k, v in sorted(out.items())}


def timing_reason(r: Record, event_min_seconds: float = EVENT_MIN_SECONDS) -> str | None:
    """Why the time of ``r`` is not a device time ("failed", "no-method", "host-overhead"), or None.
    The baselines the templates cite beside our kernels are held to the same rule."""
    family = method_family(r.method)
    if r.extra.get("status", "ok") != "ok" or not seconds(r) > 0:
        return "failed"
    if family is None:
        return "no-method"
    if family in ("cuda-events", "host-timer") and seconds(r) < event_min_seconds:
        return "host-overhead"
    return None


def select(records: list[Record], event_min_seconds: float = EVENT_MIN_SECONDS) -> Selection:
    """Split the kernel timings of ``records`` into those the model is fit on and those it is not."""
    sel = Selection()
    eligible: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        if r.kind != "kernel" or r.metric != "time" or r.unit != "s":
            continue  # not a kernel timing: ceilings and static facts are read elsewhere
        timing = timing_reason(r, event_min_seconds)
        if not is_ours(r):
            reason = "baseline"
        elif timing:
            reason = timing
        elif r.op == "gemm" and "BLOCK_M" not in r.config:
            reason = "no-config"
        else:
            eligible[unit_key(r)].append(r)
            continue
        sel.excluded.append(Excluded(r, reason))
    for key, rows in eligible.items():
        present = Counter(method_family(r.method) for r in rows)
        ranked = sorted(present, key=lambda f: (METHOD_PREFERENCE.index(f) if f in METHOD_PREFERENCE
                                                else len(METHOD_PREFERENCE), -present[f]))
        chosen = ranked[0]
        sel.methods[key] = chosen
        for r in rows:
            if method_family(r.method) == chosen:
                sel.used.append(r)
            else:
                sel.excluded.append(Excluded(r, "other-method"))
    return sel


def admitted(sel: Selection) -> dict[int, str]:
    """``id(record)`` -> the timing method family it was admitted under, for every record ``sel`` used."""
    return {id(r): sel.methods[unit_key(r)] for r in sel.used}
