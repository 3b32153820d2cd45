"""The Hopper GEMM: interpreted on the CPU against float64, and compiled for sm_90a."""

from __future__ import annotations

import pytest
import torch

import kernels
from kernels.gemm.reference import gemm as reference_gemm
from tests.numerics import assert_close_by_ratio

# Small tiles keep the interpreter fast; three persistent programs walk several tiles each.
SMALL = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, GROUP_M=2, num_stages=2, num_warps=4,
             EPILOGUE_SUBTILE=False, WARP_SPECIALIZE=False)
DTYPES = [torch.float16, torch.bfloat16, torch.float32]
# The interpreter's fp32 dot is full fp32, but on the GPU fp32 runs as TF32: the
# framework baseline for fp32 is therefore TF32-rounded inputs.
TF32 = lambda x: x.float().view(torch.int32).bitwise_and(-8192).view(torch.float32)  # noqa: E731


def operand(shape, dtype, transposed, gen):
    if transposed:
        return torch.randn(*shape[:-2], shape[-1], shape[-2], dtype=dtype, generator=gen).mT
    return torch.randn(*shape, dtype=dtype, generator=gen)


def check(a, b, bias=None, activation=None, out_dtype=None, config=SMALL):
    out = kernels.gemm(a, b, bias=bias, activation=activation, out_dtype=out_dtype, backend="nvidia", config=config)
    ref = reference_gemm(a, b, bias, activation, torch.float64, compute_dtype=torch.float64)
    lo_a, lo_b = (TF32(a), TF32(b)) if a.dtype == torch.float32 else (a, b)
    framework = reference_gemm(lo_a, lo_b, bias, activation, out_dtype or a.dtype, compute_dtype=a.dtype)
    assert out.dtype == (out_dtype or a.dtype)
    assert_close_by_ratio(out, framework, ref, atol=1e-2 if a.dtype != torch.float32 else 1e-4)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_odd_sizes_and_layouts(dtype, ta, tb):
    gen = torch.Generator().manual_seed(hash((str(dtype), ta, tb)) % 2**31)
    m, n, k = 37, 53, 29  # multiples of no block size
    check(operand((m, k), dtype, ta, gen), operand((k, n), dtype, tb, gen))


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
def test_epilogues(activation):
    gen = torch.Generator().manual_seed(7)
    a, b = torch.randn(45, 40, dtype=torch.bfloat16, generator=gen), torch.randn(40, 66, dtype=torch.bfloat16, generator=gen)
    bias = torch.randn(66, dtype=torch.float32, generator=gen)
    check(a, b, bias=bias, activation=activation)
    check(a, b, bias=bias.bfloat16(), activation=activation, out_dtype=torch.float32,
          config=dict(SMALL, EPILOGUE_SUBTILE=True))


def test_batched_and_shared_weight():
    gen = torch.Generator().manual_seed(11)
    a = torch.randn(3, 19, 24, dtype=torch.float16, generator=gen)
    check(a, torch.randn(3, 24, 33, dtype=torch.float16, generator=gen))
    check(a, operand((3, 24, 33), torch.float16, True, gen))
    check(operand((3, 19, 24), torch.float16, True, gen), torch.randn(24, 33, dtype=torch.float16, generator=gen))
    check(a, torch.randn(24, 33, dtype=torch.float16, generator=gen), bias=torch.randn(33, dtype=torch.float16, generator=gen))


def test_default_config_runs():
    """The heuristic's own tiles, interpreted, on a shape that spans several of them."""
    gen = torch.Generator().manual_seed(3)
    check(torch.randn(130, 64, dtype=torch.bfloat16, generator=gen), torch.randn(64, 140, dtype=torch.bfloat16, generator=gen), config=None)


