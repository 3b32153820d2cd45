"""The interpreter ladder: interpreted GEMMs accumulate each tl.dot through the tensor-core model
(ceiling.triton_runtime.tensor_core_numerics), so their output bits are the model's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ceiling
from ceiling import InputError
from ceiling.numerics import mma
from ceiling.triton_runtime import tensor_core_numerics


def fp8_case(m: int, n: int, k: int, *, promote: int, block_k: int = 64, block: int = 32):
    """Random e4m3 operands (a: (m, k), b: (k, n) as a transposed view), unit tensor scales and a
    config of block x block output tiles."""
    g = torch.Generator().manual_seed(m * 7 + n * 3 + k + promote)
    a = (torch.randn(m, k, generator=g) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, generator=g) * 4).to(torch.float8_e4m3fn).mT
    cfg = dict(BLOCK_M=block, BLOCK_N=block, BLOCK_K=block_k, PROMOTE_STEPS=promote, num_stages=2, num_warps=4, GROUP_M=1,
               STREAM_K=False, EPILOGUE_SUBTILE=False)
    return a, b, torch.tensor(1.0), cfg


def modelled_fp8_gemm(a: np.ndarray, b: np.ndarray, target: str, block_k: int, promote: int) -> np.ndarray:
    """The FP8 kernel's accumulation, tile by tile, with the model for each tl.dot: never promoting,
    one wgmma accumulator over all of K; else a fresh partial per BLOCK_K * PROMOTE_STEPS of K,
    added into the float32 accumulator."""
    m, k = a.shape
    acc = np.zeros((m, b.shape[1]), np.float32)
    if promote == 0:
        for k0 in range(0, k, block_k):
            acc = mma(a[:, k0:k0 + block_k], b[k0:k0 + block_k], acc, "e4m3", target)
        return acc
    for k0 in range(0, k, block_k * promote):
        part = None
        for j in range(k0, min(k0 + block_k * promote, k), block_k):
            part = mma(a[:, j:j + block_k], b[j:j + block_k], part, "e4m3", target)
        acc = (acc + part).astype(np.float32)
    return acc


@pytest.mark.parametrize("target, promote", [("h100", 0), ("h100", 2), ("b200", 1)])
def test_interpreted_fp8_gemm_output_bits_are_the_models(target, promote):
    a, b, one, cfg = fp8_case(48, 40, 320, promote=promote)  # ragged M, N and K: masked tiles too
    with tensor_core_numerics(target):
        got = ceiling.scaled_gemm(a, b, one, one, out_dtype=torch.float32, backend="nvidia", config=cfg)
    want = modelled_fp8_gemm(a.double().numpy(), b.double().numpy(), target, cfg["BLOCK_K"], promote)
    np.testing.assert_array_equal(got.numpy().view(np.uint32), want.view(np.uint32))
    plain = ceiling.scaled_gemm(a, b, one, one, out_dtype=torch.float32, backend="nvidia", config=cfg)
    if target == "h100":  # the float32 interpreter differs from the narrowed Hopper FP8 sum
        assert not np.array_equal(plain.numpy(), want)


def test_interpreted_bf16_gemm_output_bits_are_the_models():
    g = torch.Generator().manual_seed(5)
    a = torch.randn(40, 96, generator=g).bfloat16()
    b = torch.randn(96, 24, generator=g).bfloat16()
    with tensor_core_numerics("h200"):
        got = ceiling.gemm(a, b, out_dtype=torch.float32, backend="nvidia")
    want = mma(a.double().numpy(), b.double().numpy(), None, "bf16", "h100")
    np.testing.assert_array_equal(got.numpy().view(np.uint32), want.view(np.uint32))


def test_the_option_is_off_by_default_and_restored():
    from ceiling import triton_runtime

    assert triton_runtime._tensor_core_target is None
    with tensor_core_numerics("b200"):
        with tensor_core_numerics(None):
            assert triton_runtime._tensor_core_target is None
        assert triton_runtime._tensor_core_target == "b200"
    assert triton_runtime._tensor_core_target is None
    with pytest.raises(InputError, match="target"):
        with tensor_core_numerics("v100"):
            pass
