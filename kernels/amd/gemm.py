"""GEMM for AMD CDNA3 (MI300X / MI325X, gfx942) in Triton: ``activation(a @ b + bias)``.

One tile per program, pointer loads, float32 accumulation on the MFMA units, and
the epilogue (bias, activation, cast) fused before the single store. Why this shape
suits CDNA3 rather than Hopper:

* **No TMA, no warpgroup MMA.** Operands move global -> VGPR -> LDS with ordinary
  vector loads (``global_load_dwordx4``), so the kernel addresses them with pointers
  and strides, which also serve transposed views (``x.mT``) without a copy: when a
  stride is 1, Triton specializes it and vectorizes along that dimension. Edge rows
  and columns wrap around (modulo) rather than being masked, so the loads stay wide.
* **LDS is 64 KB per CU.** With ``num_stages=2`` the AMD stream pipeliner keeps one
  K-slab of A and B in LDS while the next slab is already in flight in registers, so
  a workgroup takes ``(BLOCK_M + BLOCK_N) * BLOCK_K * bytes`` of LDS, and a CU holds
  ``64 KB`` over that many workgroups; the shipped configs size ``BLOCK_K`` so that
  LDS admits the occupancy ``waves_per_eu`` asks for (:func:`lds_budget`), and
  :func:`select_config` halves ``BLOCK_K`` for fp32 to stay within it.
* **MFMA 16x16 or 32x32** (``matrix_instr_nonkdim``): a 16x16x16 bf16 MFMA fits
  tiles of 16..64 rows without idle lanes; a 32x32x8 one does twice the MACs for the
  same operand registers, so it needs half the LDS reads per FLOP on square tiles. ``kpack=2`` makes each lane read two
  K-packs per LDS load (a wider ``ds_read``) for 16-bit inputs.
* **wave64 and ``waves_per_eu``.** A CU has four SIMDs with 512 registers per lane
  each (VGPRs and AGPRs share them); ``waves_per_eu=2`` tells the register allocator
  a wave may use 256 of them (two waves per SIMD), which big accumulators need;
  skinny tiles ask for more waves to hide memory latency. The largest tile is
  256x128 with 8 waves: 256x256 needs 128 accumulator registers per lane plus the
  prefetched operands and spills to scratch at 256 registers.
* **304 CUs on 8 XCDs, each with its own 4 MB L2.** The dispatcher deals workgroups
  round-robin over the XCDs, so neighbouring program ids land on different L2s. The
  kernel renumbers programs (:func:`_xcd_contiguous`) so that each XCD gets a
  contiguous run of the grouped tile order, and tiles sharing rows of A and columns
  of B share one L2.
* **Not persistent.** The hardware dispatcher refills CUs cheaply, there are no
  descriptors to amortize, and Triton on CDNA3 has no warp specialization to overlap
  an epilogue with the next mainloop, so a plain grid is the simpler choice (the
  ROCm tutorials and aiter's a16w16 kernel make the same one).
* **Split-K for skinny problems.** When the output has too few tiles to fill 304
  CUs and K is long, programs also split K; each writes an fp32 partial and a small
  second kernel sums them in a fixed order (deterministic) and runs the epilogue.

float32 inputs: on gfx942 ``tl.dot`` runs with ``input_precision="tf32"``, which
Triton lowers to the CDNA3 XF32 MFMA (``v_mfma_f32_*_xf32``: products of inputs
rounded to 10 mantissa bits, float32 accumulation), matching the TF32 contract of
``kernels.gemm``. Targets without XF32 (CDNA2, CDNA4) get ``"ieee"``, the exact
fp32 MFMA. The Triton interpreter computes float32 products exactly.
"""

from __future__ import annotations

from pathlib import Path

import torch
import triton
import triton.language as tl

from kernels import spaces
from kernels.amd import device_table
from kernels.gemm.spec import GemmProblem
from kernels.triton_runtime import launcher

CONFIG_PATH = Path(__file__).parent / "configs" / "gemm.json"
LDS_BYTES = 64 * 1024  # per CU on CDNA3
TARGET_ARCH = "gfx942"

ACTIVATION_CODES = {None: 0, "relu": 1, "gelu": 2, "silu": 3}
TILE_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K")
COMPILE_KEYS = ("num_warps", "num_stages", "waves_per_eu", "matrix_instr_nonkdim", "kpack")
CONFIG_KEYS = TILE_KEYS + COMPILE_KEYS


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
        acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
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


def _table() -> dict:
    return device_table.load(CONFIG_PATH)


def device_entry(device: str) -> dict:
    """The JSON entry of ``device``, with ``inherits`` resolved (child keys win)."""
    return device_table.device_entry(CONFIG_PATH, device)


