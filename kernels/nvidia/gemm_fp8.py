"""FP8 GEMM for Hopper (sm_90a) in Triton: TMA-fed FP8 wgmma with both operands K-major, partial sums
promoted to float32 every ``BLOCK_K * PROMOTE_STEPS`` of K (1x128 and 128x128 scales applied at each
promotion, per-tensor and per-row ones in the epilogue), persistent or stream-K
(:mod:`ceiling.nvidia.stream_k`), the epilogue fused before a TMA store; the ``scaled_gemm`` op's
launcher and its config hooks (README, "FP8 GEMM"; tuned tables ``tables/<device>/gemm_fp8.json``).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ceiling.nvidia import stream_k
from ceiling.nvidia import blackwell
from ceiling.nvidia import tma_descriptors as td
from ceiling.nvidia.gemm import (H100_H200_SMS, INTERPRETED_PROGRAMS, _aligned, _descriptor, _pad_rows, _sm_count,
                                 grouped_tile, store_tile)
from ceiling.nvidia.stream_k import fixup, range_start
from ceiling.scaled_gemm.spec import check_config_scales
from ceiling.triton.fp8_scales import output_scales, promote
from ceiling.triton_runtime import launcher


# --------------------------------------------------------------------------- kernel


@triton.jit
def k_group(a, b, acc, a_scale_ptr, b_scale_ptr, offs_m, offs_n, group, M, N,
            stride_sam, stride_sak, stride_sbk, stride_sbn,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PROMOTE_STEPS: tl.constexpr,
            A_SCALE: tl.constexpr, B_SCALE: tl.constexpr):
    """One step of the main loop: PROMOTE_STEPS K tiles into a fresh FP8 partial, promoted into
    the float32 accumulator (scaled by the K-varying scales); or, with PROMOTE_STEPS == 0, one
    K tile accumulated in the wgmma accumulator itself."""
    if PROMOTE_STEPS == 0:
        k0 = group * BLOCK_K
        return tl.dot(a.load([offs_m, k0]), b.load([offs_n, k0]).T, acc)
    k0 = group * (BLOCK_K * PROMOTE_STEPS)
    part = tl.dot(a.load([offs_m, k0]), b.load([offs_n, k0]).T)
    for j in tl.static_range(1, PROMOTE_STEPS):
        kj = k0 + j * BLOCK_K
        part = tl.dot(a.load([offs_m, kj]), b.load([offs_n, kj]).T, part)
    return promote(acc, part, a_scale_ptr, b_scale_ptr, offs_m, offs_n, k0, M, N,
                   stride_sam, stride_sak, stride_sbk, stride_sbn, BLOCK_M, BLOCK_N, A_SCALE, B_SCALE)


@triton.jit
def finish(acc, c, a_scale_ptr, b_scale_ptr, bias_ptr, offs_m, offs_n, M, N, stride_sam, stride_sbn,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, A_SCALE: tl.constexpr, B_SCALE: tl.constexpr,
           HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr):
    """Output scales, bias, activation, cast and TMA store of one finished tile."""
    acc = output_scales(acc, a_scale_ptr, b_scale_ptr, offs_m, offs_n, M, N, stride_sam, stride_sbn,
                        BLOCK_M, BLOCK_N, A_SCALE, B_SCALE)
    store_tile(acc, c, bias_ptr, offs_m, offs_n, M, N, BLOCK_M, BLOCK_N, HAS_BIAS, ACTIVATION, EPILOGUE_SUBTILE)


@triton.jit
def gemm_fp8_kernel(
    a, b, c, a_scale_ptr, b_scale_ptr, bias_ptr, ws_ptr, sem_ptr,
    M, N, K, stride_sam, stride_sak, stride_sbk, stride_sbn,
    A_SCALE: tl.constexpr, B_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, PROMOTE_STEPS: tl.constexpr, K_STEP: tl.constexpr, STREAM_K: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr,
):
    """a: (M, K) and b: (N, K) descriptors, c: (M, N); scales by pointer and strides. K_STEP is
    the K depth of one main-loop step: BLOCK_K * PROMOTE_STEPS, or BLOCK_K when never promoting."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_groups = tl.cdiv(K, K_STEP)  # main-loop steps per tile

    if STREAM_K:
        # A contiguous run of (tile, K step) pairs: whole tiles, and at most a partial one at
        # each end. Each tile's share is one pipelined K loop; split tiles are fixed up.
        total = num_tiles * k_groups
        begin = range_start(pid, total, NUM_SMS)
        end = range_start(pid + 1, total, NUM_SMS)
        for tile in tl.range(begin // k_groups, (end - 1) // k_groups + 1, flatten=True):
            k_lo = tl.maximum(begin - tile * k_groups, 0)
            k_hi = tl.minimum(end - tile * k_groups, k_groups)
            pid_m, pid_n = grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)
            offs_m = pid_m * BLOCK_M
            offs_n = pid_n * BLOCK_N
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for group in range(k_lo, k_hi):
                acc = k_group(a, b, acc, a_scale_ptr, b_scale_ptr, offs_m, offs_n, group, M, N,
                              stride_sam, stride_sak, stride_sbk, stride_sbn,
                              BLOCK_M, BLOCK_N, BLOCK_K, PROMOTE_STEPS, A_SCALE, B_SCALE)
            if (k_lo == 0) & (k_hi == k_groups):  # the whole tile ran here
                finish(acc, c, a_scale_ptr, b_scale_ptr, bias_ptr, offs_m, offs_n, M, N, stride_sam, stride_sbn,
                       BLOCK_M, BLOCK_N, A_SCALE, B_SCALE, HAS_BIAS, ACTIVATION, EPILOGUE_SUBTILE)
            else:
                is_last, summed = fixup(acc, tile, pid, begin, k_groups, total, ws_ptr, sem_ptr, M - offs_m,
                                        NUM_SMS, BLOCK_M, BLOCK_N)
                if is_last:
                    finish(summed, c, a_scale_ptr, b_scale_ptr, bias_ptr, offs_m, offs_n, M, N,
                           stride_sam, stride_sbn, BLOCK_M, BLOCK_N, A_SCALE, B_SCALE, HAS_BIAS, ACTIVATION,
                           EPILOGUE_SUBTILE)
    else:
        # The epilogue trails the flattened main loop by one tile: it recomputes its coordinates.
        tile_c = pid - NUM_SMS
        for tile in tl.range(pid, num_tiles, NUM_SMS, flatten=True):
            pid_m, pid_n = grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for group in range(0, k_groups):
                acc = k_group(a, b, acc, a_scale_ptr, b_scale_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, group, M, N,
                              stride_sam, stride_sak, stride_sbk, stride_sbn,
                              BLOCK_M, BLOCK_N, BLOCK_K, PROMOTE_STEPS, A_SCALE, B_SCALE)
            tile_c += NUM_SMS
            pid_m, pid_n = grouped_tile(tile_c, num_pid_m, num_pid_n, GROUP_M)
            finish(acc, c, a_scale_ptr, b_scale_ptr, bias_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N,
                   stride_sam, stride_sbn, BLOCK_M, BLOCK_N, A_SCALE, B_SCALE, HAS_BIAS, ACTIVATION, EPILOGUE_SUBTILE)


