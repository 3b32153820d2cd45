"""GEMM for AMD CDNA3 (MI300X / MI325X / MI300A, gfx942) in Triton, ``activation(a @ b + bias)``:
one tile per program with pointer loads (transposed views read in place), float32 accumulation on
the MFMA units (XF32 for float32 inputs), programs renumbered so each XCD's L2 serves a contiguous
run of the grouped tile order, split-K with a deterministic reduction for grids that underfill the
CUs, and the epilogue fused before the single store; its config hooks and launcher.
``docs/gemm.md`` says why each piece is there; the tuned classes are ``tables/gfx942/gemm.json``,
the compile specs :mod:`ceiling.amd.gemm_specs`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ceiling.amd import cdna4, devices
from ceiling.constants import SQRT1_2
from ceiling.triton_runtime import launcher

LDS_BYTES = 64 * 1024  # per CU on CDNA3
TARGET_ARCH = "gfx942"
MAX_SPLIT_K = 16  # K slices one output tile may be split into

ACTIVATION_CODES = {None: 0, "relu": 1, "gelu": 2, "silu": 3}
_SQRT1_2 = tl.constexpr(SQRT1_2)
COMPILE_KEYS = ("num_warps", "num_stages", "waves_per_eu", "matrix_instr_nonkdim", "kpack")


# ----------------------------------------------------------------------------- kernel


@triton.jit
def _xcd_contiguous(pid, num_pids, NUM_XCDS: tl.constexpr):
    """Renumber ``pid`` so XCD ``x`` (which runs programs ``x, x + NUM_XCDS, ...``)
    owns one contiguous range of tile ids; the first ``full`` XCDs get one more."""
    per_xcd = (num_pids + NUM_XCDS - 1) // NUM_XCDS
    full = num_pids - (per_xcd - 1) * NUM_XCDS
    xcd = pid % NUM_XCDS
    local = pid // NUM_XCDS
    long_start = xcd * per_xcd + local
    short_start = full * per_xcd + (xcd - full) * (per_xcd - 1) + local
    return tl.where(xcd < full, long_start, short_start)


@triton.jit
def _grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Tile id -> (pid_m, pid_n), walking GROUP_M rows of tiles column by column so a
    window of programs reuses the same B columns and A rows from L2."""
    tiles_per_group = GROUP_M * num_pid_n
    group = tile // tiles_per_group
    first_m = group * GROUP_M
    group_rows = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % tiles_per_group) % group_rows
    pid_n = (tile % tiles_per_group) // group_rows
    return pid_m, pid_n


@triton.jit
def _epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr):
    """Bias in fp32, then the activation, on the fp32 accumulator."""
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)
        acc = acc + bias.to(tl.float32)[None, :]
    if ACTIVATION == 1:  # relu
        acc = tl.maximum(acc, 0.0)
    elif ACTIVATION == 2:  # gelu, exact erf form
        acc = 0.5 * acc * (1.0 + tl.erf(acc * _SQRT1_2))
    elif ACTIVATION == 3:  # silu
        acc = acc / (1.0 + tl.exp(-acc))
    return acc


