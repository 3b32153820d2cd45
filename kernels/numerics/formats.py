"""The input formats a tensor core reads and the float32 accumulator, as exact integers. Each
operand is decoded to a sign, an exponent and an integer significand with ``value = (-1)**sign *
significand * 2**(exponent - mantissa_bits)``, the exponent never below the format's smallest normal
one (so a subnormal keeps the minimum exponent and a significand below ``2**mantissa_bits``). Values
that the format cannot hold are refused, since the tensor core never sees them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ceiling.errors import InputError


@dataclass(frozen=True)
class Format:
    name: str
    mantissa_bits: int
    min_exponent: int  # of a normal number
    max_finite: float

    def decode(self, argument: str, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(negative, exponent, significand) of finite ``values`` (float64), all int64/bool arrays."""
        mag = np.abs(values)
        finite = np.isfinite(values)
        _, e = np.frexp(np.where(finite & (mag > 0), mag, 1.0))
        exponent = np.maximum(e.astype(np.int64) - 1, self.min_exponent)
        scaled = np.ldexp(np.where(finite, mag, 0.0), (self.mantissa_bits - exponent).astype(np.int32))
        significand = scaled.astype(np.int64)
        bad = finite & ((scaled != significand) | (mag > self.max_finite))
        if bad.any():
            raise InputError(argument, f"values representable in {self.name}", repr(values[bad].ravel()[0]))
        return np.signbit(values), exponent, significand


# Largest finite values: e4m3fn has no infinity and keeps 0x7e (448) below its one NaN code.
FORMATS = {
    "fp16": Format("fp16", 10, -14, 65504.0),
    "bf16": Format("bf16", 7, -126, float(np.ldexp(255.0, 120))),
    "tf32": Format("tf32", 10, -126, float(np.ldexp(2047.0, 117))),
    "e4m3": Format("e4m3", 3, -6, 448.0),
    "e5m2": Format("e5m2", 2, -14, 57344.0),
}

FLOAT32 = Format("float32", 23, -126, float(np.finfo(np.float32).max))


def as_float64(argument: str, x) -> np.ndarray:
    """A 2-D float64 copy of a NumPy array, a PyTorch tensor (any float dtype, FP8 included) or a list."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().float().numpy()
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(argument, "a 2-D array of numbers", type(x).__name__) from exc
    if arr.ndim != 2:
        raise InputError(argument, "a 2-D array", f"shape {arr.shape}")
    return arr
