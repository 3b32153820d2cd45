"""The TPU Pallas GEMM on the CPU: TPU interpret mode for the numbers,
``jax.export(..., platforms=["tpu"])`` for the Mosaic lowering of every shipped
config, and the config rules.

TPU interpret mode allocates outputs and scratch as NaN, so an output element
the kernel never writes, or an accumulator it never zeroes, shows up as NaN and
fails the finiteness check that every comparison makes.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

import kernels
from kernels.errors import InputError
from kernels.gemm import reference
from kernels.tpu import gemm as tpu_gemm
from kernels.tpu.gemm_rules import ConfigError, check_config, vmem_estimate
from kernels.tpu.generations import GENERATIONS, MiB, TARGETS, target_of_device_kind
from tests.numerics import stable_seed

SMALL = {"bm": 16, "bn": 128, "bk": 128}  # the smallest block valid for every dtype
ACTIVATIONS = (None, "relu", "gelu", "silu")
EPS = {"bfloat16": 2.0**-8, "float16": 2.0**-11, "float32": 2.0**-24}


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


def _activate64(z, activation):
    if activation == "relu":
        return np.maximum(z, 0.0)
    if activation == "gelu":
        return 0.5 * z * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))
    if activation == "silu":
        return z / (1.0 + np.exp(-z))
    return z


def _oracle(a, b, bias, activation):
    z = np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64))
    if bias is not None:
        z = z + np.asarray(bias, np.float64)
    return _activate64(z, activation)


def _framework_low_precision(a, b, bias, activation, out_dtype):
    """JAX's own GEMM at the inputs' precision: the product rounded to the input
    dtype, then the epilogue in float32, then the output cast."""
    z = jnp.matmul(a, b).astype(jnp.float32)
    if bias is not None:
        z = z + bias.astype(jnp.float32)
    z = {"relu": jax.nn.relu, "gelu": lambda x: jax.nn.gelu(x, approximate=False), "silu": jax.nn.silu}.get(
        activation, lambda x: x
    )(z)
    return z.astype(out_dtype)


def assert_close(out, a, b, bias, activation, out_dtype):
    """Our error against float64 <= 2x JAX's own low-precision error + one ulp of
    the output at the result's magnitude."""
    got = np.asarray(out, np.float64)
    assert np.isfinite(got).all(), "non-finite output (unwritten element or NaN)"
    want = _oracle(a, b, bias, activation)
    assert got.shape == want.shape
    ours = np.abs(got - want).max()
    theirs = np.abs(np.asarray(_framework_low_precision(a, b, bias, activation, out_dtype), np.float64) - want).max()
    atol = EPS[jnp.dtype(out_dtype).name] * max(1.0, np.abs(want).max())
    assert ours <= 2 * theirs + atol, f"error {ours:.3g} > 2 x {theirs:.3g} + {atol:.3g}"


# --------------------------------------------------------------------------- numerics (interpret mode)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_odd_shape_every_dtype_and_epilogue(request, dtype, activation):
    rng = _rng(request)
    a, b, bias = _randn(rng, (37, 29), dtype), _randn(rng, (29, 53), dtype), _randn(rng, (53,), dtype)
    out = tpu_gemm.gemm_jax(a, b, bias, activation, None, config=SMALL)
    assert out.dtype == jnp.dtype(dtype)
    assert_close(out, a, b, bias, activation, dtype)


@pytest.mark.parametrize("dtype,out_dtype", [("bfloat16", "float32"), ("float32", "bfloat16"), ("float16", "float32")])
def test_multi_block_grid_accumulates_over_k(request, dtype, out_dtype):
    # grid (5, 3, 3): several k steps per output block, padding on every axis,
    # parallel axes visited in a random order on two simulated cores.
    rng = _rng(request)
    a, b, bias = _randn(rng, (70, 260), dtype), _randn(rng, (260, 300), dtype), _randn(rng, (300,), "float32")
    interpret = _interpret_params(random_seed=int(rng.integers(1 << 30)), num_cores_or_threads=2)
    out = tpu_gemm.gemm_jax(a, b, bias, "silu", out_dtype, config=SMALL, interpret=interpret)
    assert out.dtype == jnp.dtype(out_dtype)
    assert_close(out, a, b, bias, "silu", out_dtype)


@pytest.mark.parametrize("shared_b", [False, True])
def test_batched(request, shared_b):
    rng = _rng(request)
    a = _randn(rng, (3, 21, 45), "bfloat16")
    b = _randn(rng, (45, 130), "bfloat16") if shared_b else _randn(rng, (3, 45, 130), "bfloat16")
    bias = _randn(rng, (130,), "bfloat16")
    out = tpu_gemm.gemm_jax(a, b, bias, "gelu", None, config={"bm": 16, "bn": 128, "bk": 128})
    assert out.shape == (3, 21, 130)
    assert_close(out, a, b, bias, "gelu", "bfloat16")


def test_tuned_path_without_config(request):
    # No config: the table or the heuristic picks blocks, fitted to the shape.
    rng = _rng(request)
    a, b = _randn(rng, (40, 200), "float32"), _randn(rng, (200, 72), "float32")
    assert_close(tpu_gemm.gemm_jax(a, b), a, b, None, None, "float32")


