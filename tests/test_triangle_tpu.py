"""Triangle attention on the TPU backend: Pallas in TPU interpret mode on the CPU, and the
Mosaic export for real TPU generations at AlphaFold 3's shape.

Same rules as tests/test_triangle.py: float64 oracle, error-ratio rule, random
output gradient, every gradient (the shared bias's included), a fully masked row.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kernels
from tests.test_triangle import (assert_close_ratio, attention_grads, attention_inputs, exact_attention,
                                 framework_attention)

pytest.importorskip("jax")


def test_tpu_triangle_attention_torch_fp32():
    B, N, H, D = 2, 7, 2, 32
    q, k, v, bias, mask = attention_inputs(B, N, H, D, seed=60)
    dout = torch.randn(B, N, H, N, D)
    out, grads = attention_grads(q, k, v, bias, mask, dout, "tpu")
    exact_out, exact_grads = exact_attention(q, k, v, bias, mask, dout)
    fw_out, fw_grads = framework_attention(q, k, v, bias, mask, dout)
    assert_close_ratio("out", out, exact_out, fw_out, 1e-6)
    for name, g, e, f in zip(("dq", "dk", "dv", "dbias"), grads, exact_grads, fw_grads):
        assert g.shape == e.shape
        assert_close_ratio(name, g, e, f, 1e-6)
    assert (out[:, 1] == 0).all()
    _, lse = kernels.triangle_attention(q, k, v, bias, mask, backend="tpu", return_lse=True)
    assert torch.isposinf(lse[:, 1]).all()


def test_tpu_triangle_attention_jax_bf16():
    import jax
    import jax.numpy as jnp

    B, N, H, D = 1, 9, 2, 32
    q, k, v, bias, mask = attention_inputs(B, N, H, D, torch.bfloat16, seed=61)
    dout = torch.randn(B, N, H, N, D).to(torch.bfloat16)

    def j(t):
        return jnp.asarray(t.float().numpy()).astype(jnp.bfloat16) if t.dtype == torch.bfloat16 else jnp.asarray(t.numpy())

    jq, jk, jv, jb, jm, jd = (j(t) for t in (q, k, v, bias, mask, dout))

    def loss(q, k, v, b):
        out = kernels.triangle_attention(q, k, v, b, jm, backend="tpu")
        return (out.astype(jnp.float32) * jd.astype(jnp.float32)).sum()

    out = kernels.triangle_attention(jq, jk, jv, jb, jm, backend="tpu")
    grads = jax.grad(loss, argnums=(0, 1, 2, 3))(jq, jk, jv, jb)
    exact_out, exact_grads = exact_attention(q, k, v, bias, mask, dout)
    fw_out, fw_grads = framework_attention(q, k, v, bias, mask, dout)

    def t(x):
        return torch.from_numpy(np.array(x.astype(jnp.float32)))

    assert_close_ratio("out", t(out), exact_out, fw_out, 1e-2)
    for name, g, e, f in zip(("dq", "dk", "dv", "dbias"), grads, exact_grads, fw_grads):
        assert_close_ratio(name, t(g), e, f, 2e-2)


@pytest.mark.parametrize("target", ["tpu-v5e", "tpu-v6e"])
def test_tpu_triangle_attention_exports_for_alphafold3_shape(target):
    from kernels.tpu.triangle_attention import export_triangle_attention

    r = export_triangle_attention(target, "bfloat16", n=384, heads=4, head_dim=32)
    assert r["exported"], r["export_error"]
    assert r["fits_scoped_default"]
    assert r["problem"]["bias"] == (1, 4, 384, 384) and r["problem"]["mask"] == (384, 1, 1, 384)



@pytest.mark.parametrize("direction", ["outgoing", "incoming"])
def test_tpu_trimul_torch_fp32(direction):
    from tests.test_triangle import trimul_exact, trimul_inputs, trimul_run

    x, mask, w = trimul_inputs(1, 7, 16, 8, seed=70)
    dout = torch.randn_like(x)
    out, grads = trimul_run(x, direction, mask, w, "tpu", dout)
    exact_out, exact_grads = trimul_exact(x, direction, mask, w, dout, torch.float64)
    fw_out, fw_grads = trimul_exact(x, direction, mask, w, dout, torch.float32)
    assert_close_ratio("out", out, exact_out, fw_out, 1e-6)
    assert len(grads) == 13
    for name in grads:
        assert_close_ratio(f"d{name}", grads[name], exact_grads[name], fw_grads[name], 1e-5)


def test_tpu_trimul_jax_no_mask():
    import jax
    import jax.numpy as jnp

    from kernels.triangle.reference import TRIMUL_WEIGHTS
    from tests.test_triangle import trimul_inputs

    x, _, w = trimul_inputs(1, 6, 16, 8, seed=71)
    jw = {n: jnp.asarray(w[n].numpy()) for n in TRIMUL_WEIGHTS}
    jx = jnp.asarray(x.numpy())

    def loss(x, ws, backend):
        return jnp.square(kernels.triangle_multiplicative_update(x, "incoming", None, **ws, backend=backend)).sum()

    ours = jax.grad(loss, argnums=(0, 1))(jx, jw, "tpu")
    ref = jax.grad(loss, argnums=(0, 1))(jx, jw, "reference")
    np.testing.assert_allclose(np.asarray(ours[0]), np.asarray(ref[0]), atol=1e-4, rtol=1e-4)
    for n in TRIMUL_WEIGHTS:
        np.testing.assert_allclose(np.asarray(ours[1][n]), np.asarray(ref[1][n]), atol=2e-4, rtol=1e-4)
