"""The NKI GEMM's own pieces on the emulator: shapes that cut its TensorE tiles and blocks unevenly,
blocks over several M, N and K blocks with SBUF-resident groups, the config resolution (the target,
blocks shrunk to SBUF) and the cost-model estimate at 4096^3 from the kernel's real instruction
stream. The cases every implementation runs are ``tests/test_gemm.py``'s ``TestTrainium``."""

from __future__ import annotations

import pytest
import torch

from ceiling.gemm import gemm
from ceiling.trainium import gemm as trn_gemm
from ceiling.trainium.inspection import inspect_trainium
from tests.test_gemm import expect

# TensorE fraction of peak the 4096^3 bf16 estimate must reach on trn2. 0.80 is the project's
# target, and under the 85% HFU AWS published for this algorithm on trn1 (the tutorial's
# 4096x8192x8192 bf16 run). The cost model gives about 0.99 for the shipped config: the
# kernel keeps TensorE busy (512-column moving tiles are at the initiation-interval peak)
# while Vector, Scalar and DMA stay under it; a config that loses the block reuse falls far
# below (see test_a_poor_config_falls_below_the_threshold), so the bound can fail.
PEAK_FRACTION_THRESHOLD = 0.80

SHAPES = [(1, 1, 1), (130, 700, 300), (257, 513, 129), (64, 1030, 1000)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_gemm_odd_shapes(m, n, k, dtype, activation):
    """Partial tiles on every axis: 128-row stationary, 512-column moving and 128-deep K tiles."""
    a = torch.randn(m, k, dtype=dtype)
    b = torch.randn(k, n, dtype=dtype)
    bias = torch.randn(n, dtype=dtype) if activation != "relu" else None  # relu runs without bias
    out = gemm(a, b, bias=bias, activation=activation, backend="trainium", config={"target": "trn2"})
    expect(out, a, b, bias, activation)


def test_gemm_multi_block_edges_and_resident_groups():
    """Several M, N and K blocks with ragged edges, and M blocks split in SBUF-resident groups."""
    a, b = torch.randn(700, 600, dtype=torch.bfloat16), torch.randn(600, 1100, dtype=torch.bfloat16)
    bias = torch.randn(1100, dtype=torch.float32)
    cfg = {"target": "trn1", "TILES_IN_BLOCK_M": 2, "TILES_IN_BLOCK_N": 1, "TILES_IN_BLOCK_K": 2, "resident_m_blocks": 2}
    out = gemm(a, b, bias=bias, activation="gelu", out_dtype=torch.float32, backend="trainium", config=cfg)
    expect(out, a, b, bias, "gelu", torch.float32)


def test_gemm_large_default_config():
    a, b = torch.randn(1024, 2048, dtype=torch.bfloat16), torch.randn(2048, 1024, dtype=torch.bfloat16)
    out = gemm(a, b, backend="trainium", config={"target": "trn2"})
    expect(out, a, b)


def test_a_named_config_is_the_shipped_one():
    """config={"name": ...} names a shipped block shape of its target; tile keys over it refine it."""
    from ceiling.gemm.op import GEMM
    from ceiling.gemm.spec import shipped_problem
    from ceiling.op import resolve_config

    problem, impl = shipped_problem(4096, 4096, 4096), GEMM.implementation("trainium")
    named = resolve_config(problem, impl, {"target": "trn2", "name": "m8n4k8"})
    assert (named["name"], named["TILES_IN_BLOCK_M"], named["TILES_IN_BLOCK_N"]) == ("m8n4k8", 8, 4)
    refined = resolve_config(problem, impl, {"target": "trn2", "name": "m8n4k8", "TILES_IN_BLOCK_K": 4})
    assert (refined["TILES_IN_BLOCK_M"], refined["TILES_IN_BLOCK_K"]) == (8, 4) and refined.target == "trn2"
    assert resolve_config(problem, impl, {"target": "trn1"})["name"] == "m16n2k8"


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
    from ceiling.errors import InputError

    with pytest.raises(InputError, match=what) as info:
        gemm(torch.randn(8, 8), torch.randn(8, 8), backend="trainium", config=config)
    assert info.value.argument == "config"
