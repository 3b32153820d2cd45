"""The Hopper GEMM's own pieces: split-K, the stream-K schedule, the heuristic, the JAX (jax-triton)
kernels on pointers, its compile for sm_90a, and the compiled kernel on a GPU. The cases every
implementation runs are ``tests/test_gemm.py``'s ``TestNvidia``."""

from __future__ import annotations

import pytest
import torch

import ceiling
from ceiling.gemm.reference import gemm as reference_gemm
from ceiling.gemm.spec import shipped_problem
from ceiling.jax_bridge import jax_triton_unavailable
from ceiling.testing.numerics import assert_close
from tests.test_gemm import NVIDIA_SMALL, expect, operand

# the persistent kernel on small tiles; the stream-K tests ask for that schedule
SMALL = dict(NVIDIA_SMALL, EPILOGUE_SUBTILE=False, WARP_SPECIALIZE=False, STREAM_K=False)
DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def check(a, b, bias=None, activation=None, out_dtype=None, config=SMALL):
    out = ceiling.gemm(a, b, bias=bias, activation=activation, out_dtype=out_dtype, backend="nvidia", config=config)
    expect(out.cpu(), a.cpu(), b.cpu(), None if bias is None else bias.cpu(), activation, out_dtype, tf32=True)
    return out


def test_subtiled_epilogue():
    """The epilogue in two halves (EPILOGUE_SUBTILE) with a bf16 bias into a float32 output."""
    gen = torch.Generator().manual_seed(7)
    a, b = torch.randn(45, 40, generator=gen).bfloat16(), torch.randn(40, 66, generator=gen).bfloat16()
    bias = torch.randn(66, generator=gen).bfloat16()
    for activation in (None, "relu", "gelu", "silu"):
        check(a, b, bias=bias, activation=activation, out_dtype=torch.float32, config=dict(SMALL, EPILOGUE_SUBTILE=True))


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
    from ceiling.nvidia import stream_k

    gen = torch.Generator().manual_seed(70 + m)
    cfg = dict(SMALL, STREAM_K=True)
    n, k = 37 + 2 * m, 75 + m  # odd, and no multiple of a tile
    a = torch.randn(m, k, dtype=torch.bfloat16, generator=gen)
    bias = torch.randn(n, dtype=torch.bfloat16, generator=gen)
    check(a, operand((k, n), torch.bfloat16, True, gen), bias=bias, activation="gelu", config=cfg)
    check(a, operand((k, n), torch.bfloat16, False, gen), config=dict(cfg, EPILOGUE_SUBTILE=True))
    assert all(int(buf.abs().sum()) == 0 for buf in stream_k._semaphores.values())


def test_small_m_heuristic_is_stream_k():
    from ceiling.nvidia.gemm import heuristic

    for m in (1, 16, 64):
        assert heuristic(shipped_problem(m, 4096, 4096))["STREAM_K"]
    assert not heuristic(shipped_problem(128, 4096, 4096))["STREAM_K"]
    # a shared weight folds the batch into M: 4 x 32 rows is a 128-row problem
    assert not heuristic(shipped_problem(32, 4096, 4096, batch=4, b_shared=True))["STREAM_K"]


def test_tuned_entries_serve_their_device_and_shape_only():
    """The H200 table's entry for a shape is what an H200 runs for it; the H100 and the interpreter
    get the heuristic there, and a shape no entry names gets the heuristic on the H200 too."""
    from ceiling.gemm.op import GEMM
    from ceiling.nvidia.gemm import heuristic
    from ceiling.op import resolve_config

    impl = GEMM.implementation("nvidia")

    def resolved(m, n, k, gpu, arch="sm_90"):
        return resolve_config(shipped_problem(m, n, k, gpu=gpu, arch=arch if gpu else None), impl, None)

    h200 = resolved(16, 4096, 4096, "NVIDIA H200")
    assert h200["SPLIT_K"] == 4 and not h200["STREAM_K"] and "H200#" in h200.source
    for gpu in ("NVIDIA H100 80GB HBM3", None):
        assert resolved(16, 4096, 4096, gpu) == heuristic(shipped_problem(16, 4096, 4096))
    assert resolved(16, 4096, 4097, "NVIDIA H200") == heuristic(shipped_problem(16, 4096, 4097))