@triton.jit
def gemm_kernel(
    a_ptr, b_ptr, bias_ptr, c_ptr,
    M, N, K, K_PER_SPLIT,
    stride_ab, stride_am, stride_ak,
    stride_bb, stride_bk, stride_bn,
    stride_cs, stride_cb, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr, NUM_XCDS: tl.constexpr,
    EVEN_K: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, LARGE_OFFSETS: tl.constexpr,
):
    """One (BLOCK_M, BLOCK_N) tile of one batch entry over one K range.

    The grid is 1-D: batch x tiles x SPLIT_K, so the XCD renumbering sees the exact
    dispatch order. With SPLIT_K == 1, ``c`` is the output and the epilogue runs
    here; otherwise ``c`` is an fp32 workspace (split, batch, M, N) of partials.
    """
    tl.assume(stride_ab >= 0)
    tl.assume(stride_am >= 0)
    tl.assume(stride_ak >= 0)
    tl.assume(stride_bb >= 0)
    tl.assume(stride_bk >= 0)
    tl.assume(stride_bn >= 0)
    tl.assume(stride_cm >= 0)
    tl.assume(stride_cn >= 0)

    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tiles = num_pid_m * num_pid_n
    pid = _xcd_contiguous(tl.program_id(0), tl.num_programs(0), NUM_XCDS)
    pid_k = pid % SPLIT_K
    tile_in_batch = (pid // SPLIT_K) % tiles
    batch = pid // (SPLIT_K * tiles)
    pid_m, pid_n = _grouped_tile(tile_in_batch, num_pid_m, num_pid_n, GROUP_M)
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    tl.assume(pid_k >= 0)

    # Rows/columns past the edge wrap around (modulo) instead of being masked, so
    # the loads stay unpredicated and wide; the store below drops those rows.
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    if LARGE_OFFSETS:  # one matrix spans 2**31 elements or more
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    k_start = pid_k * K_PER_SPLIT
    k_span = tl.minimum(K - k_start, K_PER_SPLIT)

    # The batch offset is 64-bit; offsets inside one matrix stay 32-bit (half the
    # VGPRs and integer ops per address) unless LARGE_OFFSETS.
    a_base = a_ptr + batch.to(tl.int64) * stride_ab + k_start.to(tl.int64) * stride_ak
    b_base = b_ptr + batch.to(tl.int64) * stride_bb + k_start.to(tl.int64) * stride_bk
    a_ptrs = a_base + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_base + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(k_span, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = k_span - k * BLOCK_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if LARGE_OFFSETS:
        rows = rows.to(tl.int64)
    if SPLIT_K == 1:
        acc = _epilogue(acc, bias_ptr, cols, N, HAS_BIAS, ACTIVATION)
    c_base = c_ptr + pid_k.to(tl.int64) * stride_cs + batch.to(tl.int64) * stride_cb
    c_ptrs = c_base + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def splitk_reduce_kernel(
    ws_ptr, bias_ptr, c_ptr,
    M, N,
    stride_ws, stride_wb, stride_wm,
    stride_cb, stride_cm, stride_cn,
    SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
):
    """Sum the SPLIT_K fp32 partials of one tile in a fixed order, then the epilogue."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    batch = tl.program_id(2).to(tl.int64)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    ws = ws_ptr + batch * stride_wb + rows[:, None].to(tl.int64) * stride_wm + cols[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(SPLIT_K):
        acc += tl.load(ws, mask=mask, other=0.0)
        ws += stride_ws
    acc = _epilogue(acc, bias_ptr, cols, N, HAS_BIAS, ACTIVATION)
    c_ptrs = c_ptr + batch * stride_cb + rows[:, None].to(tl.int64) * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)



# ----------------------------------------------------------------------------- configs


def lds_bytes(config, elem_bytes: int) -> int:
    """LDS the stream pipeliner allocates: one K-slab of A and B per stage past the first."""
    buffers = max(1, config["num_stages"] - 1)
    return (config["BLOCK_M"] + config["BLOCK_N"]) * config["BLOCK_K"] * elem_bytes * buffers


def lds_budget(config) -> int:
    """LDS one workgroup may take so that a CU holds enough of them for the asked
    occupancy: ``waves_per_eu`` waves on each of 4 SIMDs is
    ``waves_per_eu * 4 / num_warps`` workgroups sharing 64 KB."""
    workgroups = max(1, -(-config["waves_per_eu"] * 4 // config["num_warps"]))
    return LDS_BYTES // workgroups


def fit_to_dtype(config: dict, dtype: str) -> dict:
    """A 16-bit config made fit for ``dtype``: for fp32 operands, ``kpack=1`` (the XF32
    MFMA reads one K-pack per lane) and ``BLOCK_K`` halved until LDS fits the occupancy. The
    float32 entries of the table are the shape classes fitted so."""
    cfg = dict(config)
    if dtype == "float32":
        cfg["kpack"] = 1
        while lds_bytes(cfg, 4) > lds_budget(cfg) and cfg["BLOCK_K"] > 16:
            cfg["BLOCK_K"] //= 2
    return cfg


def target(problem, user=None) -> str:
    return cdna4.target(problem)


def heuristic(problem, user=None) -> dict:
    """Nothing on CDNA3, where the table's shape classes cover every problem; on CDNA4 those
    classes fitted to the gfx950 space."""
    return cdna4.config("gemm", problem, {}, problem.features())


def resolve(problem, impl, user):
    """The problem's shape class (and its float32 form) with config= over it, checked once; then,
    unless config= names SPLIT_K, the split for a grid that underfills the device's CUs."""
    from ceiling.op import resolve_tabled
    from ceiling.spaces.config import Config

    config = resolve_tabled(problem, impl, user)
    if isinstance(user, dict) and "SPLIT_K" in user:
        return config
    batch = 1 if problem.b_shared else (problem.batch or 1)
    tiles = batch * triton.cdiv(problem.rows, config["BLOCK_M"]) * triton.cdiv(problem.n, config["BLOCK_N"])
    split = _split_k(tiles, problem.k, config["BLOCK_K"], devices.num_cus(problem.gpu), MAX_SPLIT_K)
    return Config({**config, "SPLIT_K": split}, config.family, config.target, config.source)


def shape_class(problem) -> str:
    """The label of the gfx942 table's shape class that holds for ``problem``."""
    from ceiling import tables

    return tables.lookup("amd", "gemm", problem.gpu, TARGET_ARCH, problem.features()).labels[-1]


def _split_k(tiles: int, k: int, block_k: int, num_cus: int, max_split: int) -> int:
    """Double the split while the grid still underfills the CUs and each split keeps
    at least four K-blocks of work (fewer makes the partial traffic dominate)."""
    split = 1
    while split * 2 <= max_split and tiles * split * 2 <= num_cus and k >= split * 2 * 4 * block_k:
        split *= 2
    return split


def fp32_precision(arch: str) -> str:
    """``tl.dot`` input precision for fp32 operands: XF32 MFMA where CDNA3 has it."""
    return "tf32" if arch.startswith("gfx942") else "ieee"


# ----------------------------------------------------------------------------- launch


def _operand(x: torch.Tensor) -> torch.Tensor:
    """``x`` itself when one of its last two dims is unit-stride (row-major or ``.mT``)."""
    if x.stride(-1) == 1 or x.stride(-2) == 1 or 1 in x.shape[-2:]:
        return x
    return x.contiguous()


def _span(x: torch.Tensor) -> int:
    """Elements one matrix of ``x`` (its last two dims) reaches from its first."""
    return 1 + sum((size - 1) * stride for size, stride in zip(x.shape[-2:], x.stride()[-2:]))


def large_offsets(a: torch.Tensor, b: torch.Tensor, target: torch.Tensor, scm: int, scn: int, m: int, n: int,
                  cfg: dict) -> bool:
    """Whether the kernel needs 64-bit tile offsets: an operand spans 2^31 elements, or the output's tiles
    do. The last row and column tiles run past M and N and those lanes, masked out of the store, still
    form their offsets (``row * stride_cm`` wrapped in i32 at M = 18946, N = 111854 with 256-row tiles)."""
    rows = triton.cdiv(m, cfg["BLOCK_M"]) * cfg["BLOCK_M"]
    cols = triton.cdiv(n, cfg["BLOCK_N"]) * cfg["BLOCK_N"]
    tiles = 1 + (rows - 1) * scm + (cols - 1) * scn
    return max(_span(a), _span(b), _span(target), tiles) >= 2**31


def _strides3(x: torch.Tensor) -> tuple[int, int, int]:
    return (x.stride(0), x.stride(1), x.stride(2)) if x.dim() == 3 else (0, x.stride(0), x.stride(1))


def forward(problem, config, a: torch.Tensor, b: torch.Tensor, bias) -> tuple[torch.Tensor]:
    """``activation(a @ b + bias)`` cast to the output dtype with the resolved ``config``,
    compiled on a ROCm GPU, interpreted on the CPU.

    Operands are passed by strides, so transposed views are read in place. A 3-D ``a`` against
    a 2-D ``b`` becomes one (batch*M, K) product when ``a``'s rows stack (row-major,
    batch-contiguous); otherwise it stays batched with ``b``'s batch stride 0, again without a
    copy. ``SPLIT_K`` > 1 adds the reduction kernel.
    """
    cfg = config
    a, b = _operand(a), _operand(b)
    out = torch.empty(problem.out_shape, dtype=getattr(torch, problem.out_dtype), device=a.device)

    m, batch = problem.m, problem.batch or 1
    c_view = out if out.dim() == 3 else out.unsqueeze(0)
    if problem.b_shared and a.stride(-1) == 1 and a.stride(0) == m * a.stride(1):
        # One weight for the batch and rows that stack: one (batch*M, K) problem,
        # which fills MFMA tiles better than `batch` small ones.
        a = a.reshape(batch * m, a.shape[-1])
        c_view = out.reshape(1, batch * m, problem.n)
        m, batch = batch * m, 1
    # A shared 2-D b in a still-batched launch simply has batch stride 0.
    sab, sam, sak = _strides3(a)
    sbb, sbk, sbn = _strides3(b)
    n, k = problem.n, problem.k
    if batch * m * n == 0:
        return (out,)

    split = cfg["SPLIT_K"]
    bk = cfg["BLOCK_K"]
    k_per_split = triton.cdiv(triton.cdiv(max(k, 1), split), bk) * bk
    even_k = k % k_per_split == 0
    on_gpu = a.is_cuda
    precision = fp32_precision(problem.arch or TARGET_ARCH) if problem.dtype == "float32" else "ieee"
    num_xcds = devices.num_xcds(problem.gpu)
    options = {key: cfg[key] for key in COMPILE_KEYS}
    act = ACTIVATION_CODES[problem.activation]
    # The kernels read bias with unit stride (a strided view is copied: N elements);
    # without bias they get any pointer, never read when HAS_BIAS is False.
    bias_arg = bias.contiguous() if bias is not None else out

    tiles = triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"])
    grid = (batch * tiles * split,)
    if split == 1:
        target, (scs, scb, scm, scn) = c_view, (0, *c_view.stride())
    else:
        target = torch.empty((split, batch, m, n), dtype=torch.float32, device=a.device)
        scs, scb, scm, scn = target.stride()
    large = large_offsets(a, b, target, scm, scn, m, n, cfg)
    launcher(gemm_kernel, on_gpu=on_gpu)[grid](
        a, b, bias_arg, target,
        m, n, k, k_per_split,
        sab, sam, sak, sbb, sbk, sbn, scs, scb, scm, scn,
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=bk,
        GROUP_M=cfg["GROUP_M"], SPLIT_K=split, NUM_XCDS=num_xcds,
        EVEN_K=even_k, HAS_BIAS=bias is not None, ACTIVATION=act,
        INPUT_PRECISION=precision, LARGE_OFFSETS=large,
        **options,
    )
    if split > 1:
        rb = 64
        reduce_grid = (triton.cdiv(m, rb), triton.cdiv(n, rb), batch)
        launcher(splitk_reduce_kernel, on_gpu=on_gpu)[reduce_grid](
            target, bias_arg, c_view,
            m, n,
            target.stride(0), target.stride(1), target.stride(2),
            *c_view.stride(),
            SPLIT_K=split, BLOCK_M=rb, BLOCK_N=rb,
            HAS_BIAS=bias is not None, ACTIVATION=act,
            num_warps=4,
        )
    return (out,)
