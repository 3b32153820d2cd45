"""The NaN and Inf contract (:mod:`ceiling.testing.propagation`) for every op on every backend
that runs on the CPU, forward and backward: a NaN or an infinity planted in one element of an
input reaches exactly what the op's float32 math sends it to, and a NaN behind a masked key
reaches nothing. Each call plants one value per batch element (the batch elements are
independent, so each plant's reach is seen apart from the others'), which keeps the interpreted
and emulated backends to one call per op and dtype."""

from __future__ import annotations

import functools

import pytest
import torch

import ceiling
from ceiling.testing.propagation import (INF, NAN, Plant, assert_contract, attention_math, fp8_gemm_math,
                                         gemm_math, scaled_gemm_math, triangle_attention_math, trimul_math)
from ceiling.triangle.spec import TRIMUL_WEIGHTS

BACKENDS = ["reference", "nvidia", "amd", "tpu", "trainium"]

# NumPy's note on arithmetic with the planted values (the interpreter and the emulator compute in it)
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


def _needs(backend: str) -> None:
    if backend == "tpu":
        pytest.importorskip("jax")


def _randn(*shape, seed: int, dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# ----------------------------------------------------------------------------- GEMM


@pytest.mark.parametrize("backend", BACKENDS)
def test_gemm(backend):
    _needs(backend)
    B, M, N, K = 4, 16, 24, 32
    inputs = {"a": _randn(B, M, K, seed=1), "b": _randn(B, K, N, seed=2), "bias": _randn(N, seed=3)}
    plants = [Plant("a", (0, 3, 5), NAN), Plant("b", (1, 7, 9), NAN), Plant("a", (2, 11, 30), INF),
              Plant("b", (3, 0, 17), -INF), Plant("bias", (20,), NAN)]

    def run(a, b, bias):
        return {"out": ceiling.gemm(a, b, bias=bias, out_dtype=torch.float32, backend=backend)}

    assert_contract(run, gemm_math, inputs, plants, grads=("a", "b", "bias"), dout={"out": _randn(B, M, N, seed=4)})


# ----------------------------------------------------------------------------- FP8 GEMM


def _fp8(shape, dtype, seed):
    return (_randn(*shape, seed=seed) * 4).to(dtype)


@pytest.mark.parametrize("backend", BACKENDS[:3])
@pytest.mark.parametrize("kinds", [("1x128", "128x128"), ("row", "tensor")])
def test_scaled_gemm(backend, kinds):
    a_kind, b_kind = kinds
    M, N, K = 33, 40, 256
    dtype = torch.float8_e4m3fn if a_kind == "1x128" else torch.float8_e5m2
    scale_shapes = {"1x128": (M, K // 128), "128x128": (K // 128, 1), "row": (M, 1), "tensor": ()}
    inputs = {"a": _fp8((M, K), dtype, 1), "b": _fp8((N, K), dtype, 2).mT,
              "a_scale": _randn(*scale_shapes[a_kind], seed=3).abs() + 0.5,
              "b_scale": _randn(*scale_shapes[b_kind], seed=4).abs() + 0.5}
    if a_kind == "1x128":
        plants = [Plant("a", (3, 5), NAN), Plant("b", (130, 7), NAN), Plant("a_scale", (20, 1), NAN)]
    else:  # e5m2 holds infinities
        plants = [Plant("a", (2, 0), INF), Plant("b", (9, 30), -INF), Plant("a_scale", (6, 0), NAN)]

    def run(a, b, a_scale, b_scale):
        return {"out": ceiling.scaled_gemm(a, b, a_scale, b_scale, out_dtype=torch.float32, backend=backend)}

    # AMD runs OCP operands as FNUZ codes, which have no infinity (README: FP8 GEMM)
    math = functools.partial(scaled_gemm_math, a_kind=a_kind, b_kind=b_kind, infinite_codes=backend != "amd")
    assert_contract(run, math, inputs, plants)


@pytest.mark.parametrize("backend", BACKENDS[:3])
@pytest.mark.parametrize("recipe", ["tensor", "block"])
def test_fp8_gemm(backend, recipe):
    """The trainable FP8 GEMM, forward and backward (bf16 gradients through the saved FP8 operands)."""
    M, N, K = 33, 40, 256
    inputs = {"a": _randn(M, K, seed=1, dtype=torch.bfloat16), "b": _randn(K, N, seed=2, dtype=torch.bfloat16)}
    plants = [Plant("a", (3, 5), NAN), Plant("b", (130, 7), NAN), Plant("a", (20, 200), INF), Plant("b", (9, 30), -INF)]

    def run(a, b):
        return {"out": ceiling.fp8_gemm(a, b, recipe=recipe, backend=backend)}

    assert_contract(run, fp8_gemm_math, inputs, plants, grads=("a", "b"),
                    dout={"out": _randn(M, N, seed=3, dtype=torch.bfloat16)})


# ----------------------------------------------------------------------------- attention


def attention_case(backend):
    """Six batch elements, one plant each: q, k, v and bias NaN, a NaN key the mask hides, +Inf in k."""
    B, S, H, D = 6, 16, 2, 32
    dtype = torch.float32 if backend == "reference" else torch.bfloat16
    inputs = {"q": _randn(B, S, H, D, seed=1, dtype=dtype), "k": _randn(B, S, H, D, seed=2, dtype=dtype),
              "v": _randn(B, S, H, D, seed=3, dtype=dtype), "bias": _randn(B, H, S, S, seed=4)}
    mask = torch.ones(B, 1, 1, S, dtype=torch.bool)
    mask[4, ..., 5] = False
    inputs["mask"] = mask
    plants = [Plant("q", (0, 3, 1, 7), NAN), Plant("k", (1, 2, 0, 5), NAN), Plant("v", (2, 9, 1, 0), NAN),
              Plant("bias", (3, 0, 2, 6), NAN), Plant("k", (4, 5, 0, 1), NAN), Plant("k", (5, 1, 1, 2), INF)]
    return inputs, plants, _randn(B, S, H, D, seed=5, dtype=dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_attention(backend):
    _needs(backend)
    inputs, plants, dout = attention_case(backend)

    def run(q, k, v, bias, mask):
        out, lse = ceiling.attention(q, k, v, bias=bias, mask=mask, return_lse=True, backend=backend)
        return {"out": out, "lse": lse}

    assert_contract(run, attention_math, inputs, plants, grads=("q", "k", "v", "bias"), dout={"out": dout})


# ----------------------------------------------------------------------------- triangle attention


def triangle_attention_case(compact: bool):
    """One plant per batch element (eight): q, k, v and bias NaN, a NaN k, a NaN v and a NaN bias
    behind a key masked in one row (the bias's other rows see it), +Inf in k; and a row with no
    valid key. ``compact``: the same kinds in one batch element, on separate pair rows and heads,
    for the interpreted backends (the TPU's flash attention runs once per batch element)."""
    N, H, D = 5, 2, 32
    B = 1 if compact else 8
    inputs = {"q": _randn(B, N, H, N, D, seed=1), "k": _randn(B, N, H, N, D, seed=2),
              "v": _randn(B, N, H, N, D, seed=3), "bias": _randn(B, 1, H, N, N, seed=4)}
    mask = torch.ones(B, N, 1, 1, N, dtype=torch.bool)
    if compact:
        mask[0, 2, ..., 3] = False  # behind it: a NaN k, and the NaN bias of (head 0, query 1, key 3)
        mask[0, 3, ..., 1] = False  # behind it: a NaN v
        mask[0, 4] = False  # row 4 sees no key
        plants = [Plant("q", (0, 0, 0, 2, 7), NAN), Plant("k", (0, 2, 0, 3, 0), NAN), Plant("v", (0, 3, 1, 1, 9), NAN),
                  Plant("bias", (0, 0, 0, 1, 3), NAN), Plant("k", (0, 1, 1, 2, 3), INF)]
    else:
        mask[4, 2, ..., 3] = False
        mask[5, 2, ..., 3] = False
        mask[6, 1, ..., 4] = False
        mask[7, 3] = False  # row 3 sees no key
        plants = [Plant("q", (0, 1, 0, 2, 7), NAN), Plant("k", (1, 1, 1, 4, 0), NAN),
                  Plant("v", (2, 3, 0, 2, 5), NAN), Plant("bias", (3, 0, 1, 1, 2), NAN),
                  Plant("k", (4, 2, 0, 3, 0), NAN), Plant("bias", (5, 0, 0, 1, 3), NAN),
                  Plant("v", (6, 1, 1, 4, 9), NAN), Plant("k", (7, 0, 1, 2, 3), INF)]
    inputs["mask"] = mask
    return inputs, plants, _randn(B, N, H, N, D, seed=5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_triangle_attention(backend):
    _needs(backend)
    inputs, plants, dout = triangle_attention_case(compact=backend in ("nvidia", "amd", "tpu"))

    def run(q, k, v, bias, mask):
        out, lse = ceiling.triangle_attention(q, k, v, bias, mask, backend=backend, return_lse=True)
        return {"out": out, "lse": lse}

    assert_contract(run, triangle_attention_math, inputs, plants, grads=("q", "k", "v", "bias"),
                    dout={"out": dout})


# ----------------------------------------------------------------------------- triangle multiplicative update


@pytest.mark.parametrize("backend", BACKENDS)
def test_triangle_multiplicative_update(backend):
    _needs(backend)
    B, N, CZ, C = 3, 6, 16, 8
    shapes = {"norm_in_weight": (CZ,), "norm_in_bias": (CZ,), "p_in_weight": (2 * C, CZ), "p_in_bias": (2 * C,),
              "g_in_weight": (2 * C, CZ), "g_in_bias": (2 * C,), "norm_out_weight": (C,), "norm_out_bias": (C,),
              "p_out_weight": (CZ, C), "p_out_bias": (CZ,), "g_out_weight": (CZ, CZ), "g_out_bias": (CZ,)}
    inputs = {"x": _randn(B, N, N, CZ, seed=1)}
    inputs.update({n: _randn(*shapes[n], seed=10 + i) * 0.3 for i, n in enumerate(TRIMUL_WEIGHTS)})
    mask = torch.ones(B, N, N)
    mask[1, 2, 4] = 0
    inputs["mask"] = mask
    plants = [Plant("x", (0, 1, 3, 2), NAN), Plant("x", (1, 2, 4, 5), NAN), Plant("x", (2, 4, 0, 9), INF),
              Plant("p_out_bias", (3,), NAN)]

    def run(x, mask, **weights):
        return {"out": ceiling.triangle_multiplicative_update(x, "outgoing", mask, **weights, backend=backend)}

    math = functools.partial(trimul_math, direction="outgoing")
    assert_contract(run, math, inputs, plants, grads=("x", *TRIMUL_WEIGHTS), dout={"out": _randn(B, N, N, CZ, seed=2)})


# ----------------------------------------------------------------------------- the check itself


def test_the_check_sees_a_dropped_and_a_leaked_nan():
    """A backend that drops a NaN (a select replacing it) and one that lets a NaN behind a masked
    key through (a mask added as -inf) both fail the contract; the math itself holds it."""
    from ceiling.testing.propagation import check

    inputs, plants, dout = triangle_attention_case(compact=True)

    def dropping(**x):
        return {n: t.nan_to_num(0.0) for n, t in triangle_attention_math(**x).items()}

    def adding(q, k, v, bias, mask):
        s = torch.einsum("bihjd,bihkd->bihjk", q, k) / 32**0.5 + bias + torch.where(mask, 0.0, -INF)
        p = torch.softmax(s, -1).nan_to_num(0.0)
        return {"out": torch.einsum("bihjk,bihkd->bihjd", p, v), "lse": torch.logsumexp(s, -1)}

    kw = dict(grads=("q", "k", "v", "bias"), dout={"out": dout})
    assert not check(triangle_attention_math, triangle_attention_math, inputs, plants, **kw)
    assert any(p.startswith("out: ") for p in check(dropping, triangle_attention_math, inputs, plants, **kw))
    assert any(p.startswith("out: ") for p in check(adding, triangle_attention_math, inputs, plants, **kw))