def test_the_sweeps_winners_go_into_the_devices_table(tmp_path, monkeypatch):
    """ceiling tune gemm --apply: each winner becomes a measured entry for its exact problem in the
    device's table (replacing one for the same problem), which a call on that device then runs."""
    from ceiling import tables
    from ceiling.gemm.op import GEMM
    from ceiling.op import resolve_config
    from ceiling.tuning import gemm as sweep

    copy = tmp_path / "gemm.json"
    real = tables.path
    copy.write_text(real("nvidia", "H200", "gemm").read_text())
    monkeypatch.setattr(tables, "path", lambda b, d, f: copy if (b, d, f) == ("nvidia", "H200", "gemm") else real(b, d, f))
    won = dict(SMALL, BLOCK_M=64, SPLIT_K=1)
    rows = [{"shape": [16, 4096, 4096], "dtype": "bfloat16", "layout": "NT", "impl": "ceiling.nvidia", "config": won,
             "median_ms": 0.01, "rel_error": 0.0},
            {"shape": [16, 4096, 4096], "dtype": "bfloat16", "layout": "NT", "impl": "torch.matmul", "config": None,
             "median_ms": 0.02}]
    entries = sweep.table_entries(sweep.best_per_shape(rows), "NVIDIA H200", "2026-12-02", "abc1234")
    before = len(tables.read(copy)["entries"])
    sweep.apply(tables.model("nvidia", "NVIDIA H200"), entries)
    after = tables.read(copy)["entries"]
    assert len(after) == before and after[-1]["measured"]["git_commit"] == "abc1234"
    problem = shipped_problem(16, 4096, 4096, gpu="NVIDIA H200", arch="sm_90")
    assert resolve_config(problem, GEMM.implementation("nvidia"), None) == won


def test_sm90a_static_facts():
    """Every shipped config compiles for sm_90a with wgmma (HGMMA) and no local-memory spills."""
    from ceiling.isa import profile
    from ceiling.nvidia.gemm import SMEM_LIMIT_SM90
    from ceiling.nvidia.gemm_specs import compile_specs

    specs = compile_specs("bfloat16") + compile_specs("bfloat16", b_trans=True)[:1] + compile_specs("float32")[:1]
    assert len(specs) >= 3
    for spec in specs:
        p = profile(spec, "sm_90a")
        assert p.tensor_core_instructions > 0 and p.instruction_mix.get("HGMMA", 0) > 0, f"{spec.name}: no HGMMA"
        assert p.spill_bytes == 0 and p.extra["ldl_stl"] == 0, f"{spec.name}: spills {p.spill_bytes} B"
        assert 0 < p.shared_bytes <= SMEM_LIMIT_SM90, f"{spec.name}: shared memory {p.shared_bytes}"
        assert p.registers <= 255


@pytest.mark.parametrize("split_k", [1, 2])
def test_pointer_path_used_by_jax_on_gpu(split_k):
    """gemm_kernel_jax (jax-triton's argument order, USE_TMA=False), interpreted on torch tensors."""
    import triton

    from ceiling.nvidia.gemm_jax import gemm_kernel_jax, splitk_reduce_kernel_jax
    from ceiling.triton_runtime import interpreted

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
    assert_close("out", out, framework, ref)


def test_pointer_path_compiles_with_hgmma():
    import dataclasses

    from ceiling.isa import profile
    from ceiling.nvidia.gemm_specs import compile_specs

    spec = compile_specs("bfloat16")[0]
    # As jax-triton launches it: pointers 16-byte aligned, unit strides specialized, the rest multiples of 16.
    sig = dict(spec.signature, a="*bf16", b="*bf16", c="*bf16", stride_ak="constexpr", stride_bn="constexpr")
    constexprs = dict(spec.constexprs, USE_TMA=False, stride_ak=1, stride_bn=1)
    aligned = ("a", "b", "c", "bias_ptr", "M", "N", "K", "PLANE_ROWS", "stride_ab", "stride_am", "stride_bb", "stride_bk",
               "stride_cb", "stride_cm")
    p = profile(dataclasses.replace(spec, signature=sig, constexprs=constexprs, divisible_by_16=aligned), "sm_90a")
    assert p.instruction_mix.get("HGMMA", 0) > 0 and p.spill_bytes == 0
    assert p.instruction_mix.get("LDGSTS", 0) > 0, "pointer loads are not pipelined through cp.async"


