"""Quantization to FP8 in Triton, one source for NVIDIA and AMD (FNUZ codes on CDNA3): a 2-D
bfloat16/float16/float32 tensor (or its transpose, read through its strides: the copy ``dW``
needs costs no extra pass) becomes FP8 codes and float32 scales grouped along its last dimension
(one scale per tensor, per row, per row and 128 of K with the scales stored column-major as
cuBLASLt and DeepGEMM read them, or per 128x128 block), by the rules of the oracle
(:mod:`ceiling.fp8.reference`), bit for bit; codes are clamped before the cast and the special
codes written as bits, so no target's saturation behaviour shows. The ``fp8_quantize`` op's launcher.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ceiling.fp8.formats import Format, format_of
from ceiling.fp8.reference import AMAX_FLOOR, GRANULARITIES, GROUP, scale_shape
from ceiling.triton_runtime import launcher

# One program's tile for the row-grouped kernels: rows x one 128-wide group.
BLOCK_ROWS = 32
# Programs of the tensor-wide amax pass; the quantize pass reduces their partial maxima.
AMAX_PROGRAMS_GPU = 264
AMAX_PROGRAMS_INTERPRETED = 3
AMAX_BLOCK = (64, 128)
FLOOR = tl.constexpr(AMAX_FLOOR)


@triton.jit
def finite_abs(x):
    """|x| where x is finite, else 0: NaN and infinities do not set a scale."""
    mag = tl.abs(x)
    return tl.where(mag < float("inf"), mag, 0.0)


@triton.jit
def scale_from_amax(amax, FP8_MAX: tl.constexpr, POW2: tl.constexpr):
    """amax / FP8_MAX (floored), rounded up to a power of two by its bits if POW2."""
    scale = tl.div_rn(tl.maximum(amax, FLOOR), FP8_MAX)
    if POW2:
        bits = scale.to(tl.int32, bitcast=True)
        exponent = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(tl.int32)
        exponent = tl.minimum(tl.maximum(exponent, 1), 254)
        scale = (exponent << 23).to(tl.float32, bitcast=True)
    return scale


@triton.jit
def encode(x, inv_scale, FP8: tl.constexpr, FP8_MAX: tl.constexpr, HAS_INF: tl.constexpr,
           NAN_CODE: tl.constexpr):
    """FP8 codes (as uint8) of x * inv_scale: finite values clamped into range then cast
    (round to nearest even), NaN as the format's NaN, infinities as infinities where the
    format has them (e5m2: 0x7C / 0xFC) and NaN where it has none."""
    y = tl.minimum(tl.maximum(x * inv_scale, -FP8_MAX), FP8_MAX)
    finite = tl.abs(x) < float("inf")
    codes = tl.where(finite, y, 0.0).to(FP8).to(tl.uint8, bitcast=True)
    special = tl.full(x.shape, NAN_CODE, tl.uint8)
    if HAS_INF:
        inf = tl.where(x > 0, 0x7C, 0xFC).to(tl.uint8)
        special = tl.where(x == x, inf, special)  # not NaN: an infinity
    return tl.where(finite, codes, special)


@triton.jit
def quantize_groups_kernel(
    x_ptr, q_ptr, s_ptr, R, C,
    stride_xr, stride_xc, stride_qr, stride_qc, stride_sr, stride_sc,
    BLOCK_R: tl.constexpr, ONE_SCALE_PER_TILE: tl.constexpr,
    FP8: tl.constexpr, FP8_MAX: tl.constexpr, HAS_INF: tl.constexpr, NAN_CODE: tl.constexpr, POW2: tl.constexpr,
):
    """One (BLOCK_R, 128) tile: a scale per row (1x128), or one for the tile (128x128, BLOCK_R = 128).

    Rows index the output's outer dimension and columns its K; the source is read and the
    codes written through their own strides, which is how ``transpose`` costs no extra pass.
    """
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = pid_c * 128 + tl.arange(0, 128)
    mask = (rows[:, None] < R) & (cols[None, :] < C)
    # 64-bit offsets throughout: a row or column index times its stride passes 2^31 at 2^31-element tensors.
    x = tl.load(x_ptr + (rows[:, None].to(tl.int64) * stride_xr + cols[None, :].to(tl.int64) * stride_xc),
                mask=mask, other=0.0)
    x = x.to(tl.float32)
    mag = finite_abs(x)
    if ONE_SCALE_PER_TILE:
        scale = scale_from_amax(tl.max(tl.max(mag, axis=1), axis=0), FP8_MAX, POW2)
        tl.store(s_ptr + pid_r * stride_sr + pid_c * stride_sc, scale)
        inv = tl.div_rn(1.0, scale)
        codes = encode(x, inv, FP8, FP8_MAX, HAS_INF, NAN_CODE)
    else:
        scale = scale_from_amax(tl.max(mag, axis=1), FP8_MAX, POW2)
        tl.store(s_ptr + rows * stride_sr + pid_c * stride_sc, scale, mask=rows < R)
        inv = tl.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)
        codes = encode(x, inv[:, None], FP8, FP8_MAX, HAS_INF, NAN_CODE)
    tl.store(q_ptr + (rows[:, None].to(tl.int64) * stride_qr + cols[None, :].to(tl.int64) * stride_qc),
             codes, mask=mask)


@triton.jit
def quantize_rows_kernel(
    x_ptr, q_ptr, s_ptr, R, C,
    stride_xr, stride_xc, stride_qr, stride_qc, stride_sr,
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
    FP8: tl.constexpr, FP8_MAX: tl.constexpr, HAS_INF: tl.constexpr, NAN_CODE: tl.constexpr, POW2: tl.constexpr,
):
    """One scale per row: a first sweep along the row finds its amax, a second writes the codes
    (the second reads come from L2 for any row block that fits there)."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < R
    amax = tl.zeros((BLOCK_R,), tl.float32)
    for c0 in range(0, C, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        mask = row_ok[:, None] & (cols[None, :] < C)
        x = tl.load(x_ptr + (rows[:, None].to(tl.int64) * stride_xr + cols[None, :].to(tl.int64) * stride_xc),
                    mask=mask, other=0.0)
        amax = tl.maximum(amax, tl.max(finite_abs(x.to(tl.float32)), axis=1))
    scale = scale_from_amax(amax, FP8_MAX, POW2)
    tl.store(s_ptr + rows * stride_sr, scale, mask=row_ok)
    inv = tl.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)
    for c0 in range(0, C, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        mask = row_ok[:, None] & (cols[None, :] < C)
        x = tl.load(x_ptr + (rows[:, None].to(tl.int64) * stride_xr + cols[None, :].to(tl.int64) * stride_xc),
                    mask=mask, other=0.0)
        codes = encode(x.to(tl.float32), inv[:, None], FP8, FP8_MAX, HAS_INF, NAN_CODE)
        tl.store(q_ptr + (rows[:, None].to(tl.int64) * stride_qr + cols[None, :].to(tl.int64) * stride_qc),
                 codes, mask=mask)


@triton.jit
def amax_partials_kernel(x_ptr, partial_ptr, R, C, stride_xr, stride_xc,
                         NUM_PROGRAMS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Each of NUM_PROGRAMS programs writes the finite amax of the tiles it strides over."""
    pid = tl.program_id(0)
    tiles_c = tl.cdiv(C, BLOCK_C)
    num_tiles = tl.cdiv(R, BLOCK_R) * tiles_c
    amax = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
    for tile in tl.range(pid, num_tiles, NUM_PROGRAMS):
        rows = (tile // tiles_c) * BLOCK_R + tl.arange(0, BLOCK_R)
        cols = (tile % tiles_c) * BLOCK_C + tl.arange(0, BLOCK_C)
        mask = (rows[:, None] < R) & (cols[None, :] < C)
        x = tl.load(x_ptr + (rows[:, None].to(tl.int64) * stride_xr + cols[None, :].to(tl.int64) * stride_xc),
                    mask=mask, other=0.0)
        amax = tl.maximum(amax, finite_abs(x.to(tl.float32)))
    tl.store(partial_ptr + pid, tl.max(tl.max(amax, axis=1), axis=0))


@triton.jit
def quantize_tensor_kernel(
    x_ptr, q_ptr, s_ptr, partial_ptr, R, C, stride_xr, stride_xc, stride_qr, stride_qc,
    NUM_PARTIALS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
    FP8: tl.constexpr, FP8_MAX: tl.constexpr, HAS_INF: tl.constexpr, NAN_CODE: tl.constexpr, POW2: tl.constexpr,
):
    """One scale for the tensor: every program reduces the partial maxima itself (a few hundred
    floats from L2: no atomics, no second launch, and the same scale bit for bit everywhere)."""
    amax = tl.max(tl.load(partial_ptr + tl.arange(0, NUM_PARTIALS)), axis=0)
    scale = scale_from_amax(amax, FP8_MAX, POW2)
    if (tl.program_id(0) == 0) & (tl.program_id(1) == 0):
        tl.store(s_ptr, scale)
    inv = tl.div_rn(1.0, scale)
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (rows[:, None] < R) & (cols[None, :] < C)
    x = tl.load(x_ptr + (rows[:, None].to(tl.int64) * stride_xr + cols[None, :].to(tl.int64) * stride_xc),
                mask=mask, other=0.0)
    codes = encode(x.to(tl.float32), inv, FP8, FP8_MAX, HAS_INF, NAN_CODE)
    tl.store(q_ptr + (rows[:, None].to(tl.int64) * stride_qr + cols[None, :].to(tl.int64) * stride_qc),
             codes, mask=mask)


# --------------------------------------------------------------------------- launch

_TL_FP8 = {"float8_e4m3fn": tl.float8e4nv, "float8_e5m2": tl.float8e5, "float8_e4m3fnuz": tl.float8e4b8,
           "float8_e5m2fnuz": tl.float8e5b16}


def format_constants(fmt: Format) -> dict:
    """The constexprs that describe an FP8 format to the kernels."""
    return dict(FP8=_TL_FP8[fmt.name], FP8_MAX=fmt.max, HAS_INF=fmt.has_inf, NAN_CODE=0x80 if fmt.fnuz else 0x7F)


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def quantize(x: torch.Tensor, granularity: str = "1x128", dtype: torch.dtype = torch.float8_e4m3fn, *,
             transpose: bool = False, pow2: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes, scales) of ``x`` (or ``x.T``) by the Triton kernels; arguments checked by
    :func:`ceiling.fp8.quantize`."""
    fmt = format_of(dtype)
    src = x.T if transpose else x  # a view: the kernels read through its strides
    rows, cols = src.shape
    q = torch.empty((rows, cols), dtype=fmt.dtype, device=x.device)
    shape = scale_shape(granularity, rows, cols)
    if granularity == "1x128":  # column-major: the scales of one row block are contiguous
        scale = torch.empty(shape[::-1], dtype=torch.float32, device=x.device).T
    else:
        scale = torch.empty(shape, dtype=torch.float32, device=x.device)
    if q.numel() == 0:
        return q, scale.fill_(AMAX_FLOOR / fmt.max) if scale.numel() else scale
    on_gpu = x.is_cuda
    codes = q.view(torch.uint8)
    consts = dict(format_constants(fmt), POW2=pow2)
    strides = (src.stride(0), src.stride(1), codes.stride(0), codes.stride(1))
    if granularity in ("1x128", "128x128"):
        block_r = GROUP if granularity == "128x128" else BLOCK_ROWS
        grid = (triton.cdiv(rows, block_r), triton.cdiv(cols, GROUP))
        launcher(quantize_groups_kernel, on_gpu=on_gpu)[grid](
            src, codes, scale, rows, cols, *strides, scale.stride(0), scale.stride(1),
            BLOCK_R=block_r, ONE_SCALE_PER_TILE=granularity == "128x128", num_warps=4 if block_r < GROUP else 8,
            **consts)
    elif granularity == "row":
        launcher(quantize_rows_kernel, on_gpu=on_gpu)[(triton.cdiv(rows, BLOCK_ROWS),)](
            src, codes, scale, rows, cols, *strides, scale.stride(0),
            BLOCK_R=BLOCK_ROWS, BLOCK_C=128, num_warps=4, **consts)
    else:
        programs = AMAX_PROGRAMS_GPU if on_gpu else AMAX_PROGRAMS_INTERPRETED
        br, bc = AMAX_BLOCK
        programs = max(1, min(programs, triton.cdiv(rows, br) * triton.cdiv(cols, bc)))
        width = next_pow2(programs)
        partial = torch.zeros(width, dtype=torch.float32, device=x.device)  # zeros past `programs`: no effect on a max
        launcher(amax_partials_kernel, on_gpu=on_gpu)[(programs,)](
            src, partial, rows, cols, src.stride(0), src.stride(1),
            NUM_PROGRAMS=programs, BLOCK_R=br, BLOCK_C=bc, num_warps=4)
        launcher(quantize_tensor_kernel, on_gpu=on_gpu)[(triton.cdiv(rows, br), triton.cdiv(cols, bc))](
            src, codes, scale, partial, rows, cols, *strides,
            NUM_PARTIALS=width, BLOCK_R=br, BLOCK_C=bc, num_warps=4, **consts)
    return q, scale


def forward(problem, config, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``fp8_quantize`` op's launcher: codes and the scales as stored (1x128 K-block-major)."""
    codes, scale = quantize(x, problem.granularity, format_of(problem.fp8).dtype, transpose=problem.transpose,
                            pow2=problem.pow2)
    return codes, scale.T if problem.granularity == "1x128" else scale


__all__ = ["quantize", "forward", "GRANULARITIES", "format_constants"]