@pytest.mark.parametrize("activation", [None, "gelu", "silu", "relu"])
def test_backward(activation):
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(3, 21, 18, dtype=torch.float32, generator=gen).requires_grad_()
    b = torch.randn(18, 27, dtype=torch.float32, generator=gen).requires_grad_()
    bias = torch.randn(27, dtype=torch.float32, generator=gen).requires_grad_()
    grad = torch.randn(3, 21, 27, dtype=torch.float32, generator=gen)
    out = kernels.gemm(a, b, bias=bias, activation=activation, backend="nvidia", config=SMALL)
    ga, gb, gbias = torch.autograd.grad(out, (a, b, bias), grad)
    a64, b64, bias64 = (t.detach().double().requires_grad_() for t in (a, b, bias))
    ref = reference_gemm(a64, b64, bias64, activation, torch.float64, compute_dtype=torch.float64)
    ra, rb, rbias = torch.autograd.grad(ref, (a64, b64, bias64), grad.double())
    # fp32 inputs run as TF32 on the GPU; the interpreter is exact, so hold it to TF32-level error.
    for name, ours, want in (("grad a", ga, ra), ("grad b", gb, rb), ("grad bias", gbias, rbias)):
        assert not torch.isnan(ours).any()
        torch.testing.assert_close(ours.double(), want, rtol=2e-3, atol=2e-3, msg=lambda m, n=name: f"{n}: {m}")


def test_zero_inner_dimension():
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(5, 0, dtype=torch.float16), torch.randn(0, 7, dtype=torch.float16)
    bias = torch.randn(7, dtype=torch.float16, generator=gen)
    out = kernels.gemm(a, b, bias=bias, activation="relu", backend="nvidia", config=SMALL)
    torch.testing.assert_close(out, torch.relu(bias).expand(5, 7))


def test_sm90a_static_facts():
    """Every shipped config compiles for sm_90a with wgmma (HGMMA) and no local-memory spills."""
    from kernels.isa import profile
    from kernels.nvidia.gemm import SMEM_LIMIT_SM90, compile_specs

    specs = compile_specs("bfloat16") + compile_specs("bfloat16", b_trans=True)[:1] + compile_specs("float32")[:1]
    assert len(specs) >= 3
    for spec in specs:
        p = profile(spec, "sm_90a")
        assert p.tensor_core_instructions > 0 and p.instruction_mix.get("HGMMA", 0) > 0, f"{spec.name}: no HGMMA"
        assert p.spill_bytes == 0 and p.extra["ldl_stl"] == 0, f"{spec.name}: spills {p.spill_bytes} B"
        assert 0 < p.shared_bytes <= SMEM_LIMIT_SM90, f"{spec.name}: shared memory {p.shared_bytes}"
        assert p.registers <= 255


@pytest.mark.gpu
@pytest.mark.skipif(kernels.backends.gpu_vendor() != "nvidia", reason="needs an NVIDIA GPU; the CPU tests above run the same kernel interpreted")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_on_gpu_every_layout_and_epilogue(dtype):
    """The compiled kernel on the device: odd sizes, all layouts, batched, each epilogue, default configs."""
    gen = torch.Generator().manual_seed(21)
    cuda = lambda t: t.cuda()  # noqa: E731
    for (m, n, k) in ((1031, 777, 515), (64, 4096, 1024), (2048, 2048, 2048)):
        for ta, tb in ((False, False), (False, True), (True, False), (True, True)):
            a = cuda(operand((m, k), dtype, ta, gen))
            b = cuda(operand((k, n), dtype, tb, gen))
            check(a, b, config=None)
    a = cuda(torch.randn(4, 333, 257, dtype=dtype, generator=gen))
    check(a, cuda(torch.randn(4, 257, 190, dtype=dtype, generator=gen)), config=None)
    check(a, cuda(torch.randn(257, 190, dtype=dtype, generator=gen)), config=None)
    bias = cuda(torch.randn(190, dtype=dtype, generator=gen))
    for act in ("relu", "gelu", "silu"):
        check(a, cuda(torch.randn(257, 190, dtype=dtype, generator=gen)), bias=bias, activation=act, config=None)
        check(a, cuda(operand((4, 257, 190), dtype, True, gen)), bias=bias, activation=act, out_dtype=torch.float32, config=None)
    poisoned = torch.full((1031, 777), float("nan"), device="cuda", dtype=dtype)
    out = kernels.gemm(cuda(operand((1031, 515), dtype, False, gen)), cuda(operand((515, 777), dtype, False, gen)), backend="nvidia")
    poisoned.copy_(out)
    assert not torch.isnan(poisoned).any(), "an output element was never written"