# --------------------------------------------------------------------------- configs


def target(problem, user=None) -> str:
    return blackwell.target(problem)


def heuristic(problem, user=None) -> dict[str, Any]:
    """:func:`hopper_heuristic` sized for the target's SM count; on Blackwell, with the sm_90a
    table's entries, fitted to the Blackwell space."""
    return blackwell.config("gemm_fp8", problem,
                            hopper_heuristic(problem, blackwell.units(target(problem), H100_H200_SMS)),
                            {**problem.features(), **features(problem, user)})


def hopper_heuristic(problem, sms: int = H100_H200_SMS) -> dict[str, Any]:
    """A config for a shape nobody tuned.

    Promoted configs keep two accumulators (the fp32 sum and the FP8 partial), so 128x128 with
    two warpgroups (64 + 64 registers a thread) is the largest tile that does not spill.
    Decode-sized M (<= 64) streams the weights with stream-K, many stages deep; few-tile
    problems use stream-K too, so no SM idles in a partial wave.
    """
    m, n = problem.m, problem.n
    common = dict(BLOCK_K=128, GROUP_M=8, PROMOTE_STEPS=1, EPILOGUE_SUBTILE=False)
    if m <= 64:
        return dict(common, BLOCK_M=64, BLOCK_N=128 if n >= 8192 else 64, num_stages=8, num_warps=4, STREAM_K=True)
    tiles = triton.cdiv(m, 128) * triton.cdiv(n, 128)
    return dict(common, BLOCK_M=128, BLOCK_N=128, num_stages=4, num_warps=8, STREAM_K=tiles < 2 * sms)


def features(problem, user=None) -> dict[str, Any]:
    """Nothing beyond the problem's own; a ``config`` that names ``SCALES`` must name the call's."""
    check_config_scales(problem, user)
    return {}


def k_step(config) -> int:
    """K depth of one main-loop step: BLOCK_K * PROMOTE_STEPS, or BLOCK_K when never promoting."""
    return config["BLOCK_K"] * max(config["PROMOTE_STEPS"], 1)


# --------------------------------------------------------------------------- launch


