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
