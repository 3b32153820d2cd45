"""The Hopper GEMM: interpreted on the CPU against float64, and compiled for sm_90a."""

from __future__ import annotations

import pytest
import torch

import kernels
from kernels.jax_bridge import jax_triton_unavailable
from kernels.gemm.reference import gemm as reference_gemm
from tests.numerics import assert_close_by_ratio, stable_seed

# Small tiles keep the interpreter fast; three persistent programs walk several tiles each.
# The persistent kernel on small tiles (STREAM_K named: the heuristic under a partial config takes
# stream-K for M <= 64); the stream-K tests ask for it.
SMALL = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, GROUP_M=2, num_stages=2, num_warps=4,
             EPILOGUE_SUBTILE=False, WARP_SPECIALIZE=False, STREAM_K=False)
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
    gen = torch.Generator().manual_seed(stable_seed(str(dtype), ta, tb) % 2**31)
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


@pytest.mark.parametrize("m", [1, 7, 16, 33, 64])
def test_small_m_stream_k(m):
    """The small-M schedule: tiles split between programs and fixed up in the same launch, odd N and
    K, both B layouts, the epilogue after the fix-up, every output written, semaphores left at zero."""
    from kernels.nvidia import stream_k

    gen = torch.Generator().manual_seed(70 + m)
    cfg = dict(SMALL, STREAM_K=True)
    n, k = 37 + 2 * m, 75 + m  # odd, and no multiple of a tile
    a = torch.randn(m, k, dtype=torch.bfloat16, generator=gen)
    bias = torch.randn(n, dtype=torch.bfloat16, generator=gen)
    check(a, operand((k, n), torch.bfloat16, True, gen), bias=bias, activation="gelu", config=cfg)
    check(a, operand((k, n), torch.bfloat16, False, gen), config=dict(cfg, EPILOGUE_SUBTILE=True))
    assert all(int(buf.abs().sum()) == 0 for buf in stream_k._semaphores.values())


@pytest.mark.gpu
@pytest.mark.skipif(kernels.backends.gpu_vendor() != "nvidia", reason="needs an NVIDIA GPU; the interpreted test above "
                    "runs the same kernel")
def test_on_gpu_small_m_stream_k():
    """The stream-K schedule compiled, on decode shapes and odd ones, both B layouts, every output
    written (poisoned), semaphores back at zero; and the result does not depend on the run."""
    from kernels.nvidia import stream_k

    gen = torch.Generator().manual_seed(80)
    cfg = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, GROUP_M=8, num_stages=6, num_warps=4, EPILOGUE_SUBTILE=False,
               WARP_SPECIALIZE=False, SPLIT_K=1, STREAM_K=True)
    for m, n, k in ((1, 4096, 4096), (7, 4097, 1029), (16, 4096, 4096), (33, 14336, 4096), (64, 8192, 8192)):
        a = torch.randn(m, k, dtype=torch.bfloat16, generator=gen).cuda()
        for tb in (True, False):
            b = operand((k, n), torch.bfloat16, tb, gen).cuda()
            check(a, b, bias=torch.randn(n, dtype=torch.bfloat16, generator=gen).cuda(), activation="silu", config=cfg)
        # a NaN block of the output's size, freed: the caching allocator hands it to the output
        poison = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        del poison
        first = kernels.gemm(a, b, backend="nvidia", config=cfg)
        assert not first.isnan().any(), "an output element was never written"
        assert torch.equal(kernels.gemm(a, b, backend="nvidia", config=cfg), first), "the fix-up order is not fixed"
    torch.cuda.synchronize()
    assert all(int(buf.abs().sum()) == 0 for buf in stream_k._semaphores.values())


def test_small_m_heuristic_is_stream_k():
    from kernels.nvidia.gemm import heuristic_config

    for m in (1, 16, 64):
        assert heuristic_config(m, 4096, 4096, "bfloat16").STREAM_K
    assert not heuristic_config(128, 4096, 4096, "bfloat16").STREAM_K


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