def _k_major(x: torch.Tensor) -> torch.Tensor:
    """x (rows, K) with unit K stride and 16-byte aligned rows, as TMA reads FP8 operands; the choice
    is :func:`ceiling.nvidia.tma_descriptors.fp8_view`'s, which ``ceiling verify`` proves legal."""
    if td.strided_k(td.Operand.of(x)):
        x = x.contiguous()
    if td.overlapping_rows(td.Operand.of(x)):
        x = x.contiguous()
    return x if _aligned(x) else _pad_rows(x)


def fp8_blocks(cfg) -> tuple[list[int], list[int], list[int]]:
    """Blocks of the A, B^T and C descriptors: both operands K-major."""
    c_cols = cfg["BLOCK_N"] // 2 if cfg["EPILOGUE_SUBTILE"] else cfg["BLOCK_N"]
    return [cfg["BLOCK_M"], cfg["BLOCK_K"]], [cfg["BLOCK_N"], cfg["BLOCK_K"]], [cfg["BLOCK_M"], c_cols]


def _scale_strides(scale: torch.Tensor, kind: str) -> tuple[int, int]:
    if kind == "tensor":
        return 0, 0
    return scale.stride(0), scale.stride(1)


def forward(problem, config, a, b, a_scale, b_scale, bias) -> tuple[torch.Tensor]:
    """``activation(deq(a) @ deq(b) + bias)`` on the Hopper kernel (interpreted on CPU tensors)."""
    m, n, k = problem.m, problem.n, problem.k
    a_kind, b_kind = problem.a_scale, problem.b_scale
    on_gpu = a.is_cuda
    out = torch.empty((m, n), dtype=getattr(torch, problem.out_dtype), device=a.device)
    if out.numel() == 0:
        return (out,)
    if k == 0:  # an empty sum: the epilogue of a zero accumulator
        from ceiling.gemm.reference import activate_torch

        z = torch.zeros((m, n), dtype=torch.float32, device=a.device)
        return (out.copy_(activate_torch(z + bias.float() if bias is not None else z, problem.activation)),)

    too_large = td.gemm_too_large(1, m, n, k)
    if too_large:  # before any copy: a descriptor could not describe the operand
        from ceiling.errors import InputError

        arg, name, value = too_large
        raise InputError(arg, f"{name} below 2^31 (the Hopper kernel's TMA descriptors)", f"{name} = {value}")
    cfg = config
    a_view, bt_view = _k_major(a), _k_major(b.mT)
    target = out if _aligned(out) else _pad_rows(out, copy=False)
    a_block, bt_block, c_block = fp8_blocks(cfg)
    tiles = triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"])
    step = k_step(cfg)
    k_groups = triton.cdiv(k, step)
    sms = _sm_count(a.device.index or 0) if on_gpu else INTERPRETED_PROGRAMS
    if cfg["STREAM_K"]:
        programs = stream_k.programs_for(tiles * k_groups, sms)
        ws = stream_k.workspace(a.device, programs, cfg["BLOCK_M"], cfg["BLOCK_N"])
        sem = stream_k.semaphores(a.device, tiles)
    else:
        programs = max(1, min(sms, tiles))
        ws = sem = out  # never touched without STREAM_K
    a_scale = a_scale.reshape(()) if a_kind == "tensor" else a_scale
    b_scale = b_scale.reshape(()) if b_kind == "tensor" else b_scale
    sam, sak = _scale_strides(a_scale, a_kind)
    sbk, sbn = _scale_strides(b_scale, b_kind)
    bias_arg = bias if bias is not None else out  # never read when HAS_BIAS is False
    launcher(gemm_fp8_kernel, on_gpu=on_gpu)[(programs,)](
        _descriptor(a_view, a_block), _descriptor(bt_view, bt_block), _descriptor(target, c_block), a_scale, b_scale, bias_arg, ws, sem,
        m, n, k, sam, sak, sbk, sbn,
        A_SCALE=a_kind, B_SCALE=b_kind, HAS_BIAS=bias is not None, ACTIVATION=problem.activation or "none",
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg["GROUP_M"],
        NUM_SMS=programs, PROMOTE_STEPS=cfg["PROMOTE_STEPS"], K_STEP=step, STREAM_K=cfg["STREAM_K"],
        EPILOGUE_SUBTILE=cfg["EPILOGUE_SUBTILE"], num_stages=cfg["num_stages"], num_warps=cfg["num_warps"],
    )
    if target.data_ptr() != out.data_ptr():
        out.copy_(target)
    return (out,)


def backward(problem, config, saved, grads, needs):
    """The bias's gradient (FP8 operands carry none), through the op."""
    from ceiling.scaled_gemm.backward import bias_grad

    return bias_grad("nvidia", problem, saved, grads, needs)
