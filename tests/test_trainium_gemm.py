"""The NKI GEMM on the emulator: correctness through ``kernels.gemm(..., backend="trainium")``
against a float64 reference (error-ratio rule), the epilogues, batching, JAX, autograd, and
the cost-model estimate at 4096^3 from the kernel's real instruction stream."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kernels.gemm import gemm
from kernels.gemm import reference
from kernels.trainium import gemm as trn_gemm
from kernels.trainium.inspection import inspect_trainium
from tests.numerics import assert_close_by_ratio

# TensorE fraction of peak the 4096^3 bf16 estimate must reach on trn2. 0.80 is the project's
# target, and under the 85% HFU AWS published for this algorithm on trn1 (the tutorial's
# 4096x8192x8192 bf16 run). The cost model gives about 0.99 for the shipped config: the
# kernel keeps TensorE busy (512-column moving tiles are at the initiation-interval peak)
# while Vector, Scalar and DMA stay under it; a config that loses the block reuse falls far
# below (see test_a_poor_config_falls_below_the_threshold), so the bound can fail.
PEAK_FRACTION_THRESHOLD = 0.80

ATOL = {torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float32: 1e-5}


def _check(out, a, b, bias, activation, out_dtype):
    """Error-ratio rule: our error vs float64 <= 2x PyTorch's own error at the input precision, + atol."""
    assert out.dtype == out_dtype
    exact = reference.gemm(a, b, bias, activation, torch.float64, compute_dtype=torch.float64)
    z = torch.matmul(a, b)
    if bias is not None:
        z = z + bias.to(z.dtype)
    framework = reference.activate_torch(z, activation).to(out_dtype)
    assert_close_by_ratio(out, framework, exact, atol=ATOL[out_dtype] * max(1.0, exact.abs().max().item()))


