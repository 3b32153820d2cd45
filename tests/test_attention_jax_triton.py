"""Attention on JAX arrays on a GPU, through jax-triton (``ceiling.triton.attention_jax``).

On the CPU: the whole GPU code path (``ceiling.attention`` -> custom VJP -> jax-triton
launcher -> jax-order wrapper kernels) with ``triton_call`` replaced by the Triton
interpreter (``tests/jax_triton_interpreter.py``), against a float64 oracle with the
error-ratio rule, every gradient (bias included, in each dBias reduction mode) under a
random output gradient; and the wrappers cross-compiled for sm_90a as jax-triton
specializes them (HGMMA, no spills). On a GPU with jax and jax-triton
(``-m gpu``): the same calls on device arrays under ``jax.jit``/``jax.grad``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ceiling
from ceiling.jax_bridge import jax_triton_unavailable
from ceiling.attention import reference
from ceiling.attention.op import ATTENTION
from ceiling.op import resolve_config
from ceiling.triton import attention as flash
from ceiling.triton.attention_specs import jax_kernel_specs
from tests.jax_triton_interpreter import jax_triton_interpreted  # noqa: F401  (fixture)
from tests.test_attention import SMALL, assert_bias_grad_close, assert_close_ratio, cancelling_bias_tolerance, make_inputs

jax = pytest.importorskip("jax")
jnp = jax.numpy

BF16, FP16 = torch.bfloat16, torch.float16

# (vendor, batch, q_len, k_len, heads, kv_heads, head_dim, causal, bias shape, mask shape, dtype) -> dBias mode
CASES = {
    # GQA, odd lengths, a batch-broadcast bias (atomics of whole tiles), a mask with a fully masked row
    "nvidia-gqa-batchbias-mask": ("nvidia", 2, 37, 45, 4, 2, 64, True, (1, 4, 37, 45), (2, 1, 37, 45), BF16),
    # head dim 80 zero-padded to 128, MQA, a query-broadcast bias (column sums, then atomics)
    "nvidia-d80-mqa-colbias": ("nvidia", 1, 21, 30, 2, 1, 80, False, (1, 2, 1, 30), None, FP16),
    # q_len > k_len causal: the first queries see nothing; a full-size bias (plain stores)
    "nvidia-causal-q>k-fullbias": ("nvidia", 1, 29, 17, 2, 2, 32, True, (1, 2, 29, 17), None, BF16),
    # AMD's configs, head dim 48 unpadded (masked columns), a key-broadcast bias (row sums)
    "amd-d48-rowbias-mask": ("amd", 1, 19, 23, 2, 2, 48, False, (2, 19, 1), (1, 1, 19, 23), BF16),
    # a per-head scalar bias (one atomic per program)
    "nvidia-scalarbias": ("nvidia", 2, 13, 20, 2, 2, 32, False, (1, 2, 1, 1), None, BF16),
}
MODES = {"nvidia-gqa-batchbias-mask": 2, "nvidia-d80-mqa-colbias": 3, "nvidia-causal-q>k-fullbias": 1,
         "amd-d48-rowbias-mask": 4, "nvidia-scalarbias": 5}


def _to_jax(t: torch.Tensor | None, dtype=None):
    if t is None:
        return None
    if t.dtype == torch.bool:
        return jnp.asarray(t.numpy())
    return jnp.asarray(t.float().numpy()).astype(dtype or {BF16: jnp.bfloat16, FP16: jnp.float16}.get(t.dtype, jnp.float32))


def _to_torch(x, dtype) -> torch.Tensor:
    return torch.from_numpy(np.array(x.astype(jnp.float32))).to(dtype)


@pytest.mark.parametrize("case", list(CASES))
def test_gpu_path_interpreted_matches_float64(case, jax_triton_interpreted):  # noqa: F811
    vendor, b, sq, sk, h, hk, d, causal, bshape, mshape, dtype = CASES[case]
    q, k, v, bias, mask = make_inputs(b, sq, sk, h, hk, d, dtype, bshape, mshape, seed=sum(map(ord, case)))
    if mask is not None:
        mask[0, 0, 5 % sq, :] = False  # a fully masked row
    bias4 = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape))
    assert flash._dbias_mode(tuple(bias4.shape), (b, h, sq, sk)) == MODES[case]
    scale = 1.0 / math.sqrt(d)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(3)).to(dtype)

    def f(q, k, v, bias):
        return ceiling.attention(q, k, v, bias=bias, mask=_to_jax(mask), causal=causal, backend=vendor, config=SMALL,
                                 return_lse=True)

    (out, lse), vjp = jax.vjp(f, *(_to_jax(t) for t in (q, k, v)), _to_jax(bias, jnp.float32))
    grads = vjp((_to_jax(do), jnp.zeros(lse.shape, jnp.float32)))
    assert jax_triton_interpreted == ["attn_fwd_kernel_jax", "attn_bwd_preprocess_kernel_jax",
                                      "attn_bwd_dkdv_kernel_jax", "attn_bwd_dq_kernel_jax"]

    ex_out, ex_lse = reference.attention_fwd(q.double(), k.double(), v.double(), bias.double(), mask, causal, scale)
    ex_grads = reference.attention_bwd(do.double(), q.double(), k.double(), v.double(), None, None, bias.double(), mask,
                                       causal, scale, True)
    lp_bias = bias.to(dtype)
    lp_out, _ = reference.attention_fwd(q, k, v, lp_bias, mask, causal, scale, compute_dtype=dtype)
    lp_grads = reference.attention_bwd(do, q, k, v, lp_out, None, lp_bias, mask, causal, scale, True, compute_dtype=dtype)

    assert out.dtype == _to_jax(q).dtype and out.shape == q.shape
    assert_close_ratio("out", _to_torch(out, torch.float64), lp_out, ex_out)
    lse_t = torch.from_numpy(np.array(lse)).double()
    finite = torch.isfinite(ex_lse)
    assert torch.equal(torch.isfinite(lse_t), finite) and torch.all(lse_t[~finite] == -math.inf)
    if finite.any():
        assert (lse_t[finite] - ex_lse[finite]).abs().max().item() < 2e-2
    for name, g, like, lp, ex in zip(("dq", "dk", "dv", "dbias"), grads, (q, k, v, bias), lp_grads, ex_grads):
        assert g.shape == like.shape, name
        if name == "dbias":
            zero = cancelling_bias_tolerance(do, q, k, v, bias, mask, causal, scale)
            assert_bias_grad_close(_to_torch(g, torch.float64), lp, ex, zero)
        else:
            assert_close_ratio(name, _to_torch(g, torch.float64), lp, ex)
    if mask is not None:  # the fully masked row: zero output, zero query gradient
        assert not np.asarray(out.astype(jnp.float32))[0, 5 % sq].any()
        assert not np.asarray(grads[0].astype(jnp.float32))[0, 5 % sq].any()


def test_gpu_path_under_jit(jax_triton_interpreted):  # noqa: F811
    """The launchers trace: jit of value_and_grad, causal GQA, no bias."""
    q, k, v, _, _ = make_inputs(1, 24, 24, 2, 1, 32, BF16, seed=11)
    cot = torch.randn(q.shape, generator=torch.Generator().manual_seed(12))

    def loss(q, k, v):
        o = ceiling.attention(q, k, v, causal=True, backend="nvidia", config=SMALL)
        return jnp.sum(o.astype(jnp.float32) * _to_jax(cot, jnp.float32))

    val, grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(*(_to_jax(t) for t in (q, k, v)))
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    ref, _ = reference.attention_fwd(qd, kd, vd, None, None, True, 32 ** -0.5)
    (ref * cot.double()).sum().backward()
    assert abs(float(val) - (ref * cot.double()).sum().item()) < 0.05 * (1 + abs(float(val)))
    for g, t in zip(grads, (qd, kd, vd)):
        g = _to_torch(g, torch.float64)
        assert torch.isfinite(g).all()
        assert (g - t.grad).abs().max().item() <= 3e-2 * max(1.0, t.grad.abs().max().item())


# ---------------------------------------------------------------------------- sm_90a, as jax-triton compiles


def _sm90(head_dim: int, biased: bool) -> dict:
    """The Hopper config a JAX problem resolves to on an H200 (pointer loads: the narrow tiles,
    narrower with a bias)."""
    import dataclasses

    from ceiling.attention.spec import shipped_problem
    from ceiling.nvidia.attention_specs import H200

    problem = shipped_problem(head_dim, "bfloat16", causal=False, biased=biased, **H200)
    return resolve_config(dataclasses.replace(problem, framework="jax", device="gpu:0"),
                          ATTENTION.implementation("nvidia"), None)


# Realistic launches have unit key strides for a bias and mask with a full key dimension:
# jax-triton turns those integers into the constant 1.
JAX_SPECS = (jax_kernel_specs(128, _sm90(128, False), causal=True)
             + jax_kernel_specs(128, _sm90(128, True), causal=False, bias=True, mask=True,
                                          ones=("stride_bn", "stride_mn")))


@pytest.mark.parametrize("spec", JAX_SPECS, ids=[s.name for s in JAX_SPECS])
def test_jax_wrappers_compile_for_sm90a_with_hgmma_no_spills(spec):
    from ceiling.isa import profile

    p = profile(spec, "sm_90a")
    assert p.extra["hgmma"] > 0, f"{spec.name}: no HGMMA"
    assert p.spill_bytes == 0 and p.extra["ldl_stl"] == 0, f"{spec.name}: spills {p.spill_bytes} B"
    assert p.instruction_mix.get("LDGSTS", 0) > 0, f"{spec.name}: pointer loads not pipelined through cp.async"


def test_mqa_specialization_compiles():
    """kv_heads == 1 (MQA) reaches the kernel as the constant 1: the wrappers still compile."""
    from ceiling.isa import compile_for

    for spec in jax_kernel_specs(64, _sm90(64, False), causal=True, ones=("kv_heads",)):
        assert compile_for(spec, "sm_90a").asm["cubin"]


# ---------------------------------------------------------------------------- on a GPU



@pytest.mark.gpu
@pytest.mark.skipif(jax_triton_unavailable() is not None, reason=jax_triton_unavailable() or "")
@pytest.mark.parametrize("head_dim,causal,bias_shape", [(128, True, (1, 8, 1000, 1000)), (64, False, (2, 8, 1, 1000)),
                                                         (80, True, None)])
def test_jax_attention_on_gpu_through_jax_triton(head_dim, causal, bias_shape):
    """ceiling.attention on JAX GPU arrays under jit and grad, against the float32 reference."""
    rng = np.random.default_rng(head_dim)
    b, s, h, hk = 2, 1000, 8, 2
    q = jnp.asarray(rng.standard_normal((b, s, h, head_dim)), jnp.bfloat16)
    k = jnp.asarray(rng.standard_normal((b, s, hk, head_dim)), jnp.bfloat16)
    v = jnp.asarray(rng.standard_normal((b, s, hk, head_dim)), jnp.bfloat16)
    bias = None if bias_shape is None else jnp.asarray(rng.standard_normal(bias_shape), jnp.float32)
    mask = jnp.asarray(rng.random((b, 1, 1, s)) > 0.1)
    cot = jnp.asarray(rng.standard_normal(q.shape), jnp.float32)

    def loss(backend, dtype):
        def f(q, k, v, bias):
            o = ceiling.attention(q.astype(dtype), k.astype(dtype), v.astype(dtype), bias=bias, mask=mask,
                                  causal=causal, backend=backend)
            return jnp.sum(o.astype(jnp.float32) * cot)
        return f

    argnums = (0, 1, 2) if bias is None else (0, 1, 2, 3)
    val, grads = jax.jit(jax.value_and_grad(loss("nvidia", jnp.bfloat16), argnums=argnums))(q, k, v, bias)
    ref_val, ref_grads = jax.jit(jax.value_and_grad(loss("reference", jnp.float32), argnums=argnums))(q, k, v, bias)
    assert abs(float(val) - float(ref_val)) <= 2e-2 * (1 + abs(float(ref_val)))
    for name, g, r in zip(("dq", "dk", "dv", "dbias"), grads, ref_grads):
        g, r = np.asarray(g, np.float64), np.asarray(r, np.float64)
        assert np.isfinite(g).all(), name
        assert np.abs(g - r).max() <= 2e-2 * max(1.0, np.abs(r).max()), name


@pytest.mark.parametrize("scale", [-0.4, 0.0])
def test_gpu_path_non_positive_scale(scale, jax_triton_interpreted):  # noqa: F811
    """The forward kernel needs scale > 0; the launcher turns a negative scale into a negated K and
    a zero scale into a zero Q, as the torch launcher does."""
    q, k, v, _, _ = make_inputs(1, 19, 21, 2, 2, 32, BF16, seed=13)
    ex_out, _ = reference.attention_fwd(q.double(), k.double(), v.double(), None, None, True, scale)
    lp_out, _ = reference.attention_fwd(q, k, v, None, None, True, scale, compute_dtype=BF16)
    out = ceiling.attention(*(_to_jax(t) for t in (q, k, v)), causal=True, scale=scale, backend="nvidia", config=SMALL)
    assert_close_ratio("out", _to_torch(out, torch.float64), lp_out, ex_out)
