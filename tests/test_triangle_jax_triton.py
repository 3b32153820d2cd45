"""The triangle ops on JAX arrays on a GPU, through jax-triton.

On the CPU: ``ceiling.triangle_attention`` / ``ceiling.triangle_multiplicative_update``
on JAX arrays through their GPU code path (custom VJP -> jax-triton launchers -> jax-order
wrapper kernels), with ``triton_call`` replaced by the Triton interpreter
(``tests/jax_triton_interpreter.py``), against float64 with the error-ratio rule, every
gradient under a random output gradient, fully masked rows, odd N; and the wrappers
cross-compiled for sm_90a as jax-triton specializes them. On a GPU with jax and
jax-triton (``-m gpu``): the same calls on device arrays.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ceiling
from ceiling.jax_bridge import jax_triton_unavailable
from ceiling.testing.numerics import assert_close
from ceiling.triangle.spec import TRIMUL_WEIGHTS
from ceiling.triton import triangle_attention_specs, triangle_multiplication_specs
from tests.jax_triton_interpreter import jax_triton_interpreted  # noqa: F401  (fixture)
from tests.test_triangle import (
    F64,
    attention_inputs,
    exact_attention,
    framework_attention,
    trimul_exact,
    trimul_inputs,
)

jax = pytest.importorskip("jax")
jnp = jax.numpy


def _j(t: torch.Tensor):
    if t.dtype == torch.bfloat16:
        return jnp.asarray(t.float().numpy()).astype(jnp.bfloat16)
    return jnp.asarray(t.numpy())


def _t(x) -> torch.Tensor:
    return torch.from_numpy(np.array(x.astype(jnp.float32) if x.dtype == jnp.bfloat16 else x))


@pytest.mark.parametrize("vendor,B,N,H,D,dtype,rows", [("nvidia", 2, 11, 2, 8, torch.float32, 1),
                                                       ("nvidia", 1, 13, 2, 16, torch.bfloat16, 2),
                                                       ("amd", 1, 9, 2, 8, torch.float32, 1)])
def test_triangle_attention_gpu_path_interpreted(vendor, B, N, H, D, dtype, rows, jax_triton_interpreted):  # noqa: F811
    q, k, v, bias, mask = attention_inputs(B, N, H, D, dtype, seed=N + D, fully_masked_rows=(1,))
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(5)).to(dtype)
    config = {"fwd": {"BLOCK_M": 16, "BLOCK_N": 16, "ROWS": rows}}

    def f(q, k, v, b):
        return ceiling.triangle_attention(q, k, v, b, _j(mask), backend=vendor, config=config)

    out, vjp = jax.vjp(f, _j(q), _j(k), _j(v), _j(bias))
    grads = vjp(_j(dout))
    assert jax_triton_interpreted[0] == "fwd_kernel_jax"
    assert "bwd_dbias_kernel_jax" in jax_triton_interpreted
    exact_out, exact_grads = exact_attention(q, k, v, bias, mask, dout)
    fw_out, fw_grads = framework_attention(q, k, v, bias, mask, dout)
    atol = 1e-6 if dtype == torch.float32 else 1e-2
    assert_close("out", _t(out), fw_out, exact_out, atol=atol)
    for name, g, like, e, fw in zip(("dq", "dk", "dv", "dbias"), grads, (q, k, v, bias), exact_grads, fw_grads):
        assert g.shape == like.shape and _t(g).dtype == torch.float32
        assert_close(name, _t(g), fw, e, atol=5 * atol)
    assert not np.asarray(_t(out))[:, 1].any() and not np.asarray(_t(grads[0]))[:, 1].any()


@pytest.mark.parametrize("vendor,N,CZ,C,direction,dtype", [("nvidia", 11, 16, 8, "outgoing", torch.float32),
                                                           ("nvidia", 7, 16, 16, "incoming", torch.float32),
                                                           ("amd", 9, 16, 16, "incoming", torch.bfloat16)])
def test_trimul_gpu_path_interpreted(vendor, N, CZ, C, direction, dtype, jax_triton_interpreted):  # noqa: F811
    x, mask, w = trimul_inputs(2 if N == 11 else 1, N, CZ, C, seed=N + C, bias=dtype == torch.float32)
    dout = torch.randn(x.shape, generator=torch.Generator().manual_seed(6))
    names = [n for n in TRIMUL_WEIGHTS if w[n] is not None]
    jw = {n: _j(w[n].to(dtype)) for n in names}
    # 16-wide column tiles: several column blocks per row tile in the row kernels' grids
    config = {name: {"BLOCK_N": 16} for name in ("ln_gate_proj", "contract", "ln_out_gate", "out_gate_bwd",
                                                  "ln_gate_proj_bwd")}

    def f(x, ws):
        return ceiling.triangle_multiplicative_update(x, direction, _j(mask), **ws, backend=vendor, config=config)

    out, vjp = jax.vjp(f, _j(x.to(dtype)), jw)
    gx, gw = vjp(_j(dout.to(dtype)))
    assert "channel_gemm_kernel_jax" in jax_triton_interpreted and "ln_gate_proj_bwd_kernel_jax" in jax_triton_interpreted
    wd = {n: None if t is None else t.to(dtype) for n, t in w.items()}
    exact_out, exact_grads = trimul_exact(x.to(dtype), direction, mask, wd, dout.to(dtype), F64)
    if dtype == torch.float32:
        fw_out, fw_grads = trimul_exact(x, direction, mask, w, dout, torch.float32)
        atol_out, atol_grad = 1e-6, 1e-5
    else:  # the reference in bf16 is the framework's own low-precision computation
        fw_out, fw_grads = trimul_exact(x.to(dtype), direction, mask, wd, dout.to(dtype), dtype)
        atol_out, atol_grad = 2e-2, 3e-2
    assert out.dtype == _j(x.to(dtype)).dtype
    assert_close("out", _t(out), fw_out, exact_out, atol=atol_out)
    grads = {"x": gx, **gw}
    assert set(grads) == set(exact_grads)
    for name in grads:
        assert grads[name].shape == exact_grads[name].shape, name
        assert_close(f"d{name}", _t(grads[name]), fw_grads[name], exact_grads[name], atol=atol_grad)


# ---------------------------------------------------------------------------- sm_90a, as jax-triton compiles

ATTN_SPECS = triangle_attention_specs.jax_compile_specs("bfloat16")
TRIMUL_SPECS = triangle_multiplication_specs.jax_compile_specs("bfloat16")


def _sm90(spec):
    from ceiling.isa import profile

    p = profile(spec, "sm_90a")
    assert p.tensor_core_instructions > 0, f"{spec.name}: no HGMMA/HMMA"
    assert p.spill_bytes == 0 and p.extra["ldl_stl"] == 0, f"{spec.name}: spills {p.spill_bytes} B"
    return p


@pytest.mark.parametrize("spec", [s for s in ATTN_SPECS if "_fwd_bfloat16" in s.name or "_bwd_dbias_" in s.name]
                         + [s for s in TRIMUL_SPECS if "_contract_" in s.name or "_ln_gate_proj_" in s.name],
                         ids=lambda s: s.name)
def test_jax_wrappers_compile_for_sm90a_with_hgmma_no_spills(spec):
    p = _sm90(spec)
    assert p.instruction_mix.get("HGMMA", 0) > 0, f"{spec.name}: expected wgmma"


@pytest.mark.slow
@pytest.mark.parametrize("spec", ATTN_SPECS + TRIMUL_SPECS, ids=lambda s: s.name)
def test_jax_wrappers_every_kernel_sm90a(spec):
    _sm90(spec)


@pytest.mark.parametrize("family", ["triangle_attention", "trimul"])
def test_jax_wrappers_compile_for_cdna4_without_tf32(family):
    """CDNA4 has no TF32: the jax-triton wrappers take the dot precision the target allows, as the
    torch launchers do (a "tf32" dot does not compile for gfx950)."""
    from ceiling.isa import profile

    module = triangle_attention_specs if family == "triangle_attention" else triangle_multiplication_specs
    specs = module.jax_compile_specs("float16", target="gfx950")
    assert {s.constexprs["PRECISION"] for s in specs} == {"ieee"}
    spec = next(s for s in specs if "_fwd_" in s.name or "_contract_" in s.name)
    assert profile(spec, "gfx950").tensor_core_instructions > 0


# ---------------------------------------------------------------------------- on a GPU



ON_JAX_GPU = pytest.mark.skipif(jax_triton_unavailable() is not None, reason=jax_triton_unavailable() or "")


@pytest.mark.gpu
@ON_JAX_GPU
@pytest.mark.parametrize("N", [129, 256])
def test_jax_triangle_attention_on_gpu_through_jax_triton(N):
    q, k, v, bias, mask = attention_inputs(1, N, 4, 32, torch.bfloat16, seed=N, fully_masked_rows=(3,))
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(N)).bfloat16()
    jm = _j(mask)

    def f(q, k, v, b):
        return ceiling.triangle_attention(q, k, v, b, jm, backend="nvidia")

    out, vjp = jax.jit(lambda *a: jax.vjp(f, *a))(_j(q), _j(k), _j(v), _j(bias))
    grads = vjp(_j(dout))
    exact_out, exact_grads = exact_attention(q, k, v, bias, mask, dout)
    fw_out, fw_grads = framework_attention(q, k, v, bias, mask, dout)
    assert_close("out", _t(out), fw_out, exact_out, atol=1e-2)
    for name, g, e, fw in zip(("dq", "dk", "dv", "dbias"), grads, exact_grads, fw_grads):
        assert_close(name, _t(g), fw, e, atol=2e-2)
    assert not np.asarray(_t(out))[:, 3].any()


@pytest.mark.gpu
@ON_JAX_GPU
@pytest.mark.parametrize("direction", ["outgoing", "incoming"])
def test_jax_trimul_on_gpu_through_jax_triton(direction):
    x, mask, w = trimul_inputs(1, 193, 128, 128, seed=7)
    dout = torch.randn(x.shape, generator=torch.Generator().manual_seed(8))
    names = [n for n in TRIMUL_WEIGHTS if w[n] is not None]
    jw = {n: _j(w[n].bfloat16()) for n in names}

    def loss(backend):
        def f(x, ws):
            out = ceiling.triangle_multiplicative_update(x, direction, _j(mask), **ws, backend=backend)
            return jnp.sum(out.astype(jnp.float32) * _j(dout))
        return f

    (gx, gw) = jax.jit(jax.grad(loss("nvidia"), argnums=(0, 1)))(_j(x.bfloat16()), jw)
    out = jax.jit(lambda x, ws: ceiling.triangle_multiplicative_update(x, direction, _j(mask), **ws,
                                                                       backend="nvidia"))(_j(x.bfloat16()), jw)
    wb = {n: None if t is None else t.bfloat16() for n, t in w.items()}
    exact_out, exact_grads = trimul_exact(x.bfloat16(), direction, mask, wb, dout, F64)
    fw_out, fw_grads = trimul_exact(x.bfloat16(), direction, mask, wb, dout, torch.bfloat16)
    assert_close("out", _t(out), fw_out, exact_out, atol=2e-2)
    for name, g in {"x": gx, **gw}.items():
        assert_close(f"d{name}", _t(g), fw_grads[name], exact_grads[name], atol=3e-2)