SHAPES = [(1, 1, 1), (130, 700, 300), (257, 513, 129), (64, 1030, 1000)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_gemm_odd_shapes(m, n, k, dtype, activation):
    a = torch.randn(m, k, dtype=dtype)
    b = torch.randn(k, n, dtype=dtype)
    bias = torch.randn(n, dtype=dtype) if activation != "relu" else None  # relu runs without bias
    out = gemm(a, b, bias=bias, activation=activation, backend="trainium", config={"target": "trn2"})
    _check(out, a, b, bias, activation, dtype)


def test_gemm_float16_with_float32_output():
    a, b, bias = torch.randn(200, 300, dtype=torch.float16), torch.randn(300, 520, dtype=torch.float16), torch.randn(520)
    out = gemm(a, b, bias=bias, activation="silu", out_dtype=torch.float32, backend="trainium", config={"target": "trn1"})
    _check(out, a, b, bias, "silu", torch.float32)


def test_gemm_multi_block_edges_and_resident_groups():
    """Several M, N and K blocks with ragged edges, and M blocks split in SBUF-resident groups."""
    a, b = torch.randn(700, 600, dtype=torch.bfloat16), torch.randn(600, 1100, dtype=torch.bfloat16)
    bias = torch.randn(1100, dtype=torch.float32)
    cfg = {"target": "trn1", "TILES_IN_BLOCK_M": 2, "TILES_IN_BLOCK_N": 1, "TILES_IN_BLOCK_K": 2, "resident_m_blocks": 2}
    out = gemm(a, b, bias=bias, activation="gelu", out_dtype=torch.float32, backend="trainium", config=cfg)
    _check(out, a, b, bias, "gelu", torch.float32)


def test_gemm_large_default_config():
    a, b = torch.randn(1024, 2048, dtype=torch.bfloat16), torch.randn(2048, 1024, dtype=torch.bfloat16)
    out = gemm(a, b, backend="trainium", config={"target": "trn2"})
    _check(out, a, b, None, None, torch.bfloat16)


def test_gemm_batched_and_transposed_views():
    a = torch.randn(3, 50, 140, dtype=torch.bfloat16)
    b_shared = torch.randn(90, 140, dtype=torch.bfloat16).mT
    b_batched = torch.randn(3, 140, 90, dtype=torch.bfloat16)
    for b in (b_shared, b_batched):
        out = gemm(a, b, activation="silu", backend="trainium")
        _check(out, a, b, None, "silu", torch.bfloat16)


def test_gemm_autograd_through_trainium():
    a = torch.randn(40, 70, dtype=torch.float32, requires_grad=True)
    b = torch.randn(70, 33, dtype=torch.float32, requires_grad=True)
    bias = torch.randn(33, dtype=torch.float32, requires_grad=True)
    grad = torch.randn(40, 33)
    gemm(a, b, bias=bias, activation="gelu", backend="trainium").backward(grad)
    got = [t.grad.clone() for t in (a, b, bias)]
    for t in (a, b, bias):
        t.grad = None
    reference.gemm(a, b, bias, "gelu", torch.float32).backward(grad)
    for g, t in zip(got, (a, b, bias)):
        torch.testing.assert_close(g, t.grad, rtol=1e-4, atol=1e-4)


def test_gemm_jax_eager_and_jit():
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng()
    a = jnp.asarray(rng.standard_normal((70, 130)), dtype=jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((130, 600)), dtype=jnp.bfloat16)
    bias = jnp.asarray(rng.standard_normal(600), dtype=jnp.float32)
    for fn in (gemm, jax.jit(gemm, static_argnames=("activation", "backend"))):
        out = fn(a, b, bias=bias, activation="relu", backend="trainium")
        assert out.dtype == jnp.bfloat16 and out.shape == (70, 600)
        exact = np.maximum(np.asarray(a, np.float64) @ np.asarray(b, np.float64) + np.asarray(bias, np.float64), 0)
        fw = jax.nn.relu(jnp.matmul(a, b, preferred_element_type=jnp.float32) + bias).astype(jnp.bfloat16)
        ours_err = np.abs(np.asarray(out, np.float64) - exact).max()
        fw_err = np.abs(np.asarray(fw, np.float64) - exact).max()
        assert np.isfinite(np.asarray(out, np.float32)).all() and ours_err <= 2 * fw_err + 2e-2


# ----------------------------------------------------------------------------- cost model


def test_estimate_4096_cubed_reaches_peak_fraction():
    report, cfg, ctx = trn_gemm.estimate(4096, 4096, 4096, dtype="bfloat16", target="trn2")
    # The estimate comes from the kernel's own instruction stream: one matmul per
    # (128-row, 512-column, 128-deep) tile.
    assert report.instructions["tensor"] == (4096 // 128) * (4096 // 512) * (4096 // 128)
    assert report.instructions["scalar"] == (4096 // 128) * (4096 // 512)  # one epilogue activation per output tile
    assert ctx.sbuf_peak <= ctx.target.sbuf_bytes_per_partition and ctx.psum_peak <= 8
    assert report.bottleneck == "tensor"
    assert report.fraction_of_peak >= PEAK_FRACTION_THRESHOLD, report


def test_a_poor_config_falls_below_the_threshold():
    """K blocks of a single 128-deep tile: every matmul's PSUM bank is folded into SBUF by a
    VectorE add, which then outweighs TensorE."""
    report, _, _ = trn_gemm.estimate(4096, 4096, 4096, target="trn2", config={"TILES_IN_BLOCK_K": 1})
    assert report.bottleneck == "vector"
    assert report.fraction_of_peak < PEAK_FRACTION_THRESHOLD


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_inspect_trainium(target):
    rows = inspect_trainium(target)
    assert [r["config"] for r in rows] == [c["name"] for c in trn_gemm.configs(target)]
    for r in rows:
        assert r["rules"] == "ok", r
        assert r["instructions"]["tensor"] == 8192 and r["instructions"]["dma"] > 0
        assert 0 < r["fraction_of_peak"] <= 1.0
        assert r["sbuf_peak_bytes_per_partition"] <= r["sbuf_bytes_per_partition"]
    one = inspect_trainium(target, config={"name": rows[-1]["config"]}, shape=(512, 1024, 256))
    assert [r["config"] for r in one] == [rows[-1]["config"]] and one[0]["rules"] == "ok"


def test_default_target_is_never_the_newer_chip(monkeypatch):
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    assert trn_gemm.default_target(None) == "trn1"
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    assert trn_gemm.default_target(None) == "trn2"
    assert trn_gemm.default_target({"target": "trn1"}) == "trn1"


def test_config_resolution_shrinks_blocks_to_fit_sbuf():
    """fp32 inputs with a bias overflow trn1's SBUF with the m8n4k8 block; the resolver halves
    TILES_IN_BLOCK_K and the dry run's capacity checks pass."""
    cfg = next(c for c in trn_gemm.configs("trn1") if c["name"] == "m8n4k8")
    report, resolved, ctx = trn_gemm.estimate(1024, 2048, 1024, dtype="float32", target="trn1", config=cfg, bias=True, out_dtype="float32")
    assert resolved["TILES_IN_BLOCK_K"] < cfg["TILES_IN_BLOCK_K"]
    assert ctx.sbuf_peak <= ctx.target.sbuf_bytes_per_partition


@pytest.mark.parametrize(
    "config,what",
    [({"target": "trn3"}, "target"), ({"TILES_IN_BLOCK_M": 0}, "TILES_IN_BLOCK_M"), ({"BLOCK": 4}, "unknown keys")],
)
def test_bad_config_is_an_input_error(config, what):
    from kernels.errors import InputError

    with pytest.raises(InputError, match=what) as info:
        gemm(torch.randn(8, 8), torch.randn(8, 8), backend="trainium", config=config)
    assert info.value.argument == "config"
