"""A bit-exact model of one tensor-core matrix multiply-accumulate, ``D = A @ B + C`` in float32: the
block-FMA model of Fasi, Higham, Mikaitis and Pranesh (2021) and Khattak and Mikaitis (2025),
in integer arithmetic. K is cut into blocks of the target's size (zero-padded); for each block and
output element the nonzero products are formed exactly, the products and the accumulator are
aligned to the largest exponent among them (never below the target's minimum) on a grid of
23 + extra-alignment-bits fraction bits, every bit shifted out is dropped (each magnitude
truncated, no sticky bit), the aligned integers are summed exactly, and the sum is normalised once
and rounded to the result's fraction bits (toward zero or to nearest even). The rounded result is
the next block's accumulator. NaN and infinite operands follow IEEE rules over the whole sum (any
NaN, or infinities of both signs, give NaN); a block that overflows gives an infinity that later
blocks keep. A sum that cancels exactly is +0, as in the published model.
"""

from __future__ import annotations

import numpy as np

from ceiling.errors import InputError
from ceiling.numerics.formats import FLOAT32, FORMATS, as_float64
from ceiling.numerics.parameters import Parameters, lookup

_NO_TERM = np.iinfo(np.int64).min // 4  # exponent of an absent term: below every real one


def _shift(values: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``floor(values * 2**-right)`` for nonnegative int64 values and any int64 shifts."""
    left = np.clip(-right, 0, 62)
    down = np.clip(right, 0, 63)
    return np.where(right >= 0, np.right_shift(values, down), np.left_shift(values, left))


def _round(magnitude: np.ndarray, drop: np.ndarray, mode: str) -> np.ndarray:
    """``magnitude`` with its ``drop`` low bits removed (drop may be <= 0: exact), RZ or RNE."""
    kept = _shift(magnitude, drop)
    if mode == "rz":
        return kept
    d = np.clip(drop, 1, 63)
    rest = magnitude - np.left_shift(kept, np.clip(drop, 0, 62))
    half = np.left_shift(np.int64(1), d - 1)
    up = (drop > 0) & ((rest > half) | ((rest == half) & (kept & 1 == 1)))
    return kept + up


def block_fma(p: Parameters, sign: np.ndarray, exponent: np.ndarray, significand: np.ndarray,
              product_scale: int, c: np.ndarray) -> np.ndarray:
    """One block for every output element at once.

    sign, exponent, significand: (..., F) products (significand 0 for a zero product), each
    worth ``significand * 2**(exponent - product_scale)``; c: (...) float32 accumulators.
    Returns the float32 results.
    """
    c_sign, c_exp, c_sig = FLOAT32.decode("c", c.astype(np.float64))
    if not p.subnormal_outputs:
        c_sig = np.where(c_exp == FLOAT32.min_exponent, np.where(c_sig >= 1 << 23, c_sig, 0), c_sig)
    present = significand != 0
    c_present = c_sig != 0
    top = np.max(np.where(present, exponent, _NO_TERM), axis=-1)
    top = np.maximum(np.maximum(top, np.where(c_present, c_exp, _NO_TERM)), p.min_exponent)
    # Grid unit 2**(top - 23 - extra): a product's integer shifts right by (top - exponent) and by
    # the difference between its own scale and the grid's; the accumulator's likewise.
    grid = 23 + p.extra_alignment_bits
    prod_shift = (top[..., None] - exponent) - (grid - product_scale)
    aligned = np.where(present, _shift(significand, prod_shift), 0)
    c_aligned = np.where(c_present, _shift(c_sig, (top - c_exp) - (grid - 23)), 0)
    total = np.sum(np.where(sign, -aligned, aligned), axis=-1) + np.where(c_sign, -c_aligned, c_aligned)

    magnitude = np.abs(total)
    _, length = np.frexp(magnitude.astype(np.float64))  # exact: |total| < 2**53
    lead = top + (length.astype(np.int64) - 1) - grid  # exponent of the leading bit
    fraction = p.result_fraction_bits
    quantum = np.maximum(lead, FLOAT32.min_exponent) - fraction
    rounded = _round(magnitude, quantum - (top - grid), p.rounding)
    value = np.ldexp(rounded.astype(np.float64), quantum.astype(np.int32))
    if not p.subnormal_outputs:
        value = np.where(value < 2.0 ** FLOAT32.min_exponent, 0.0, value)
    value = np.where(value >= 2.0 ** 128, np.inf, value)
    return np.where(total < 0, -value, value).astype(np.float32)


def _specials(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(nan, inf) per output: NaN where IEEE's sum of the products and c is NaN, else +-inf or 0."""
    with np.errstate(invalid="ignore", over="ignore"):
        prods = a[:, :, None] * b[None, :, :]
    pos = np.any(prods == np.inf, axis=1) | (c == np.inf)
    neg = np.any(prods == -np.inf, axis=1) | (c == -np.inf)
    nan = np.any(np.isnan(prods), axis=1) | np.isnan(c) | (pos & neg)
    return nan, np.where(pos, np.inf, np.where(neg, -np.inf, 0.0))


def mma(a, b, c=None, kind: str = "bf16", target: str = "h100") -> np.ndarray:
    """``a @ b + c`` as ``target``'s tensor core computes it for ``kind`` operands, in float32.

    a: (M, K), b: (K, N) arrays (NumPy, PyTorch of any float dtype, or nested lists) whose values
    ``kind`` represents exactly; c: (M, N) float32 values or None (zeros). Returns a float32
    NumPy array (M, N). Unknown targets, kinds and bad shapes raise InputError; a target or kind
    without a published model raises ``Unpublished`` (an InputError) saying what is missing.
    """
    return run(lookup(target, kind), a, b, c)


def run(p: Parameters, a, b, c=None) -> np.ndarray:
    """:func:`mma` under explicit parameters (a hypothesis, or a target's published set)."""
    fmt = FORMATS[p.kind]
    a64, b64 = as_float64("a", a), as_float64("b", b)
    if a64.shape[1] != b64.shape[0]:
        raise InputError("b", f"({a64.shape[1]}, N) to match a's K", f"shape {b64.shape}")
    m, k = a64.shape
    n = b64.shape[1]
    if c is None:
        c32 = np.zeros((m, n), dtype=np.float32)
    else:
        c64 = as_float64("c", c)
        if c64.shape != (m, n):
            raise InputError("c", f"shape {(m, n)}", f"shape {c64.shape}")
        c32 = c64.astype(np.float32)
        if not np.array_equal(c32.astype(np.float64), c64, equal_nan=True):
            raise InputError("c", "float32 values", "values float32 does not represent")
    a_neg, a_exp, a_sig = fmt.decode("a", a64)
    b_neg, b_exp, b_sig = fmt.decode("b", b64)
    if not p.subnormal_inputs:
        a_sig = np.where(a_sig >= 1 << fmt.mantissa_bits, a_sig, 0)
        b_sig = np.where(b_sig >= 1 << fmt.mantissa_bits, b_sig, 0)
    if np.isfinite(a64).all() and np.isfinite(b64).all() and np.isfinite(c32).all():
        nan = special = np.zeros((m, n), dtype=bool)
        inf = np.zeros((m, n))
    else:
        nan, inf = _specials(a64, b64, c32.astype(np.float64))
        special = nan | (inf != 0)
    finite_c = np.where(np.isfinite(c32), c32, np.float32(0))

    block = p.block
    padded = -(-k // block) * block if k else 0
    pad = padded - k
    if pad:
        a_neg, a_exp, a_sig = (np.pad(x, ((0, 0), (0, pad))) for x in (a_neg, a_exp, a_sig))
        b_neg, b_exp, b_sig = (np.pad(x, ((0, pad), (0, 0))) for x in (b_neg, b_exp, b_sig))
    acc = finite_c
    for k0 in range(0, padded, block):
        s = slice(k0, k0 + block)
        # (M, N, F): products of row m of a and column n of b over this block
        sign = a_neg[:, None, s] ^ b_neg[s].T[None, :, :]
        exponent = a_exp[:, None, s] + b_exp[s].T[None, :, :]
        significand = a_sig[:, None, s] * b_sig[s].T[None, :, :]
        result = block_fma(p, sign, exponent, significand, 2 * fmt.mantissa_bits, np.where(np.isinf(acc), 0, acc))
        acc = np.where(np.isinf(acc), acc, result)
    if not padded:  # K == 0: D = C, through one block of no products
        acc = block_fma(p, np.zeros((m, n, 1), bool), np.zeros((m, n, 1), np.int64), np.zeros((m, n, 1), np.int64),
                        0, finite_c)
    return np.where(nan, np.float32(np.nan), np.where(special, inf.astype(np.float32), acc)).astype(np.float32)