# ----------------------------------------------------------------------------------------------
# On an NVIDIA GPU
# ----------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(ceiling.backends.gpu_vendor() != "nvidia", reason="needs an NVIDIA GPU; the CPU tests run the same kernel interpreted")
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
    out = ceiling.gemm(cuda(operand((1031, 515), dtype, False, gen)), cuda(operand((515, 777), dtype, False, gen)), backend="nvidia")
    poisoned.copy_(out)
    assert not torch.isnan(poisoned).any(), "an output element was never written"


@pytest.mark.gpu
@pytest.mark.skipif(ceiling.backends.gpu_vendor() != "nvidia", reason="needs an NVIDIA GPU")
def test_on_gpu_backward():
    gen = torch.Generator().manual_seed(22)
    a = torch.randn(3, 300, 200, dtype=torch.bfloat16, generator=gen).cuda().requires_grad_()
    w = torch.randn(250, 200, dtype=torch.bfloat16, generator=gen).cuda().requires_grad_()  # nn.Linear layout
    bias = torch.randn(250, dtype=torch.bfloat16, generator=gen).cuda().requires_grad_()
    grad = torch.randn(3, 300, 250, dtype=torch.bfloat16, generator=gen).cuda()
    out = ceiling.gemm(a, w.mT, bias=bias, activation="gelu", backend="nvidia")
    got = torch.autograd.grad(out, (a, w, bias), grad)
    a64, w64, b64 = (t.detach().double().requires_grad_() for t in (a, w, bias))
    ref = reference_gemm(a64, w64.mT, b64, "gelu", torch.float64, compute_dtype=torch.float64)
    want = torch.autograd.grad(ref, (a64, w64, b64), grad.double())
    # The framework's own computation at the same precision: PyTorch's bf16 linear + gelu and its autograd.
    a_, w_, b_ = (t.detach().requires_grad_() for t in (a, w, bias))
    low = torch.nn.functional.gelu(torch.nn.functional.linear(a_, w_, b_))
    base = torch.autograd.grad(low, (a_, w_, b_), grad)
    for name, g, w_, b_ in zip(("grad a", "grad w", "grad bias"), got, want, base):
        assert_close(name, g, b_.to(g.dtype), w_, atol=5e-2, absolute=True)


@pytest.mark.gpu
@pytest.mark.skipif(ceiling.backends.gpu_vendor() != "nvidia", reason="needs an NVIDIA GPU; the interpreted test above "
                    "runs the same kernel")
def test_on_gpu_small_m_stream_k():
    """The stream-K schedule compiled, on decode shapes and odd ones, both B layouts, every output
    written (poisoned), semaphores back at zero; and the result does not depend on the run."""
    from ceiling.nvidia import stream_k

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
        first = ceiling.gemm(a, b, backend="nvidia", config=cfg)
        assert not first.isnan().any(), "an output element was never written"
        assert torch.equal(ceiling.gemm(a, b, backend="nvidia", config=cfg), first), "the fix-up order is not fixed"
    torch.cuda.synchronize()
    assert all(int(buf.abs().sum()) == 0 for buf in stream_k._semaphores.values())


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
        f = jax.jit(lambda a, b, bias: ceiling.gemm(a, b, bias=bias, activation="gelu", backend="nvidia"))
        out = np.asarray(f(a, b, bias), np.float64)
        z = np.asarray(a, np.float64) @ np.asarray(b, np.float64) + np.asarray(bias, np.float64)
        ref = np.asarray(jax.nn.gelu(jnp.asarray(z), approximate=False), np.float64)
        low = np.asarray(jax.nn.gelu((a @ b + bias).astype(jnp.float32), approximate=False).astype(jnp.bfloat16), np.float64)
        assert np.abs(out - ref).max() <= 2 * np.abs(low - ref).max() + 1e-2
        grads = jax.grad(lambda a, b, bias: jnp.sum(ceiling.gemm(a, b, bias=bias, activation="gelu", backend="nvidia")
                                                     .astype(jnp.float32) * cot), argnums=(0, 1, 2))(a, b, bias)
        want = jax.grad(lambda a, b, bias: jnp.sum(jax.nn.gelu((a.astype(jnp.float32) @ b.astype(jnp.float32) + bias),
                                                               approximate=False) * cot), argnums=(0, 1, 2))(a, b, bias)
        for g, w in zip(grads, want):
            g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
            assert np.isfinite(g).all() and np.abs(g - w).max() <= 3e-2 * np.abs(w).max() + 1e-2