def test_public_api_jax_and_transposed_input(request):
    rng = _rng(request)
    a, b = _randn(rng, (33, 19), "bfloat16"), _randn(rng, (47, 33), "bfloat16").T  # b: a transpose, (33, 47)
    a = a.T  # (19, 33)
    bias = _randn(rng, (47,), "float32")
    out = kernels.gemm(a, b, bias=bias, activation="relu", backend="tpu", config=SMALL)
    assert isinstance(out, jax.Array) and out.shape == (19, 47)
    assert_close(out, a, b, bias, "relu", "bfloat16")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_public_api_torch(request, dtype):
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(int(_rng(request).integers(1 << 30)))
    tdtype = getattr(torch, dtype)
    a = torch.randn(23, 41, generator=gen).to(tdtype)
    b = torch.randn(50, 41, generator=gen).to(tdtype).mT  # a transposed view
    bias = torch.randn(50, generator=gen).to(tdtype)
    out = kernels.gemm(a, b, bias=bias, activation="gelu", backend="tpu", config=SMALL)
    assert isinstance(out, torch.Tensor) and out.dtype == tdtype and out.shape == (23, 50)
    as_jax = [jnp.asarray(x.float().numpy()).astype(dtype) for x in (a, b, bias)]
    assert_close(jnp.asarray(out.float().numpy()).astype(dtype), *as_jax, "gelu", dtype)


def test_torch_backward(request):
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(int(_rng(request).integers(1 << 30)))
    a = torch.randn(2, 17, 30, generator=gen, requires_grad=True)
    b = torch.randn(30, 40, generator=gen, requires_grad=True)
    bias = torch.randn(40, generator=gen, requires_grad=True)
    grad = torch.randn(2, 17, 40, generator=gen)
    kernels.gemm(a, b, bias=bias, activation="silu", backend="tpu").backward(grad)
    ours = [a.grad, b.grad, bias.grad]
    a2, b2, bias2 = (x.detach().double().requires_grad_() for x in (a, b, bias))
    reference.gemm(a2, b2, bias2, "silu", torch.float64, compute_dtype=torch.float64).backward(grad.double())
    for got, want in zip(ours, (a2.grad, b2.grad, bias2.grad)):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("activation,shared_b", [("gelu", False), (None, True)])
def test_jax_grad_random_cotangent(request, activation, shared_b):
    rng = _rng(request)
    a = _randn(rng, (2, 19, 27), "float32")
    b = _randn(rng, (27, 35), "float32") if shared_b else _randn(rng, (2, 27, 35), "float32")
    bias = _randn(rng, (35,), "float32")
    cotangent = _randn(rng, (2, 19, 35), "float32")

    def loss(fn):
        return lambda a, b, bias: jnp.sum(fn(a, b, bias) * cotangent)

    ours = jax.grad(
        loss(lambda a, b, bias: kernels.gemm(a, b, bias=bias, activation=activation, backend="tpu")), argnums=(0, 1, 2)
    )(a, b, bias)
    want = jax.grad(loss(lambda a, b, bias: reference.gemm_jax(a, b, bias, activation, jnp.float32)), argnums=(0, 1, 2))(
        a, b, bias
    )
    for name, got, ref in zip(("da", "db", "dbias"), ours, want):
        assert got.shape == ref.shape, name
        assert np.isfinite(np.asarray(got)).all(), name
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-4, atol=1e-4, err_msg=name)


# --------------------------------------------------------------------------- TPU export (Mosaic lowering)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_every_shipped_config_exports_for_tpu(target, dtype):
    rows = tpu_gemm.inspect_tpu(target, dtype)
    table = tpu_gemm.load_configs()[target][dtype]
    shipped = {(e["bm"], e["bn"], e["bk"]) for e in [*table["entries"], table["fallback"]]}
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
    row = tpu_gemm.export_for_tpu(
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

    ok, error, _ = tpu_gemm._export(
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


def test_bad_config_is_rejected_before_any_launch(request):
    rng = _rng(request)
    a, b = _randn(rng, (8, 8), "bfloat16"), _randn(rng, (8, 8), "bfloat16")
    with pytest.raises(ConfigError, match="sublane_tiling"):
        kernels.gemm(a, b, backend="tpu", config={"bm": 8, "bn": 128, "bk": 128})
    # The same budget that fits v5e's 128 MiB breaks v5p's 64 MiB.
    big = {"bm": 1024, "bn": 2048, "bk": 1024}  # 56 MiB of float32 blocks
    check_config(big, "float32", "float32", "tpu-v5e")
    with pytest.raises(ConfigError, match="vmem_budget"):
        tpu_gemm.gemm_jax(a.astype(jnp.float32), b.astype(jnp.float32), config=big, target="tpu-v5p")


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
def test_selected_configs_follow_the_rules(target, dtype, shape):
    m, n, k = shape
    config = tpu_gemm.select_config(target, dtype, dtype, m, n, k)
    kdtype, kout = tpu_gemm.kernel_dtypes(dtype, dtype)
    check_config(config, kdtype, kout, target)
    # Fitted: the padding on each axis is less than one alignment step per block.
    for dim, block, align in ((m, config["bm"], 16), (n, config["bn"], 128), (k, config["bk"], 128)):
        steps = -(-dim // block)
        assert steps * block - dim < steps * align, (dim, block)
    if GENERATIONS[target].tensorcores > 1 and n > 128:
        assert -(-m // config["bm"]) * -(-n // config["bn"]) >= 2, "megacore needs two parallel blocks"


def test_torch_opcheck(request):
    # The custom op's fake, schema and autograd registrations agree with the TPU kernel.
    torch = pytest.importorskip("torch")
    from kernels.gemm.torch_op import encode_config, gemm_op

    gen = torch.Generator().manual_seed(int(_rng(request).integers(1 << 30)))
    a = torch.randn(2, 9, 20, generator=gen, requires_grad=True)
    b = torch.randn(20, 11, generator=gen, requires_grad=True)
    bias = torch.randn(11, generator=gen, requires_grad=True)
    torch.library.opcheck(gemm_op, (a, b, bias, "relu", torch.float32, "tpu", encode_config(SMALL)))