def current_device() -> str:
    """The table key for the visible AMD GPU; MI300X off-device (the compile target)."""
    return device_table.current_device(CONFIG_PATH)


def lds_bytes(config: dict, elem_bytes: int) -> int:
    """LDS the stream pipeliner allocates: one K-slab of A and B per stage past the first."""
    buffers = max(1, config["num_stages"] - 1)
    return (config["BLOCK_M"] + config["BLOCK_N"]) * config["BLOCK_K"] * elem_bytes * buffers


def lds_budget(config: dict) -> int:
    """LDS one workgroup may take so that a CU holds enough of them for the asked
    occupancy: ``waves_per_eu`` waves on each of 4 SIMDs is
    ``waves_per_eu * 4 / num_warps`` workgroups sharing 64 KB."""
    workgroups = max(1, -(-config["waves_per_eu"] * 4 // config["num_warps"]))
    return LDS_BYTES // workgroups


def shape_class(problem: GemmProblem, device: str | None = None) -> str:
    """Which shipped config class an untuned shape gets: the first rule of the
    device's list whose bounds (``max_m``, ``max_n``, ``max_mn``, ``n_exceeds_m``)
    all hold for the effective M (the batch folded in when b is shared) and N."""
    entry = device_entry(device or current_device())
    m, n = _effective_m(problem), problem.n
    for rule in entry["rules"]:
        if (
            m <= rule.get("max_m", m)
            and n <= rule.get("max_n", n)
            and m * n <= rule.get("max_mn", m * n)
            and (n > m or not rule.get("n_exceeds_m", False))
        ):
            return rule["config"]
    raise AssertionError(f"no rule of {device} matches (the last rule must match everything)")


def _effective_m(problem: GemmProblem) -> int:
    return problem.m * (problem.batch or 1) if problem.b_shared else problem.m


def _split_k(tiles: int, k: int, block_k: int, num_cus: int, max_split: int) -> int:
    """Double the split while the grid still underfills the CUs and each split keeps
    at least four K-blocks of work (fewer makes the partial traffic dominate)."""
    split = 1
    while split * 2 <= max_split and tiles * split * 2 <= num_cus and k >= split * 2 * 4 * block_k:
        split *= 2
    return split


def select_config(problem: GemmProblem, device: str | None = None, config: dict | None = None) -> dict:
    """The config for ``problem``: its shape class on ``device``, fitted to the dtype's
    LDS budget, split-K chosen for underfilled grids; keys in ``config`` override. The user's
    keys and the result are checked against the gfx942 space (``kernels/spaces/gemm.json``)."""
    device = device or current_device()
    entry = device_entry(device)
    if config is not None:
        spaces.check("gemm", TARGET_ARCH, config, partial=True)
    chosen = fit_to_dtype(entry["configs"][shape_class(problem, device)], problem.dtype)
    chosen.setdefault("SPLIT_K", 1)
    if not (config and "SPLIT_K" in config) and entry.get("max_split_k", 1) > 1:
        bm = (config or {}).get("BLOCK_M", chosen["BLOCK_M"])
        bn = (config or {}).get("BLOCK_N", chosen["BLOCK_N"])
        bk = (config or {}).get("BLOCK_K", chosen["BLOCK_K"])
        m = _effective_m(problem)
        batch = 1 if problem.b_shared else (problem.batch or 1)
        tiles = batch * triton.cdiv(m, bm) * triton.cdiv(problem.n, bn)
        chosen["SPLIT_K"] = _split_k(tiles, problem.k, bk, entry["num_cus"], entry["max_split_k"])
    chosen.update(config or {})
    out = problem.out_dtype or problem.dtype
    spaces.check("gemm", TARGET_ARCH, chosen, {"M": problem.m, "N": problem.n, "K": problem.k,
                                               "dtype_bytes": _BYTES[problem.dtype], "out_dtype_bytes": _BYTES[out]})
    return chosen


_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


def fp32_precision(arch: str) -> str:
    """``tl.dot`` input precision for fp32 operands: XF32 MFMA where CDNA3 has it."""
    return "tf32" if arch.startswith("gfx942") else "ieee"


def _arch(x: torch.Tensor) -> str:
    if x.is_cuda:
        return torch.cuda.get_device_properties(x.device).gcnArchName.split(":")[0]
    return TARGET_ARCH


# ----------------------------------------------------------------------------- launch


def _operand(x: torch.Tensor) -> torch.Tensor:
    """``x`` itself when one of its last two dims is unit-stride (row-major or ``.mT``)."""
    if x.stride(-1) == 1 or x.stride(-2) == 1 or 1 in x.shape[-2:]:
        return x
    return x.contiguous()


def _span(x: torch.Tensor) -> int:
    """Elements one matrix of ``x`` (its last two dims) reaches from its first."""
    return 1 + sum((size - 1) * stride for size, stride in zip(x.shape[-2:], x.stride()[-2:]))


def _strides3(x: torch.Tensor) -> tuple[int, int, int]:
    return (x.stride(0), x.stride(1), x.stride(2)) if x.dim() == 3 else (0, x.stride(0), x.stride(1))


def gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str | None,
    out_dtype: torch.dtype,
    config: dict | None = None,
) -> torch.Tensor:
    """``activation(a @ b + bias)`` cast to ``out_dtype``; inputs already validated by
    ``kernels.gemm.spec``. Runs compiled on a ROCm GPU, interpreted on the CPU.

    Operands are passed by strides, so transposed views are read in place. A 3-D
    ``a`` against a 2-D ``b`` becomes one (batch*M, K) product when ``a``'s rows
    stack (row-major, batch-contiguous); otherwise it stays batched with ``b``'s
    batch stride 0, again without a copy. ``config`` keys (see ``CONFIG_KEYS``)
    override the selected config; ``SPLIT_K`` > 1 adds the reduction kernel.
    """
    from kernels.gemm.spec import check

    if isinstance(out_dtype, str):
        out_dtype = getattr(torch, out_dtype)
    problem = check(a, b, bias, activation, out_dtype)
    cfg = select_config(problem, config=config)
    a, b = _operand(a), _operand(b)
    out = torch.empty(problem.out_shape, dtype=out_dtype, device=a.device)

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
        return out

    split = cfg["SPLIT_K"]
    bk = cfg["BLOCK_K"]
    k_per_split = triton.cdiv(triton.cdiv(max(k, 1), split), bk) * bk
    even_k = k % k_per_split == 0
    on_gpu = a.is_cuda
    arch = _arch(a)
    precision = fp32_precision(arch) if problem.dtype == "float32" else "ieee"
    num_xcds = device_entry(current_device())["num_xcds"]
    options = {key: cfg[key] for key in COMPILE_KEYS}
    act = ACTIVATION_CODES[activation]
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
    large = max(_span(a), _span(b), _span(target)) >= 2**31
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
    return out


def gemm_jax(a, b, bias, activation, out_dtype, config=None):
    """The same kernel on JAX arrays on the CPU, interpreted through a host callback
    (``kernels.jax_bridge``); JAX on a ROCm GPU is refused there with the reason."""
    import jax

    from kernels.arrays import torch_dtype
    from kernels.jax_bridge import call_on_cpu

    result = jax.ShapeDtypeStruct((*a.shape[:-1], b.shape[-1]), out_dtype)
    args = (a, b) if bias is None else (a, b, bias)

    def run(x, y, z=None):
        return gemm(x, y, z, activation, torch_dtype(str(out_dtype)), config)

    return call_on_cpu(run, result, *args, backend="amd")


# ----------------------------------------------------------------------------- compile specs

_TRITON_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def fit_to_dtype(config: dict, dtype: str) -> dict:
    """A 16-bit config made fit for ``dtype``: for fp32 operands, ``kpack=1`` (the XF32
    MFMA reads one K-pack per lane) and ``BLOCK_K`` halved until LDS fits the occupancy."""
    cfg = dict(config)
    if torch.empty((), dtype=getattr(torch, dtype)).element_size() == 4:
        cfg["kpack"] = 1
        while lds_bytes(cfg, 4) > lds_budget(cfg) and cfg["BLOCK_K"] > 16:
            cfg["BLOCK_K"] //= 2
    return cfg


def kernel_signature(dtype: str, config: dict, *, activation: str | None = "gelu", bias: bool = True,
                     transposed_a: bool = False, transposed_b: bool = False, out_dtype: str | None = None,
                     even_k: bool = True):
    """(signature, constexprs, divisible_by_16) for compiling ``gemm_kernel`` as a
    launch with these operands would specialize it: the unit strides become constants
    (that is what makes the loads wide), pointers are 16-byte aligned, and N, K and
    the leading strides are multiples of 16."""
    t = _TRITON_DTYPES[dtype]
    out = _TRITON_DTYPES[out_dtype or dtype] if config.get("SPLIT_K", 1) == 1 else "fp32"
    unit = {"stride_ak": not transposed_a, "stride_am": transposed_a,
            "stride_bn": not transposed_b, "stride_bk": transposed_b, "stride_cn": True}
    signature = {"a_ptr": f"*{t}", "b_ptr": f"*{t}", "bias_ptr": f"*{t}", "c_ptr": f"*{out}"}
    for name in ("M", "N", "K", "K_PER_SPLIT", "stride_ab", "stride_am", "stride_ak", "stride_bb",
                 "stride_bk", "stride_bn", "stride_cs", "stride_cb", "stride_cm", "stride_cn"):
        signature[name] = "constexpr" if unit.get(name) else "i32"
    constexprs = {name: 1 for name, is_unit in unit.items() if is_unit}
    constexprs.update(
        BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"], BLOCK_K=config["BLOCK_K"],
        GROUP_M=config["GROUP_M"], SPLIT_K=config.get("SPLIT_K", 1), NUM_XCDS=8,
        EVEN_K=even_k, HAS_BIAS=bias, ACTIVATION=ACTIVATION_CODES[activation],
        INPUT_PRECISION=fp32_precision(TARGET_ARCH) if dtype == "float32" else "ieee",
        LARGE_OFFSETS=False,
    )
    for name in constexprs:
        signature[name] = "constexpr"
    aligned = tuple(n for n, ty in signature.items() if ty.startswith("*") or (ty == "i32" and n != "M"))
    return signature, constexprs, aligned


def compile_specs(dtype: str = "bfloat16") -> list:
    """A ``kernels.isa.CompileSpec`` per shipped config class of the default device (row-major operands,
    bias + gelu epilogue, the heaviest on registers), plus the split-K partial-product
    variant and the split-K reduction."""
    from kernels.isa import CompileSpec

    entry = device_entry(_table()["default_device"])
    specs = []
    for name, config in entry["configs"].items():
        cfg = fit_to_dtype(config, dtype)
        signature, constexprs, aligned = kernel_signature(dtype, cfg)
        options = {key: cfg[key] for key in COMPILE_KEYS}
        specs.append(CompileSpec(f"amd_gemm_{name}_{dtype}", gemm_kernel, signature, constexprs, options,
                                 config={"class": name, **cfg}, divisible_by_16=aligned))
    # Split-K: the partial-product variant of the skinniest class (fp32 workspace out).
    cfg = {**fit_to_dtype(entry["configs"]["skinny_m16"], dtype), "SPLIT_K": 4}
    signature, constexprs, aligned = kernel_signature(dtype, cfg)
    specs.append(CompileSpec(f"amd_gemm_skinny_m16_splitk4_{dtype}", gemm_kernel, signature, constexprs,
                             {key: cfg[key] for key in COMPILE_KEYS}, config={"class": "skinny_m16", **cfg},
                             divisible_by_16=aligned))
    t = _TRITON_DTYPES[dtype]
    signature = {"ws_ptr": "*fp32", "bias_ptr": f"*{t}", "c_ptr": f"*{t}", "M": "i32", "N": "i32",
                 "stride_ws": "i32", "stride_wb": "i32", "stride_wm": "i32", "stride_cb": "i32", "stride_cm": "i32",
                 "stride_cn": "constexpr"}
    constexprs = {"stride_cn": 1, "SPLIT_K": 4, "BLOCK_M": 64, "BLOCK_N": 64, "HAS_BIAS": True, "ACTIVATION": 2}
    for name in constexprs:
        signature[name] = "constexpr"
    aligned = tuple(n for n in signature if signature[n] != "constexpr" and n != "M")
    specs.append(CompileSpec(f"amd_gemm_splitk_reduce_{dtype}", splitk_reduce_kernel, signature, constexprs,
                             {"num_warps": 4}, config={"class": "splitk_reduce", "SPLIT_K": 4},
                             divisible_by_16=aligned))
    return specs


def compile_spec(config: dict, dtype: str = "bfloat16"):
    """The ``kernels.isa.CompileSpec`` of one config (any point of a search space), row-major
    operands with the bias + gelu epilogue like the shipped specs."""
    from kernels.isa import CompileSpec

    cfg = {"SPLIT_K": 1, **config}
    signature, constexprs, aligned = kernel_signature(dtype, cfg)
    name = "amd_gemm_{}x{}x{}_g{}_s{}_w{}_wpe{}_mi{}_kp{}_sk{}_{}".format(
        cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["GROUP_M"], cfg["num_stages"], cfg["num_warps"],
        cfg["waves_per_eu"], cfg["matrix_instr_nonkdim"], cfg["kpack"], cfg["SPLIT_K"], dtype)
    return CompileSpec(name, gemm_kernel, signature, constexprs, {key: cfg[key] for key in COMPILE_KEYS},
                       config=dict(cfg), divisible_by_16=aligned)