@pytest.mark.parametrize("split_k", [1, 2])
def test_pointer_path_used_by_jax_on_gpu(split_k):
    """gemm_kernel_jax (jax-triton's argument order, USE_TMA=False), interpreted on torch tensors."""
    import triton

    from kernels.nvidia.gemm import gemm_kernel_jax, splitk_reduce_kernel_jax
    from kernels.triton_runtime import interpreted

    gen = torch.Generator().manual_seed(50 + split_k)
    m, n, k = 37, 45, 70
    a = torch.randn(m, k, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(k, n, dtype=torch.bfloat16, generator=gen)
    bias = torch.randn(n, dtype=torch.float32, generator=gen)
    bm, bn, bk = 32, 32, 16
    # split-K: SPLIT_K planes of m rows each (rows past m in a tile are never written).
    c = torch.full((split_k * m, n) if split_k > 1 else (m, n), float("nan"),
                   dtype=torch.float32 if split_k > 1 else torch.bfloat16)
    meta = dict(BATCHED=False, HAS_BIAS=split_k == 1, ACTIVATION="gelu" if split_k == 1 else "none",
                BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=2, NUM_SMS=3, EPILOGUE_SUBTILE=False,
                WARP_SPECIALIZE=False, SPLIT_K=split_k)
    interpreted(gemm_kernel_jax)[(3,)](a, b, bias, m, n, k, 1, m, m * k, k, 1, k * n, n, 1, m * n, n, c, **meta)
    assert not c.isnan().any(), "a workspace or output element was never written"
    out = c
    if split_k > 1:
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
        interpreted(splitk_reduce_kernel_jax)[(triton.cdiv(m, 32), triton.cdiv(n, 32))](
            c, bias, m, n, m, n, n, out, SPLIT_K=split_k, HAS_BIAS=True, ACTIVATION="gelu", BLOCK_M=32, BLOCK_N=32)
    ref = reference_gemm(a, b, bias, "gelu", torch.float64, compute_dtype=torch.float64)
    framework = reference_gemm(a, b, bias, "gelu", torch.bfloat16)
    assert_close_by_ratio(out, framework, ref, atol=1e-2)


def test_pointer_path_compiles_with_hgmma():
    import dataclasses

    from kernels.isa import profile
    from kernels.nvidia.gemm import compile_specs

    spec = compile_specs("bfloat16")[0]
    # As jax-triton launches it: pointers 16-byte aligned, unit strides specialized, the rest multiples of 16.
    sig = dict(spec.signature, a="*bf16", b="*bf16", c="*bf16", stride_ak="constexpr", stride_bn="constexpr")
    constexprs = dict(spec.constexprs, USE_TMA=False, stride_ak=1, stride_bn=1)
    aligned = ("a", "b", "c", "bias_ptr", "M", "N", "K", "PLANE_ROWS", "stride_ab", "stride_am", "stride_bb", "stride_bk",
               "stride_cb", "stride_cm")
    p = profile(dataclasses.replace(spec, signature=sig, constexprs=constexprs, divisible_by_16=aligned), "sm_90a")
    assert p.instruction_mix.get("HGMMA", 0) > 0 and p.spill_bytes == 0
    assert p.instruction_mix.get("LDGSTS", 0) > 0, "pointer loads are not pipelined through cp.async"



@pytest.mark.gpu
@pytest.mark.skipif(jax_triton_unavailable() is not None, reason=jax_triton_unavailable() or "")
def test_jax_on_gpu_through_jax_triton():
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(60)
    for (m, n, k), batch in (((1024, 768, 512), None), ((16, 4096, 4096), None), ((256, 384, 512), 3)):
        shape_a = (m, k) if batch is None else (batch, m, k)
        a = jnp.asarray(rng.standard_normal(shape_a), dtype=jnp.bfloat16)
        b = jnp.asarray(rng.standard_normal((k, n)), dtype=jnp.bfloat16)
        bias = jnp.asarray(rng.standard_normal((n,)), dtype=jnp.bfloat16)
        cot = jnp.asarray(rng.standard_normal((*shape_a[:-1], n)), dtype=jnp.float32)
        f = jax.jit(lambda a, b, bias: kernels.gemm(a, b, bias=bias, activation="gelu", backend="nvidia"))
        out = np.asarray(f(a, b, bias), np.float64)
        z = np.asarray(a, np.float64) @ np.asarray(b, np.float64) + np.asarray(bias, np.float64)
        ref = np.asarray(jax.nn.gelu(jnp.asarray(z), approximate=False), np.float64)
        low = np.asarray(jax.nn.gelu((a @ b + bias).astype(jnp.float32), approximate=False).astype(jnp.bfloat16), np.float64)
        assert np.abs(out - ref).max() <= 2 * np.abs(low - ref).max() + 1e-2
        grads = jax.grad(lambda a, b, bias: jnp.sum(kernels.gemm(a, b, bias=bias, activation="gelu", backend="nvidia")
                                                     .astype(jnp.float32) * cot), argnums=(0, 1, 2))(a, b, bias)
        want = jax.grad(lambda a, b, bias: jnp.sum(jax.nn.gelu((a.astype(jnp.float32) @ b.astype(jnp.float32) + bias),
                                                               approximate=False) * cot), argnums=(0, 1, 2))(a, b, bias)
        for g, w in zip(grads, want):
            g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
            assert np.isfinite(g).all() and np.abs(g - w).max() <= 3e-2 * np.abs(w).max() + 1e-2
