"""The TPU GEMM's own pieces: the grid accumulating over K on simulated cores, its export for TPU
(Mosaic lowering of every shipped config), its config rules and VMEM estimate, the generations'
facts, and the blocks the op resolves per generation. The cases every implementation runs are
``tests/test_gemm.py``'s ``TestTpu``; all run in Pallas interpret mode without a TPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.experimental.pallas import tpu as pltpu

import ceiling
from ceiling.errors import InputError
from ceiling.gemm.op import GEMM
from ceiling.gemm.spec import shipped_problem
from ceiling.op import resolve_config
from ceiling.testing.numerics import stable_seed
from ceiling.tpu import gemm as tpu_gemm
from ceiling.tpu import gemm_export
from ceiling.tpu.gemm_rules import ConfigError, check_config, vmem_estimate
from ceiling.tpu.generations import GENERATIONS, MiB, TARGETS, target_of_device_kind
from tests.test_gemm import expect

SMALL = {"bm": 16, "bn": 128, "bk": 128}  # the smallest block valid for every dtype


def _rng(request) -> np.random.Generator:
    # Fresh inputs per test, reproducible from the test's name.
    return np.random.default_rng(stable_seed(request.node.name))


def _interpret_params(**wanted):
    """TPU interpret mode with those of ``wanted``'s options this JAX knows."""
    import inspect

    known = inspect.signature(pltpu.InterpretParams).parameters
    return pltpu.InterpretParams(**{k: v for k, v in wanted.items() if k in known})


def _randn(rng, shape, dtype):
    return jnp.asarray(rng.standard_normal(shape), dtype)


@pytest.mark.parametrize("dtype,out_dtype", [("bfloat16", "float32"), ("float32", "bfloat16"), ("float16", "float32")])
def test_multi_block_grid_accumulates_over_k(request, monkeypatch, dtype, out_dtype):
    # grid (5, 3, 3): several k steps per output block, padding on every axis,
    # parallel axes visited in a random order on two simulated cores.
    rng = _rng(request)
    a, b, bias = _randn(rng, (70, 260), dtype), _randn(rng, (260, 300), dtype), _randn(rng, (300,), "float32")
    interpret = _interpret_params(random_seed=int(rng.integers(1 << 30)), num_cores_or_threads=2)
    monkeypatch.setattr(tpu_gemm, "default_interpret", lambda: interpret)
    out = ceiling.gemm(a, b, bias=bias, activation="silu", out_dtype=out_dtype, backend="tpu", config=SMALL)
    assert out.dtype == jnp.dtype(out_dtype)
    expect(out, a, b, bias, "silu", getattr(torch, out_dtype))


# --------------------------------------------------------------------------- TPU export (Mosaic lowering)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_every_shipped_config_exports_for_tpu(target, dtype):
    rows = gemm_export.inspect_tpu(target, dtype)
    shipped = {tuple(e["config"].values()) for e in gemm_export.shipped(target, dtype)}
    assert len(shipped) >= 2
    assert {tuple(r["config"].values()) for r in rows} == shipped
    for row in rows:
        assert row["exported"], (row["config"], row["export_error"])
        assert row["serialized_bytes"] > 0
        assert row["vmem_bytes"]["total"] <= GENERATIONS[target].usable_vmem_bytes
        assert row["dimension_semantics"] == ("parallel", "parallel", "arbitrary")
        assert row["grid"] == (2, 2, 2)


@pytest.mark.parametrize(
    "activation,has_bias,batch,out_dtype",
    [(None, False, None, "bfloat16"), ("relu", True, 3, "float32"), ("silu", True, None, "bfloat16")],
)
def test_epilogues_and_batched_grid_export(activation, has_bias, batch, out_dtype):
    row = gemm_export.export_for_tpu(
        "tpu-v6e", "bfloat16", SMALL, m=32, n=256, k=384, batch=batch,
        activation=activation, has_bias=has_bias, out_dtype=out_dtype,
    )
    assert row["exported"], row["export_error"]
    assert row["dimension_semantics"][-1] == "arbitrary" and len(row["grid"]) == (4 if batch else 3)


def test_export_runs_the_mosaic_block_rules():
    # The exporter is not vacuous: a block Mosaic refuses fails to lower.
    def bad(a, b):
        return tpu_gemm.pallas_gemm(
            a, b, None, bm=16, bn=100, bk=128, activation=None, out_dtype=jnp.float32, vmem_limit=16 * MiB
        )

    ok, error, _ = gemm_export._export(
        bad, jax.ShapeDtypeStruct((32, 256), jnp.float32), jax.ShapeDtypeStruct((256, 200), jnp.float32)
    )
    assert not ok and "divisible by 8 and 128" in error


# --------------------------------------------------------------------------- config rules


