"""The error-ratio rule, and its tolerance policy, for every correctness check in the project (the
tests, ``ceiling run``'s smoke checks and the benchmarks' correctness gate all call :func:`check`): as
in FlashAttention's tests, a low-precision result's error against a float64 oracle may be at most
``ratio`` times the framework's own at the same precision, plus ``atol`` times the result's scale
(the largest reference magnitude, at least 1); a NaN or an infinity where the oracle is finite never
passes.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import asdict, dataclass
from typing import Any

# atol per result dtype, in units of the result's scale: about two units in the last place of
# the 16-bit types, and what float32 accumulation order moves a sum by.
ATOL = {"float64": 1e-10, "float32": 1e-5, "float16": 2e-3, "bfloat16": 2e-3,
        "float8_e4m3fn": 2e-2, "float8_e5m2": 2e-2, "float8_e4m3fnuz": 2e-2, "float8_e5m2fnuz": 2e-2}
RATIO = 2.0
# A result with no framework computation to compare with (a vendor baseline in a benchmark) is
# held to this fraction of the reference's magnitude.
ALONE = 2e-2


def stable_seed(*parts) -> int:
    """A seed from ``parts`` that every process agrees on (``hash`` of a string is salted per
    process, so a seed taken from it gives each test run other inputs)."""
    return zlib.crc32(repr(parts).encode())


def _name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _tensors(x: Any) -> list:
    if isinstance(x, (tuple, list)):
        return [t for item in x for t in _tensors(item)]
    return [] if x is None else [x]


def max_error(ours: Any, ref: Any) -> float:
    """The largest absolute difference in float64 over every element of every tensor; inf where
    one is NaN or infinite and the reference is not the same non-finite value."""
    worst = 0.0
    for o, r in zip(_tensors(ours), _tensors(ref)):
        o, r = o.detach().double(), r.detach().double()
        if not o.numel():
            continue
        same = (o == r) | (o.isnan() & r.isnan())  # equal infinities and NaN where the oracle has NaN
        diff = (o - r).abs().where(~same, 0.0)
        if bool(diff.isnan().any()):
            return math.inf
        worst = max(worst, float(diff.max()))
    return worst


def scale_of(ref: Any) -> float:
    """The largest finite reference magnitude, at least 1: what ``atol`` is measured in."""
    mags = [float(r.detach().double().abs().nan_to_num(0.0, 0.0, 0.0).max()) for r in _tensors(ref) if r.numel()]
    return max([1.0, *mags])


@dataclass(frozen=True)
class Check:
    """One result held to the rule: its error, the bound, and whether it passed."""

    name: str
    error: float
    framework_error: float | None
    bound: float
    passed: bool
    rule: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        fw = "" if self.framework_error is None else f", framework error {self.framework_error:.3g}"
        return f"{self.name}: error {self.error:.3g} vs bound {self.bound:.3g} ({self.rule}{fw})"


def check(name: str, ours: Any, framework: Any, ref: Any, *, dtype: Any = None, atol: float | None = None,
          absolute: bool = False) -> Check:
    """``ours`` against the float64 oracle ``ref`` by the error-ratio rule.

    ``framework``: the same computation by the framework at the input precision (None: held to
    :data:`ALONE` of the reference's magnitude, or to ``atol``). ``dtype``: the result's dtype
    (default ``ours``'s), which sets ``atol`` from :data:`ATOL` unless given. ``absolute``: the tolerance is not scaled by the reference's
    magnitude, for results that are zero in exact arithmetic (a scalar bias's gradient), where
    the reference's own size says nothing about the rounding noise allowed."""
    if _tensors(ours) and _tensors(ref):
        shapes = [(tuple(o.shape), tuple(r.shape)) for o, r in zip(_tensors(ours), _tensors(ref))]
        bad = [s for s in shapes if s[0] != s[1]]
        if bad or len(_tensors(ours)) != len(_tensors(ref)):
            return Check(name, math.inf, None, 0.0, False, f"shape {bad[0][0] if bad else '?'} != reference")
    dtype = _name(dtype or _tensors(ours)[0].dtype) if _tensors(ours) else "float32"
    scale = 1.0 if absolute else scale_of(ref)
    error = max_error(ours, ref)
    if framework is None:
        atol = ALONE if atol is None else atol
        bound, fw, rule = atol * scale, None, f"error <= {atol:g} x {'1' if absolute else 'max|reference|'}"
        return Check(name, error, fw, bound, error <= bound, rule)
    atol = ATOL.get(dtype, ATOL["float32"]) if atol is None else atol
    fw = max_error(framework, ref)
    bound = RATIO * fw + atol * scale
    rule = f"error <= {RATIO:g} x framework error + {atol:g} x {'1' if absolute else 'max|reference|'}"
    return Check(name, error, fw, bound, error <= bound, rule)


def assert_close(name: str, ours: Any, framework: Any, ref: Any, **kw: Any) -> Check:
    """:func:`check`, raising ``AssertionError`` with the numbers when it fails."""
    result = check(name, ours, framework, ref, **kw)
    assert result.passed, str(result)
    return result
