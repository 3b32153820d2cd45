"""The tensor-core model against a literal scalar reading of the published block-FMA model, and
its refusals."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from ceiling import InputError
from ceiling.numerics import Unpublished, lookup, mma, run
from ceiling.numerics.formats import FORMATS

TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def _exp(x: Fraction) -> int:
    """floor(log2 |x|) of a nonzero fraction."""
    e = x.numerator.bit_length() - x.denominator.bit_length()
    return e if abs(x) >= Fraction(2) ** e else e - 1


def reference_block(p, fmt, a, b, c: Fraction) -> Fraction:
    """One block, element by element as Generic_BFMA_TC.m states it (global alignment, no sticky bit)."""
    terms = []
    for x, y in zip(a, b):
        if x == 0 or y == 0:
            continue  # zero products leave the block
        ex = max(_exp(x), fmt.min_exponent)
        ey = max(_exp(y), fmt.min_exponent)
        sig = abs(x / Fraction(2) ** ex * y / Fraction(2) ** ey)  # in [0, 4): kept denormalised
        terms.append((x * y < 0, ex + ey, int(sig * 2 ** 23)))
    if c != 0:
        ec = max(_exp(c), -126)
        terms.append((c < 0, ec, int(abs(c) / Fraction(2) ** ec * 2 ** 23)))
    if not terms:
        return Fraction(0)
    top = max(max(e for _, e, _ in terms), p.min_exponent)
    neab = p.extra_alignment_bits
    total = 0
    for neg, e, sig in terms:
        sig = sig << neab if neab >= 0 else sig >> -neab
        shift = top - e
        aligned = sig >> shift if shift <= 31 else 0
        total += -aligned if neg else aligned
    if total == 0:
        return Fraction(0)
    value = Fraction(abs(total)) * Fraction(2) ** (top - 23 - neab)
    quantum = Fraction(2) ** (max(_exp(value), -126) - (23 + min(neab, 0)))
    units = value / quantum
    kept = math.floor(units)
    if p.rounding == "rne" and (units - kept > Fraction(1, 2) or (units - kept == Fraction(1, 2) and kept % 2)):
        kept += 1
    out = kept * quantum
    if out >= 2 ** 128:
        return Fraction(10) ** 100  # stands for infinity
    return -out if total < 0 else out


def reference(p, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    fmt = FORMATS[p.kind]
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), dtype=np.float32)
    for i in range(m):
        for j in range(n):
            acc = Fraction(float(c[i, j]))
            for k0 in range(0, k, p.block):
                acc = reference_block(p, fmt, [Fraction(float(x)) for x in a[i, k0:k0 + p.block]],
                                      [Fraction(float(y)) for y in b[k0:k0 + p.block, j]], acc)
            out[i, j] = float(acc) if abs(acc) < 2 ** 128 else math.copysign(math.inf, acc)
    return out


def _operands(kind: str, shape, rng) -> np.ndarray:
    """Random values of ``kind`` over a wide exponent range, with zeros and subnormals."""
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-12, 6, shape))
    x[rng.random(shape) < 0.1] = 0.0
    fmt = FORMATS[kind]
    tiny = 2.0 ** (fmt.min_exponent - fmt.mantissa_bits)
    sub = rng.random(shape) < 0.05
    x[sub] = tiny * rng.integers(1, 2 ** fmt.mantissa_bits, sub.sum())
    if kind == "tf32":
        return (torch.from_numpy(x).float().view(torch.int32) & ~0x1FFF).view(torch.float32).double().numpy()
    return torch.from_numpy(x).to(TORCH[kind]).double().numpy()


@pytest.mark.parametrize("target", ["h100", "b200", "b200-rn"])
@pytest.mark.parametrize("kind", ["fp16", "bf16", "tf32", "e4m3", "e5m2"])
def test_model_matches_the_published_model_element_by_element(kind, target):
    rng = np.random.default_rng(sum(map(ord, kind + target)))
    p = lookup(target, kind)
    k = 2 * p.block + 5  # a ragged last block
    a, b = _operands(kind, (3, k), rng), _operands(kind, (k, 4), rng)
    c = (rng.standard_normal((3, 4)) * 4).astype(np.float32)
    c[0, 0] = 0.0
    c[1, 1] = np.float32(2.0 ** -130)  # a subnormal accumulator
    got = mma(a, b, c, kind, target)
    want = reference(p, a, b, c)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_cancellation_and_carries_match_the_published_model():
    """Cancellation to zero, carries out of the block, and the narrowed H100 FP8 sum."""
    for target in ("h100", "b200-rn"):
        p = lookup(target, "e4m3")
        a = np.array([[448.0] * 32 + [1.0, -1.0] + [0.0] * 30, [1.125] * 64])
        b = np.array([[448.0] * 64, [1.0 + 2.0 ** -3] * 64]).T
        c = np.array([[1.0, -3.0], [0.5, 2.0 ** -20]], dtype=np.float32)
        np.testing.assert_array_equal(mma(a, b, c, "e4m3", target).view(np.uint32),
                                      reference(p, a, b, c).view(np.uint32))


def test_hopper_fp8_keeps_thirteen_fraction_bits_and_blackwell_keeps_all():
    """2^14 + 1: bit 14 below the leading one, kept by the B200 model only."""
    a, b, c = [[1.0]], [[1.0]], np.array([[2.0 ** 14]], np.float32)
    assert mma(a, b, c, "e4m3", "h200")[0, 0] == 2.0 ** 14
    assert mma(a, b, c, "e4m3", "b200")[0, 0] == 2.0 ** 14 + 1
    assert mma([[2.0]], b, c, "e4m3", "sm_90a")[0, 0] == 2.0 ** 14 + 2


def test_special_values_follow_ieee_over_the_whole_sum():
    a = np.array([[np.inf, 1.0], [np.inf, 0.0], [1.0, 2.0], [np.nan, 1.0]])
    b = np.array([[1.0, 1.0], [0.0, -np.inf]])
    d = mma(a, b, None, "e5m2", "h100")
    assert np.isinf(d[0, 0]) and d[0, 0] > 0
    assert np.isnan(d[0, 1])  # +inf and -inf
    assert np.isnan(d[1, 1])  # inf * 0
    assert np.isinf(d[2, 1]) and d[2, 1] < 0
    assert np.isnan(d[3]).all()
    big = np.array([[2.0 ** 100, 0.0], [2.0 ** 100, 2.0 ** 100]])  # finite operands, a sum past float32
    d = mma(big, np.array([[2.0 ** 100], [1.0]]), None, "bf16", "b200")
    assert np.isinf(d).all() and (d > 0).all()


def test_torch_operands_and_empty_k():
    a = torch.randn(4, 48).to(torch.float8_e5m2)
    b = torch.randn(48, 3).to(torch.float8_e5m2)
    np.testing.assert_array_equal(mma(a, b, None, "e5m2", "b200"), mma(a.double().numpy(), b.double().numpy(),
                                                                       None, "e5m2", "b200"))
    c = np.array([[1.5, -2.0]], np.float32)
    np.testing.assert_array_equal(mma(np.zeros((1, 0)), np.zeros((0, 2)), c, "bf16", "h100"), c)


def test_parameters_carry_their_provenance():
    for target in ("h100", "b200"):
        for kind in ("fp16", "bf16", "tf32", "e4m3", "e5m2"):
            prov = lookup(target, kind).provenance
            assert prov["status"] == "published" and prov["source"] == "KM2025" and prov["file"].startswith("models/")


@pytest.mark.parametrize("call, argument", [
    (lambda: mma([[1.0]], [[1.0]], None, "int8", "h100"), "kind"),
    (lambda: mma([[1.0]], [[1.0]], None, "bf16", "a100"), "target"),
    (lambda: mma([[1.0, 2.0]], [[1.0]], None, "bf16", "h100"), "b"),
    (lambda: mma([[1.0]], [[1.0]], [[0.0, 0.0]], "bf16", "h100"), "c"),
    (lambda: mma([1.0], [[1.0]], None, "bf16", "h100"), "a"),
    (lambda: mma([[1.0 + 2.0 ** -9]], [[1.0]], None, "bf16", "h100"), "a"),
    (lambda: mma([[1.0]], [[500.0]], None, "e4m3", "h100"), "b"),
    (lambda: mma([[1.0]], [[1.0]], [[0.1]], "bf16", "h100"), "c"),
])
def test_bad_input_is_refused_naming_the_argument(call, argument):
    with pytest.raises(InputError) as err:
        call()
    assert err.value.argument == argument


@pytest.mark.parametrize("kind, target, missing", [
    ("bf16", "mi300x", "MI300MC.m"), ("e4m3", "gfx942", "MI300MC.m"),
    ("mxfp8", "b200", "block scales"), ("mxfp4", "b200", "block-scaled"), ("mxfp8", "h100", "MXFP8"),
])
def test_unpublished_targets_and_kinds_are_refused_saying_what_is_missing(kind, target, missing):
    with pytest.raises(Unpublished, match=missing):
        mma([[1.0]], [[1.0]], None, kind, target)


def test_a_hypothesis_runs_through_the_same_model():
    p = dataclasses.replace(lookup("h100", "bf16"), rounding="rne", block=4)
    a = np.array([[1.0, 2.0 ** -24, 2.0 ** -25, 0.0, 0.0]])
    d = run(p, a, np.ones((5, 1)), np.zeros((1, 1), np.float32))
    assert d[0, 0] == np.float32(1.0 + 2.0 ** -23)  # 1 + 0.75 ulp rounds up to nearest
