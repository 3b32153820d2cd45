"""Triangle attention and the triangle multiplicative update on the TPU backend: Pallas in
TPU interpret mode on the CPU, and the Mosaic export for real TPU generations at AlphaFold 3's
shape.

Same rules as tests/test_triangle.py: float64 oracle, error-ratio rule, random
output gradient, every gradient (the shared bias's included), a fully masked row.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ceiling
from ceiling.testing.numerics import assert_close
from ceiling.triangle.spec import TRIMUL_WEIGHTS
from tests.test_triangle import (TriangleAttentionTest, TrimulTest, attention_inputs, exact_attention,  # noqa: F401
                                 framework_attention, poisoned, pytest_generate_tests, trimul_exact, trimul_inputs,
                                 trimul_run)

pytest.importorskip("jax")


class TestTpuAttention(TriangleAttentionTest):
    backend = "tpu"
    fp32_cases = [(2, 7, 2, 32)]  # head dims from 32: the Pallas flash attention's range
    test_bf16 = None  # in bf16 through JAX below, the TPU's own arrays
    test_jax_custom_vjp = None

    def test_lse_of_a_fully_masked_row_is_minus_infinity(self):
        q, k, v, bias, mask = attention_inputs(2, 7, 2, 32, seed=60)
        _, lse = ceiling.triangle_attention(q, k, v, bias, mask, backend="tpu", return_lse=True)
        assert torch.isneginf(lse[:, 1]).all()

    def test_jax_bf16(self):
        import jax
        import jax.numpy as jnp

        B, N, H, D = 1, 9, 2, 32
        q, k, v, bias, mask = attention_inputs(B, N, H, D, torch.bfloat16, seed=61)
        dout = torch.randn(B, N, H, N, D).to(torch.bfloat16)

        def j(t):
            return jnp.asarray(t.float().numpy()).astype(jnp.bfloat16) if t.dtype == torch.bfloat16 else jnp.asarray(t.numpy())

        jq, jk, jv, jb, jm, jd = (j(t) for t in (q, k, v, bias, mask, dout))

        def loss(q, k, v, b):
            out = ceiling.triangle_attention(q, k, v, b, jm, backend="tpu")
            return (out.astype(jnp.float32) * jd.astype(jnp.float32)).sum()

        out = ceiling.triangle_attention(jq, jk, jv, jb, jm, backend="tpu")
        grads = jax.grad(loss, argnums=(0, 1, 2, 3))(jq, jk, jv, jb)
        exact_out, exact_grads = exact_attention(q, k, v, bias, mask, dout)
        fw_out, fw_grads = framework_attention(q, k, v, bias, mask, dout)

        def t(x):
            return torch.from_numpy(np.array(x.astype(jnp.float32)))

        assert_close("out", t(out), fw_out, exact_out, atol=1e-2)
        for name, g, e, f in zip(("dq", "dk", "dv", "dbias"), grads, exact_grads, fw_grads):
            assert_close(name, t(g), f, e, atol=2e-2)


@pytest.mark.parametrize("target", ["tpu-v5e", "tpu-v6e"])
def test_tpu_triangle_attention_exports_for_alphafold3_shape(target):
    from ceiling.tpu.triangle_attention import export_triangle_attention

    r = export_triangle_attention(target, "bfloat16", n=384, heads=4, head_dim=32)
    assert r["exported"], r["export_error"]
    assert r["fits_scoped_default"]
    assert r["problem"]["bias"] == (1, 4, 384, 384) and r["problem"]["mask"] == (384, 1, 1, 384)



class TestTpuTrimul(TrimulTest):
    backend = "tpu"
    # ~13 s each interpreted: CI runs the outgoing one here, the incoming one through the grid test below.
    fp32_cases = [(1, 13, 16, 8, "outgoing"), pytest.param((2, 9, 16, 8, "incoming"), marks=pytest.mark.slow)]
    test_bf16 = None  # in bf16 through JAX below, the TPU's own arrays
    test_jax_custom_vjp = None

    def test_jax_bf16(self):
        """bfloat16 through the JAX front end's custom VJP: error at most twice the float32-free
        reference's (every op in bfloat16), every gradient."""
        import jax
        import jax.numpy as jnp

        x, mask, w = trimul_inputs(1, 11, 16, 16, seed=72, bias=False)
        x = x.bfloat16()
        w = {n: None if t is None else t.bfloat16() for n, t in w.items()}
        dout = torch.randn(x.shape).bfloat16()
        names = [n for n in TRIMUL_WEIGHTS if w[n] is not None]

        def j(t):
            return jnp.asarray(t.float().numpy()).astype(jnp.bfloat16)

        jw = {n: j(w[n]) for n in names}
        jx, jd, jm = j(x), j(dout), jnp.asarray(mask.numpy())

        def loss(x, ws):
            out = ceiling.triangle_multiplicative_update(x, "incoming", jm, **ws, backend="tpu")
            return (out.astype(jnp.float32) * jd.astype(jnp.float32)).sum()

        out = ceiling.triangle_multiplicative_update(jx, "incoming", jm, **jw, backend="tpu")
        gx, gw = jax.grad(loss, argnums=(0, 1))(jx, jw)
        assert out.dtype == jnp.bfloat16
        exact_out, exact_grads = trimul_exact(x, "incoming", mask, w, dout, torch.float64)
        fw_out, fw_grads = trimul_run(x.float(), "incoming", mask,
                                      {n: None if t is None else t.float() for n, t in w.items()}, "reference", dout,
                                      dtype=torch.bfloat16)

        def t(a):
            return torch.from_numpy(np.array(a.astype(jnp.float32)))

        assert_close("out", t(out), fw_out, exact_out, atol=1e-2)
        assert_close("dx", t(gx), fw_grads["x"], exact_grads["x"], atol=2e-2)
        for n in names:
            assert_close(f"d{n}", t(gw[n]), fw_grads[n], exact_grads[n], atol=2e-2)

    @pytest.mark.slow  # the no-mask kernels run in CI in the accumulation test below
    def test_jax_no_mask(self):
        import jax
        import jax.numpy as jnp

        x, _, w = trimul_inputs(1, 6, 16, 8, seed=71)
        jw = {n: jnp.asarray(w[n].numpy()) for n in TRIMUL_WEIGHTS}
        jx = jnp.asarray(x.numpy())

        def loss(x, ws, backend):
            return jnp.square(ceiling.triangle_multiplicative_update(x, "incoming", None, **ws, backend=backend)).sum()

        ours = jax.grad(loss, argnums=(0, 1))(jx, jw, "tpu")
        ref = jax.grad(loss, argnums=(0, 1))(jx, jw, "reference")
        np.testing.assert_allclose(np.asarray(ours[0]), np.asarray(ref[0]), atol=1e-4, rtol=1e-4)
        for n in TRIMUL_WEIGHTS:
            np.testing.assert_allclose(np.asarray(ours[1][n]), np.asarray(ref[1][n]), atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("target,direction,masked", [("tpu-v5e", "outgoing", False), ("tpu-v5p", "incoming", True)])
def test_tpu_trimul_weight_gradients_accumulate_across_the_grid(target, direction, masked):
    """128-row blocks over 13*13 = 169 pair rows: two row blocks, padded. On v5e they are two
    sequential steps into one float32 accumulator (and the kernels' no-mask variant runs); on
    v5p (megacore) two parallel partial sums."""
    import jax.numpy as jnp

    from ceiling.tpu import triangle_multiplication as tpu_trimul

    x, mask, w = trimul_inputs(1, 13, 16, 8, seed=90)
    if not masked:
        mask = torch.ones_like(mask)  # the reference's view of no mask
    dout = torch.randn_like(x)
    weights = tuple(jnp.asarray(w[n].numpy()) for n in TRIMUL_WEIGHTS)
    jx, jd = jnp.asarray(x.numpy()), jnp.asarray(dout.numpy())
    jm = jnp.asarray(mask.numpy()) if masked else None
    plan = tpu_trimul.make_plan(x.shape, jx.dtype, 8, masked, 1e-5, {"block_rows": 128, "block_rows_bwd": 128}, target)
    assert plan.rows_pad == 256 and plan.splits == (2 if target == "tpu-v5p" else 1)
    out = tpu_trimul._fwd_jit(jx, jm, weights, plan=plan, direction=direction)
    dx, dw = tpu_trimul._bwd_jit(jx, jm, weights, jd, plan=plan, direction=direction)
    exact_out, exact_grads = trimul_exact(x, direction, mask, w, dout, torch.float64)
    fw_out, fw_grads = trimul_exact(x, direction, mask, w, dout, torch.float32)

    def t(a):
        return torch.from_numpy(np.array(a))

    assert_close("out", t(out), fw_out, exact_out, atol=1e-6)
    assert_close("dx", t(dx), fw_grads["x"], exact_grads["x"], atol=1e-5)
    for name, g in zip(TRIMUL_WEIGHTS, dw):
        assert_close(f"d{name}", t(g), fw_grads[name], exact_grads[name], atol=1e-5)


def test_tpu_trimul_interpret_mode_poisons_unwritten_memory():
    """On the CPU the kernels run in TPU interpret mode with uninitialized buffers filled with NaN,
    so an output element a kernel never writes fails the finiteness checks above."""
    from ceiling.tpu.triangle_multiplication import default_interpret

    params = default_interpret()
    assert getattr(params, "uninitialized_memory", None) == "nan"


def test_tpu_trimul_config_rules():
    from ceiling import tables
    from ceiling.tpu.generations import TARGETS, generation
    from ceiling.tpu.triangle_multiplication import select_config
    from ceiling.tpu.trimul_rules import TrimulConfigError, check_config

    for rule, config in (("keys", {"block_rows": 128, "rows": 2}), ("keys", {"block_rows": 0}),
                         ("lane_tiling", {"block_rows": 96}), ("nesting", {"block_rows": 384, "block_rows_bwd": 256}),
                         ("vmem_budget", {"block_rows": 65536})):
        with pytest.raises(TrimulConfigError) as err:
            check_config(config, "float32", 128, 128, "tpu-v5e")
        assert err.value.rule == rule
    for target in TARGETS:
        gen = generation(target)
        for dtype in ("bfloat16", "float32"):
            config = tables.lookup("tpu", "triangle_multiplication", None, target, {"kernel_dtype": dtype}).config
            assert set(config) == {"block_rows", "block_rows_bwd"}, (target, dtype)
            estimates = check_config(config, dtype, 128, 128, target)
            assert max(e.total for e in estimates.values()) <= gen.scoped_vmem_default_bytes, (target, dtype)
            # AlphaFold 3's crops need no padding copy: the block divides N*N.
            for n in (384, 768):
                chosen = select_config(target, dtype, n, 128, 128)
                assert (n * n) % chosen["block_rows"] == 0 and (n * n) % chosen["block_rows_bwd"] == 0


@pytest.mark.parametrize("target,dtype,direction", [("tpu-v5e", "bfloat16", "outgoing"), ("tpu-v5p", "bfloat16", "incoming"),
                                                    ("tpu-v6e", "bfloat16", "outgoing"), ("tpu-v5e", "float32", "incoming")])
def test_tpu_trimul_exports_for_alphafold3_shape(target, dtype, direction):
    """Forward and backward lower through Mosaic for the generation at N = 384, c_z = c = 128."""
    from ceiling.tpu.triangle_multiplication import export_trimul

    r = export_trimul(target, dtype, n=384, direction=direction)
    assert r["exported"], r["export_error"]
    assert r["fits_scoped_default"]
    bm, bmb = r["config"]["block_rows"], r["config"]["block_rows_bwd"]
    assert {f"ceiling_trimul_fwd_in_{bm}", f"ceiling_trimul_fwd_out_{bm}"} <= set(r["mosaic_kernels"]["fwd"])
    assert {f"ceiling_trimul_fwd_in_{bm}", f"ceiling_trimul_bwd_out_{bmb}", f"ceiling_trimul_bwd_in_{bmb}"} <= set(
        r["mosaic_kernels"]["fwd_bwd"])
    assert any(k.startswith("ceiling_gemm_") for k in r["mosaic_kernels"]["fwd"])
