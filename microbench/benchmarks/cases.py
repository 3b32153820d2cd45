"""Benchmark cases as data: one problem shape of one op, with our kernel and its baselines.

A :class:`Case` knows how to draw random inputs, which implementations compete
(ours and the vendor baselines, each either runnable or skipped with its reason),
the float32/float64 oracle, and the FLOPs and bytes the problem needs. The
harness (:mod:`ceiling.microbench.timing`), ``ceiling bench``, ``ceiling device-check``
and the pytest benchmark files all consume the same cases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from ceiling.testing.numerics import Check, check

# An implementation's ``make(inputs)`` returns the thunk that is timed: for a
# forward op it just calls the op; for a backward op it runs the forward once
# and returns a thunk that recomputes only the gradients.
Make = Callable[[Any], Callable[[], Any]]


@dataclass(frozen=True)
class Impl:
    name: str  # "ceiling:nvidia", "torch.matmul", "sdpa", "flash_attn"
    role: str  # "ours" or "baseline"
    make: Make | None
    skip: str | None = None  # why it cannot run here (then make is None)
    library: str | None = None  # what actually runs: "cuBLAS", "hipBLASLt/rocBLAS", ...
    backend: str | None = None

    @property
    def runs(self) -> bool:
        return self.make is not None and self.skip is None


def skipped(name: str, role: str, reason: str, **kw: Any) -> Impl:
    return Impl(name=name, role=role, make=None, skip=reason, **kw)


@dataclass(frozen=True)
class Case:
    op: str
    suite: str
    label: str  # the shape as text: "4096x4096x4096"
    shape: dict[str, Any]
    dtype: str
    make_inputs: Callable[[int, str], Any]  # (seed, device) -> inputs
    impls: tuple[Impl, ...]
    reference: Callable[[Any], Any]  # inputs -> float32/float64 outputs (possibly of a slice)
    flops: float
    bytes: float  # minimum HBM traffic: read every input once, write every output once
    config: dict[str, Any] = field(default_factory=dict)  # causal, direction, ...
    select: Callable[[Any], Any] = lambda out: out  # the slice of an output the reference covers
    graphable: bool = True  # whether a CUDA graph may capture the thunks
    out_dtype: str | None = None  # the output's dtype where it is not ``dtype`` (FP8 GEMMs): the checks' ulp

    @property
    def group(self) -> str:
        """The benchmark group: every implementation of one shape side by side."""
        words = [f"{k}" if v is True else f"{v}" for k, v in self.config.items() if v not in (False, None)]
        extras = "-".join(w for w in words if w not in self.label.split("-"))  # no word twice
        return "-".join(x for x in (self.op, self.label, self.dtype, extras) if x)

    @property
    def runnable(self) -> list[Impl]:
        return [i for i in self.impls if i.runs]

    @property
    def ours(self) -> list[Impl]:
        return [i for i in self.impls if i.role == "ours"]

    @property
    def baselines(self) -> list[Impl]:
        return [i for i in self.impls if i.role == "baseline"]


def tensors(x: Any) -> list[Any]:
    """The tensors in an output (a tensor, or a tuple/list of them)."""
    if isinstance(x, (tuple, list)):
        return [t for item in x for t in tensors(item)]
    if x is None:
        return []
    return [x]


def nbytes(x: Any) -> int:
    """Total bytes of the tensors in ``x`` (inputs, outputs)."""
    if isinstance(x, dict):
        return sum(nbytes(v) for v in x.values())
    return sum(t.numel() * t.element_size() for t in tensors(x) if hasattr(t, "element_size"))


def error_ratio(impl: str, out: Any, framework_out: Any | None, ref: Any, dtype: str) -> Check:
    """The correctness gate of a benchmark: ``out`` against the oracle ``ref`` by the project's
    error-ratio rule (:func:`ceiling.testing.numerics.check`), against the framework's own
    computation at the same precision where there is one (ours), alone otherwise (a baseline)."""
    if len(tensors(out)) != len(tensors(ref)):
        raise ValueError(f"output: expected {len(tensors(ref))} tensors like the reference, got {len(tensors(out))}")
    for o, r in zip(tensors(out), tensors(ref)):
        if tuple(o.shape) != tuple(r.shape):
            raise ValueError(f"output: expected shape {tuple(r.shape)}, got {tuple(o.shape)}")
    return check(impl, out, framework_out, ref, dtype=dtype)


# Backends whose kernels take torch tensors (TPU and Trainium take JAX/NKI arrays).
TORCH_BACKENDS = ("nvidia", "amd")


def our_impls(op: str, device: str, thunk_for: Callable[[str], Make]) -> list[Impl]:
    """Our kernel on each backend that can run it here, or skipped with the reason.

    On a GPU: the vendor's backend only. On a CPU: every Triton backend, under the
    interpreter (a smoke test of the same source, never a performance figure).
    """
    from ceiling import backends

    impls: list[Impl] = []
    ops = backends.ops_by_name()
    if op not in ops:
        return [skipped(f"ceiling:{op}", "ours", f"ceiling has no {op} op")]
    vendor = backends.gpu_vendor() if device.startswith("cuda") else None
    for backend in ops[op].backends():
        if backend not in TORCH_BACKENDS or (vendor is not None and backend != vendor):
            continue
        name = f"ceiling:{backend}"
        avail = backends.op_availability(op, backend)
        if not avail.runs:
            impls.append(skipped(name, "ours", avail.reason, backend=backend))
        else:
            impls.append(Impl(name, "ours", thunk_for(backend), backend=backend, library=f"ceiling ({avail.mode})"))
    if not impls:
        impls.append(skipped(f"ceiling:{vendor or 'triton'}", "ours", f"{op} has no torch-tensor backend for this device"))
    return impls