@pytest.mark.parametrize(
    "config,dtype,target,rule,numbers",
    [
        ({"bm": 16, "bn": 100, "bk": 128}, "float32", "tpu-v5e", "lane_tiling", "bn=100"),
        ({"bm": 16, "bn": 128, "bk": 200}, "float32", "tpu-v5e", "lane_tiling", "bk=200"),
        ({"bm": 8, "bn": 128, "bk": 128}, "bfloat16", "tpu-v5e", "sublane_tiling", "bm=8 is not a multiple of 16"),
        ({"bm": 12, "bn": 128, "bk": 128}, "float32", "tpu-v6e", "sublane_tiling", "bm=12 is not a multiple of 8"),
        ({"bm": 16, "bn": 128}, "float32", "tpu-v5e", "keys", "keys ['bm', 'bn']"),
        ({"bm": 0, "bn": 128, "bk": 128}, "float32", "tpu-v5e", "keys", "bm=0"),
        ({"bm": 2048, "bn": 2048, "bk": 2048}, "float32", "tpu-v5p", "vmem_budget", "> 48 MiB usable of 64 MiB"),
    ],
)
def test_config_breaking_a_rule_is_rejected(config, dtype, target, rule, numbers):
    with pytest.raises(ConfigError) as info:
        check_config(config, dtype, dtype, target)
    assert info.value.rule == rule and f"[rule {rule}]" in str(info.value)
    assert numbers in str(info.value) and repr(config) in str(info.value)
    assert isinstance(info.value, InputError) and info.value.argument == "config"


def test_bad_config_is_rejected_before_any_launch(request, monkeypatch):
    rng = _rng(request)
    a, b = _randn(rng, (8, 8), "bfloat16"), _randn(rng, (8, 8), "bfloat16")
    monkeypatch.setattr(tpu_gemm, "pallas_gemm", lambda *a, **k: pytest.fail("kernel launched on a bad config"))
    with pytest.raises(ConfigError, match="sublane_tiling"):
        ceiling.gemm(a, b, backend="tpu", config={"bm": 8, "bn": 128, "bk": 128})
    # The same budget that fits v5e's 128 MiB breaks v5p's 64 MiB.
    big = {"bm": 1024, "bn": 2048, "bk": 1024}  # 56 MiB of float32 blocks
    check_config(big, "float32", "float32", "tpu-v5e")
    monkeypatch.setattr(tpu_gemm, "attached_tpu", lambda: "tpu-v5p")
    with pytest.raises(ConfigError, match="vmem_budget"):
        ceiling.gemm(a.astype(jnp.float32), b.astype(jnp.float32), backend="tpu", config=big)


def test_vmem_estimate_counts_double_buffers_and_accumulator():
    est = vmem_estimate(512, 1024, 1024, "bfloat16", "bfloat16", has_bias=True).buffers
    assert est["a_blocks"] == 2 * 512 * 1024 * 2
    assert est["b_blocks"] == 2 * 1024 * 1024 * 2
    assert est["out_blocks"] == 2 * 512 * 1024 * 2
    assert est["accumulator"] == est["product"] == 512 * 1024 * 4
    assert est["bias_blocks"] == 2 * 8 * 1024 * 4
    est = vmem_estimate(512, 1024, 1024, "bfloat16", "bfloat16", has_bias=True)
    assert est.total == 12 * MiB + 64 * 1024


@pytest.mark.parametrize("target", TARGETS)
def test_generation_facts_match_jax(target):
    gen = GENERATIONS[target]
    info = pltpu.get_tpu_info_for_chip(pltpu.ChipVersion(gen.chip), 1)
    assert info.vmem_capacity_bytes == gen.vmem_bytes
    assert info.mxu_column_size == gen.mxu_size
    assert gen.scoped_vmem_default_bytes < gen.usable_vmem_bytes < gen.vmem_bytes


def test_device_kinds_map_to_targets():
    assert target_of_device_kind("TPU v5 lite") == "tpu-v5e"
    assert target_of_device_kind("TPU v5p") == "tpu-v5p"
    assert target_of_device_kind("TPU v6 lite") == "tpu-v6e"
    assert target_of_device_kind("NVIDIA H200") is None


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16"])
@pytest.mark.parametrize("shape", [(37, 53, 29), (1000, 3000, 700), (8192, 8192, 8192), (4096, 256, 1024), (1, 1, 1)])
def test_selected_configs_follow_the_rules(target, dtype, shape, monkeypatch):
    m, n, k = shape
    monkeypatch.setattr(tpu_gemm, "attached_tpu", lambda: target)
    config = resolve_config(shipped_problem(m, n, k, dtype, framework="jax"), GEMM.implementation("tpu"), None)
    assert config.target == target
    kdtype, kout = tpu_gemm.kernel_dtypes(dtype, dtype)
    check_config(dict(config), kdtype, kout, target)
    # Fitted: the padding on each axis is less than one alignment step per block.
    for dim, block, align in ((m, config["bm"], 16), (n, config["bn"], 128), (k, config["bk"], 128)):
        steps = -(-dim // block)
        assert steps * block - dim < steps * align, (dim, block)
    if GENERATIONS[target].tensorcores > 1 and n > 128:
        assert -(-m // config["bm"]) * -(-n // config["bn"]) >= 2, "megacore needs two parallel blocks"