@pytest.mark.gpu
@pytest.mark.skipif(kernels.backends.gpu_vendor() != "nvidia", reason="needs an NVIDIA GPU")
def test_on_gpu_backward():
    gen = torch.Generator().manual_seed(22)
    a = torch.randn(3, 300, 200, dtype=torch.bfloat16, generator=gen).cuda().requires_grad_()
    w = torch.randn(250, 200, dtype=torch.bfloat16, generator=gen).cuda().requires_grad_()  # nn.Linear layout
    bias = torch.randn(250, dtype=torch.bfloat16, generator=gen).cuda().requires_grad_()
    grad = torch.randn(3, 300, 250, dtype=torch.bfloat16, generator=gen).cuda()
    out = kernels.gemm(a, w.mT, bias=bias, activation="gelu", backend="nvidia")
    got = torch.autograd.grad(out, (a, w, bias), grad)
    a64, w64, b64 = (t.detach().double().requires_grad_() for t in (a, w, bias))
    ref = reference_gemm(a64, w64.mT, b64, "gelu", torch.float64, compute_dtype=torch.float64)
    want = torch.autograd.grad(ref, (a64, w64, b64), grad.double())
    # The framework's own computation at the same precision: PyTorch's bf16 linear + gelu and its autograd.
    a_, w_, b_ = (t.detach().requires_grad_() for t in (a, w, bias))
    low = torch.nn.functional.gelu(torch.nn.functional.linear(a_, w_, b_))
    base = torch.autograd.grad(low, (a_, w_, b_), grad)
    for name, g, w_, b_ in zip(("grad a", "grad w", "grad bias"), got, want, base):
        assert_close_by_ratio(g, b_.to(g.dtype), w_, ratio=2.0, atol=5e-2, name=name)


@pytest.mark.parametrize("split_k", [2, 3])
def test_split_k(split_k):
    """Skinny-M split-K: partial planes in fp32, then a reduction launch that applies the epilogue."""
    gen = torch.Generator().manual_seed(30 + split_k)
    a = torch.randn(13, 70, dtype=torch.bfloat16, generator=gen)
    b = operand((70, 41), torch.bfloat16, True, gen)
    bias = torch.randn(41, dtype=torch.bfloat16, generator=gen)
    check(a, b, bias=bias, activation="silu", config=dict(SMALL, SPLIT_K=split_k))
    check(a.float(), b.float(), config=dict(SMALL, SPLIT_K=split_k))


def test_jax_arrays_through_the_interpreter():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(40)
    a = jnp.asarray(rng.standard_normal((21, 18)), dtype=jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((18, 27)), dtype=jnp.bfloat16)
    bias = jnp.asarray(rng.standard_normal((27,)), dtype=jnp.float32)
    out = kernels.gemm(a, b, bias=bias, activation="relu", backend="nvidia", config=SMALL)
    assert isinstance(out, jax.Array) and out.dtype == jnp.bfloat16
    ref = np.maximum(np.asarray(a, np.float64) @ np.asarray(b, np.float64) + np.asarray(bias, np.float64), 0)
    np.testing.assert_allclose(np.asarray(out, np.float64), ref, rtol=1e-2, atol=5e-2)
    cot = jnp.asarray(rng.standard_normal((21, 27)), dtype=jnp.float32)
    grad = jax.grad(lambda x: jnp.sum(kernels.gemm(x, b, backend="nvidia", config=SMALL).astype(jnp.float32) * cot))(a)
    want = np.asarray(cot, np.float64) @ np.asarray(b, np.float64).T
    np.testing.assert_allclose(np.asarray(grad, np.float64), want, rtol=2e-2, atol=5e-2)
