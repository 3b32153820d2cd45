"""FP8 GEMM for AMD CDNA3 (MI300X / MI325X, gfx942) in Triton: FNUZ operands on the FP8 MFMA, which
accumulates in float32 (so only 1x128/128x128 scales promote, per 128-deep K block), OCP operands
mapped to FNUZ exactly (:func:`ceiling.fp8.ocp_to_fnuz`: half the value, scales doubled) rather than
upcast to the f16 MFMA; otherwise the CDNA3 GEMM's shape (``ceiling.amd.gemm``): one tile per
program, pointer loads, XCD-contiguous tiles, the epilogue fused. The ``scaled_gemm`` op's launcher
and its config hooks (README, "FP8 GEMM"; tuned tables ``tables/gfx942/gemm_fp8.json``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ceiling.amd import cdna4, devices
from ceiling.amd.gemm import ACTIVATION_CODES, COMPILE_KEYS, _epilogue, _grouped_tile, _xcd_contiguous
from ceiling.fp8.formats import format_of, ocp_to_fnuz
from ceiling.scaled_gemm.spec import check_config_scales
from ceiling.triton.fp8_scales import output_scales, promote
from ceiling.triton_runtime import launcher


@triton.jit
def gemm_fp8_kernel(
    a_ptr, b_ptr, a_scale_ptr, b_scale_ptr, bias_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    stride_sam, stride_sak, stride_sbk, stride_sbn,
    A_SCALE: tl.constexpr, B_SCALE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_XCDS: tl.constexpr, PROMOTE_STEPS: tl.constexpr, EVEN_K: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
):
    """One (BLOCK_M, BLOCK_N) output tile over all of K."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid = _xcd_contiguous(tl.program_id(0), tl.num_programs(0), NUM_XCDS)
    pid_m, pid_n = _grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)
    # Rows and columns past the edge wrap around so the loads stay unmasked and wide; the
    # store drops them.
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    STEPS: tl.constexpr = PROMOTE_STEPS if PROMOTE_STEPS > 0 else 1
    for k0 in range(0, K, BLOCK_K * STEPS):
        part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for j in tl.static_range(STEPS):
            kj = k0 + j * BLOCK_K
            if EVEN_K:
                a = tl.load(a_ptrs + kj * stride_ak)
                b = tl.load(b_ptrs + kj * stride_bk)
            else:
                a = tl.load(a_ptrs + kj * stride_ak, mask=offs_k[None, :] < K - kj, other=0.0)
                b = tl.load(b_ptrs + kj * stride_bk, mask=offs_k[:, None] < K - kj, other=0.0)
            if PROMOTE_STEPS == 0:
                acc = tl.dot(a, b, acc)
            else:
                part = tl.dot(a, b, part)
        if PROMOTE_STEPS > 0:
            acc = promote(acc, part, a_scale_ptr, b_scale_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, k0, M, N,
                          stride_sam, stride_sak, stride_sbk, stride_sbn, BLOCK_M, BLOCK_N, A_SCALE, B_SCALE)

    rows = pid_m * BLOCK_M
    cols = pid_n * BLOCK_N
    acc = output_scales(acc, a_scale_ptr, b_scale_ptr, rows, cols, M, N, stride_sam, stride_sbn,
                        BLOCK_M, BLOCK_N, A_SCALE, B_SCALE)
    rm = rows + tl.arange(0, BLOCK_M)
    rn = cols + tl.arange(0, BLOCK_N)
    acc = _epilogue(acc, bias_ptr, rn, N, HAS_BIAS, ACTIVATION)
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


# ----------------------------------------------------------------------------- configs


def target(problem, user=None) -> str:
    return cdna4.target(problem)


def heuristic(problem, user=None) -> dict:
    """Nothing on CDNA3: the table's shape classes (``tables/gfx942/gemm_fp8.json``) each hold a
    whole config, and every problem falls in one; on CDNA4 those classes fitted to gfx950."""
    return cdna4.config("gemm_fp8", problem, {}, {**problem.features(), **features(problem, user)})


def features(problem, user=None) -> dict:
    """Nothing beyond the problem's own; a ``config`` that names ``SCALES`` must name the call's."""
    check_config_scales(problem, user)
    return {}


# ----------------------------------------------------------------------------- launch


def to_fnuz(x: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An OCP operand and its scale as the FNUZ operand of the same value (exact)."""
    if format_of(x.dtype).fnuz:
        return x, scale
    return ocp_to_fnuz(x), scale * 2.0


def forward(problem, config, a, b, a_scale, b_scale, bias) -> tuple[torch.Tensor]:
    """``activation(deq(a) @ deq(b) + bias)`` on the CDNA3 kernel (interpreted on CPU tensors)."""
    m, n, k = problem.m, problem.n, problem.k
    a_kind, b_kind = problem.a_scale, problem.b_scale
    cfg = config
    out = torch.empty((m, n), dtype=getattr(torch, problem.out_dtype), device=a.device)
    if out.numel() == 0:
        return (out,)
    if getattr(config, "target", None) in cdna4.OCP_FP8:  # OCP operands go to the FP8 MFMA as they are
        a_scale, b_scale = a_scale.float(), b_scale.float()
    else:
        a, a_scale = to_fnuz(a, a_scale.float())
        b, b_scale = to_fnuz(b, b_scale.float())
    a_scale = a_scale.reshape(()) if a_kind == "tensor" else a_scale
    b_scale = b_scale.reshape(()) if b_kind == "tensor" else b_scale
    sam, sak = (0, 0) if a_kind == "tensor" else a_scale.stride()
    sbk, sbn = (0, 0) if b_kind == "tensor" else b_scale.stride()
    bk = cfg["BLOCK_K"]
    step = bk * max(1, cfg["PROMOTE_STEPS"])
    grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
    launcher(gemm_fp8_kernel, on_gpu=a.is_cuda)[grid](
        a, b, a_scale, b_scale, bias if bias is not None else out, out,
        m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        sam, sak, sbk, sbn,
        A_SCALE=a_kind, B_SCALE=b_kind, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=bk,
        GROUP_M=cfg["GROUP_M"], NUM_XCDS=devices.num_xcds(problem.gpu),
        PROMOTE_STEPS=cfg["PROMOTE_STEPS"], EVEN_K=k % step == 0,
        HAS_BIAS=bias is not None, ACTIVATION=ACTIVATION_CODES[problem.activation],
        **{key: cfg[key] for key in COMPILE_KEYS},
    )
    return (out,)


def backward(problem, config, saved, grads, needs):
    """The bias's gradient (FP8 operands carry none), through the op."""
    from ceiling.scaled_gemm.backward import bias_grad

    return bias_grad("amd", problem, saved, grads, needs)
