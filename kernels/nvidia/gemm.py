"""GEMM for Hopper (sm_90a) in Triton: persistent, TMA-fed, wgmma, fused epilogue.

The kernel follows the shape of an expert Hopper GEMM:

* **Persistent over output tiles.** One program per SM walks the tile list with
  stride ``NUM_SMS``, so launch and prologue costs are paid once per SM and the
  next tile's loads overlap the previous tile's epilogue (``flatten=True`` lets
  the software pipeliner run across the tile boundary).
* **Grouped tile order.** Tiles are visited in column groups of ``GROUP_M`` rows
  so that a wave of SMs shares A row-panels and B column-panels in L2.
* **TMA tensor descriptors** (host-side ``TensorDescriptor``) move A and B tiles
  into shared memory with the bulk-copy engine, out-of-bounds rows and columns
  zero-filled, so odd sizes need no masks; ``num_stages`` buffers deep.
* **wgmma** through ``tl.dot`` with fp32 accumulators in registers; a transposed
  operand is loaded in its stored (K-major) layout and transposed in shared memory,
  which wgmma reads directly for 16-bit types.
* **Fused epilogue**: bias (fp32), relu / gelu (erf) / silu, cast, and a TMA store,
  optionally in two halves (``EPILOGUE_SUBTILE``) to halve the epilogue's shared
  memory and registers.
* **Warp specialization** (``WARP_SPECIALIZE``) splits producer and consumer
  warps where the installed Triton supports it for the target.

Configs per device and shape live in ``configs/gemm.json``; shapes nobody tuned
get :func:`heuristic_config`. ``config="autotune"`` is resolved above this module: the GEMM
front end asks :mod:`kernels.tuning.autotune` (which times the candidates on the device and
persists the winner) and passes the winning config here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
import functools
from functools import cache
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

from kernels import spaces
from kernels.triton_runtime import launcher

CONFIG_FILE = Path(__file__).with_name("configs") / "gemm.json"
TARGET = "sm_90a"
CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_stages", "num_warps", "EPILOGUE_SUBTILE",
               "WARP_SPECIALIZE", "SPLIT_K")


@triton.jit
def grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of ``tile_id`` in grouped order: GROUP_M tile-rows per column sweep."""
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr):
    """bias and activation on the fp32 accumulator tile."""
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
        acc = acc + bias[None, :]
    if ACTIVATION == "relu":
        acc = tl.maximum(acc, 0.0)
    elif ACTIVATION == "gelu":
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    elif ACTIVATION == "silu":
        acc = acc * tl.sigmoid(acc)
    return acc


@triton.jit
def load_a(a, batch, offs_m, offs_k, M, K, stride_ab, stride_am, stride_ak,
           BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
           A_TRANS: tl.constexpr, BATCHED: tl.constexpr, USE_TMA: tl.constexpr):
    """A tile (BLOCK_M, BLOCK_K).

    With TMA, ``a`` is a tensor descriptor; a transposed A is stored (K, M) and
    loaded as such. Without (the JAX path, see ``gemm_jax``), ``a`` is a pointer
    and the strides place the tile; masks zero the out-of-bounds part.
    """
    if USE_TMA:
        if A_TRANS:
            if BATCHED:
                t = a.load([batch, offs_k, offs_m]).reshape(BLOCK_K, BLOCK_M)
            else:
                t = a.load([offs_k, offs_m])
            return t.T
        else:
            if BATCHED:
                return a.load([batch, offs_m, offs_k]).reshape(BLOCK_M, BLOCK_K)
            else:
                return a.load([offs_m, offs_k])
    else:
        rm = offs_m + tl.arange(0, BLOCK_M)
        rk = offs_k + tl.arange(0, BLOCK_K)
        ptrs = a + batch * stride_ab + rm[:, None] * stride_am + rk[None, :] * stride_ak
        return tl.load(ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)


@triton.jit
def load_b(b, batch, offs_k, offs_n, K, N, stride_bb, stride_bk, stride_bn,
           BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr,
           B_TRANS: tl.constexpr, BATCHED: tl.constexpr, USE_TMA: tl.constexpr):
    """B tile (BLOCK_K, BLOCK_N); a transposed B (an nn.Linear weight) is stored (N, K)."""
    if USE_TMA:
        if B_TRANS:
            if BATCHED:
                t = b.load([batch, offs_n, offs_k]).reshape(BLOCK_N, BLOCK_K)
            else:
                t = b.load([offs_n, offs_k])
            return t.T
        else:
            if BATCHED:
                return b.load([batch, offs_k, offs_n]).reshape(BLOCK_K, BLOCK_N)
            else:
                return b.load([offs_k, offs_n])
    else:
        rk = offs_k + tl.arange(0, BLOCK_K)
        rn = offs_n + tl.arange(0, BLOCK_N)
        ptrs = b + batch * stride_bb + rk[:, None] * stride_bk + rn[None, :] * stride_bn
        return tl.load(ptrs, mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)


@triton.jit
def store_c(c, batch, offs_m, offs_n, tile, rows, N, stride_cb, stride_cm,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BATCHED: tl.constexpr, USE_TMA: tl.constexpr):
    """Store a (BLOCK_M, BLOCK_N) tile at (offs_m, offs_n); ``rows`` bounds the rows written."""
    if USE_TMA:
        if BATCHED:
            c.store([batch, offs_m, offs_n], tile.reshape(1, BLOCK_M, BLOCK_N))
        else:
            c.store([offs_m, offs_n], tile)
    else:
        rm = offs_m + tl.arange(0, BLOCK_M)
        rn = offs_n + tl.arange(0, BLOCK_N)
        ptrs = c + batch * stride_cb + rm[:, None] * stride_cm + rn[None, :]
        tl.store(ptrs, tile, mask=(rm[:, None] < rows) & (rn[None, :] < N))


@triton.jit
def gemm_kernel(
    a, b, c, bias_ptr,
    M, N, K, BATCH, PLANE_ROWS,
    stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn, stride_cb, stride_cm,
    A_TRANS: tl.constexpr, B_TRANS: tl.constexpr, BATCHED: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, SPLIT_K: tl.constexpr,
    USE_TMA: tl.constexpr,
):
    start_pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    k_tiles_per_split = tl.cdiv(k_tiles, SPLIT_K)
    tiles_per_batch = num_pid_m * num_pid_n
    num_tiles = tiles_per_batch * BATCH
    # With SPLIT_K > 1 each work item is (K slice, tile); the slices' fp32 partial
    # tiles go to a workspace of SPLIT_K stacked planes of PLANE_ROWS (= M) rows that
    # splitk_reduce_kernel sums and finishes. A plane is addressed as the leading
    # index of a 3-D (SPLIT_K, M, N) view, so rows past M (most of a tile when M is
    # skinny) are clipped instead of written.
    num_items = num_tiles * SPLIT_K
    if USE_TMA:
        out_dtype = c.dtype
    else:
        out_dtype = c.dtype.element_ty

    # The epilogue trails the main loop by one tile in the flattened schedule, so it
    # recomputes its own tile coordinates from a second counter.
    tile_id_c = start_pid - NUM_SMS
    # Flattening lets the TMA pipeline run across tiles; the pointer path pipelines only
    # its K loop (cp.async), which flattening would prevent.
    for item in tl.range(start_pid, num_items, NUM_SMS, flatten=USE_TMA, warp_specialize=WARP_SPECIALIZE):
        tile_id = item % num_tiles
        k_first = (item // num_tiles) * k_tiles_per_split
        k_last = min(k_first + k_tiles_per_split, k_tiles)
        batch = tile_id // tiles_per_batch
        pid_m, pid_n = grouped_tile(tile_id % tiles_per_batch, num_pid_m, num_pid_n, GROUP_M)
        offs_am = pid_m * BLOCK_M
        offs_bn = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_first, k_last):
            offs_k = ki * BLOCK_K
            a_tile = load_a(a, batch, offs_am, offs_k, M, K, stride_ab, stride_am, stride_ak,
                            BLOCK_M, BLOCK_K, A_TRANS, BATCHED, USE_TMA)
            b_tile = load_b(b, batch, offs_k, offs_bn, K, N, stride_bb, stride_bk, stride_bn,
                            BLOCK_K, BLOCK_N, B_TRANS, BATCHED, USE_TMA)
            acc = tl.dot(a_tile, b_tile, acc)

        tile_id_c += NUM_SMS
        split_c = tile_id_c // num_tiles
        batch_c = (tile_id_c % num_tiles) // tiles_per_batch
        pid_m, pid_n = grouped_tile(tile_id_c % tiles_per_batch, num_pid_m, num_pid_n, GROUP_M)
        offs_cm = pid_m * BLOCK_M
        offs_cn = pid_n * BLOCK_N
        if SPLIT_K > 1:  # a partial sum: no epilogue yet
            store_c(c, split_c, offs_cm, offs_cn, acc, M, N, PLANE_ROWS * stride_cm, stride_cm,
                    BLOCK_M, BLOCK_N, True, USE_TMA)
        elif EPILOGUE_SUBTILE:
            halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            acc0, acc1 = tl.split(halves)
            offs_n0 = offs_cn + tl.arange(0, BLOCK_N // 2)
            c0 = epilogue(acc0, bias_ptr, offs_n0, N, HAS_BIAS, ACTIVATION).to(out_dtype)
            store_c(c, batch_c, offs_cm, offs_cn, c0, M, N, stride_cb, stride_cm,
                    BLOCK_M, BLOCK_N // 2, BATCHED, USE_TMA)
            c1 = epilogue(acc1, bias_ptr, offs_n0 + BLOCK_N // 2, N, HAS_BIAS, ACTIVATION).to(out_dtype)
            store_c(c, batch_c, offs_cm, offs_cn + BLOCK_N // 2, c1, M, N, stride_cb, stride_cm,
                    BLOCK_M, BLOCK_N // 2, BATCHED, USE_TMA)
        else:
            offs_n = offs_cn + tl.arange(0, BLOCK_N)
            tile = epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION).to(out_dtype)
            store_c(c, batch_c, offs_cm, offs_cn, tile, M, N, stride_cb, stride_cm,
                    BLOCK_M, BLOCK_N, BATCHED, USE_TMA)


@triton.jit
def splitk_reduce_kernel(ws_ptr, c_ptr, bias_ptr, M, N, PLANE_ROWS, stride_ws, stride_cm,
                         SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Sum the SPLIT_K partial planes, then bias, activation and cast."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for split in range(SPLIT_K):
        rows = split * PLANE_ROWS + offs_m
        acc += tl.load(ws_ptr + rows[:, None] * stride_ws + offs_n[None, :], mask=mask, other=0.0)
    acc = epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


# --------------------------------------------------------------------------- configs


def cdiv(a: int, b: int) -> int:
    """Host-side ceil division (``triton.cdiv`` is a slower constexpr-function wrapper on the host)."""
    return -(-a // b)


@dataclass(frozen=True)
class GemmConfig:
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int = 8
    num_stages: int = 3
    num_warps: int = 8
    EPILOGUE_SUBTILE: bool = False
    WARP_SPECIALIZE: bool = False
    SPLIT_K: int = 1  # K slices for skinny M; >1 adds a reduction launch

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "GemmConfig":
        """A whole config (a table entry, a point of the search space), checked against the
        space (``kernels/spaces/gemm.json``, target sm_90a)."""
        spaces.check("gemm", TARGET, d)
        return cls(**d)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in CONFIG_KEYS}

    def shared_memory_bytes(self, elem_bytes: int, out_bytes: int) -> int:
        """Pipeline buffers plus the epilogue's staging tile (what TMA stores read)."""
        stages = self.num_stages * (self.BLOCK_M + self.BLOCK_N) * self.BLOCK_K * elem_bytes
        epilogue_cols = self.BLOCK_N // 2 if self.EPILOGUE_SUBTILE else self.BLOCK_N
        staged_bytes = 4 if self.SPLIT_K > 1 else out_bytes  # split-K stages fp32 partials
        return stages + self.BLOCK_M * epilogue_cols * staged_bytes


# Hopper: 228 KiB of shared memory per SM, 227 KiB usable by one block.
SMEM_LIMIT_SM90 = 227 * 1024


@cache
def _config_table() -> dict[str, Any]:
    return json.loads(CONFIG_FILE.read_text())


def device_key(name: str | None) -> str | None:
    """The table key for a device name ('NVIDIA H200' -> 'H200', 'NVIDIA H100 80GB HBM3' -> 'H100')."""
    if not name:
        return None
    for key in _config_table()["devices"]:
        if key.lower() in name.lower():
            return key
    return None


H100_H200_SMS = 132


def heuristic_config(m: int, n: int, k: int, dtype: str) -> GemmConfig:
    """A config for a shape nobody tuned, from the shape class.

    wgmma wants BLOCK_M a multiple of 64 per warpgroup and a wide BLOCK_N; a tile
    grid that leaves most SMs idle is worse than a smaller tile. Skinny M (decode,
    small batches) is bound by streaming B: narrow tiles and split-K give every SM
    a share of B to stream.
    """
    if dtype == "float32":  # 4-byte operands: half the K depth for the same shared memory
        return GemmConfig(128, 128, 32, 8, 3, 8) if m > 256 else GemmConfig(64, 64, 64, 8, 3, 4)
    if m <= 256:
        tiles = cdiv(m, 64) * cdiv(n, 64)
        k_tiles = cdiv(k, 128)
        split = 1
        while split < 8 and tiles * split * 2 <= 2 * H100_H200_SMS and k_tiles >= 4 * split * 2:
            split *= 2
        return GemmConfig(64, 64, 128, 8, 5, 4, SPLIT_K=split)
    if cdiv(m, 128) * cdiv(n, 256) >= H100_H200_SMS:
        return GemmConfig(128, 256, 64, 8, 3, 8, EPILOGUE_SUBTILE=True)
    if cdiv(m, 128) * cdiv(n, 128) >= H100_H200_SMS:
        return GemmConfig(128, 128, 64, 8, 5, 8)
    return GemmConfig(64, 128, 64, 8, 4, 4)


@functools.lru_cache(maxsize=4096)
def select_config(m: int, n: int, k: int, dtype: str, device_name: str | None) -> tuple[GemmConfig, str]:
    """(config, where it came from): the device's tuned table, else the heuristic."""
    key = device_key(device_name)
    if key is not None:
        for entry in _config_table()["devices"][key]:
            if entry["dtype"] == dtype and tuple(entry["shape"]) == (m, n, k):
                return GemmConfig.from_dict(entry["config"]), f"tuned:{key}"
    return heuristic_config(m, n, k, dtype), "heuristic"


def resolve_config(m: int, n: int, k: int, dtype: str, device_name: str | None, config: dict | None = None,
                   out_dtype: str | None = None) -> GemmConfig:
    """The config a problem runs with: ``config`` (checked against the sm_90a space: keys,
    domains, the shared memory of this dtype) over the table's entry for this shape, else the
    heuristic's. A partial config overrides the keys it names and keeps the others."""
    base, _ = select_config(m, n, k, dtype, device_name)
    if config is None:
        return base
    context = {"M": m, "N": n, "K": k, "dtype_bytes": _BYTES[dtype], "out_dtype_bytes": _BYTES[out_dtype or dtype]}
    return GemmConfig(**spaces.resolve("gemm", TARGET, base.as_dict(), config, context))


_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


def shipped_configs(dtype: str = "bfloat16") -> list[GemmConfig]:
    """Every distinct config the table ships for ``dtype``, plus the heuristic's."""
    seen: dict[GemmConfig, None] = {}
    for entries in _config_table()["devices"].values():
        for entry in entries:
            if entry["dtype"] == dtype:
                seen[GemmConfig.from_dict(entry["config"])] = None
    for shape in ((16, 4096, 4096), (128, 4096, 4096), (512, 512, 512), (1024, 2048, 1024), (2048, 2048, 2048), (4096, 4096, 4096)):
        seen[heuristic_config(*shape, dtype)] = None
    return list(seen)


# --------------------------------------------------------------------------- launch

TMA_ALIGN = 16  # bytes: TMA needs 16-byte aligned base and strides


def _aligned(x: torch.Tensor) -> bool:
    item = x.element_size()
    return x.data_ptr() % TMA_ALIGN == 0 and all((s * item) % TMA_ALIGN == 0 for s in x.stride()[:-1])


def _tma_storage(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(a unit-last-stride view TMA can read, whether x is the transpose of it)."""
    if x.stride(-1) == 1 and (x.shape[-2] == 1 or x.stride(-2) >= x.shape[-1]):
        view, trans = x, False
    elif x.stride(-2) == 1:
        view, trans = x.mT, True
    else:
        view, trans = x.contiguous(), False
    if not _aligned(view):
        view = _pad_rows(view)
    return view, trans


def _pad_rows(x: torch.Tensor, copy: bool = True) -> torch.Tensor:
    """A view like x whose rows start on 16-byte boundaries (odd sizes only), holding x if ``copy``."""
    per_row = TMA_ALIGN // x.element_size()
    cols = x.shape[-1]
    padded = cdiv(cols, per_row) * per_row
    storage = torch.empty((*x.shape[:-1], padded), dtype=x.dtype, device=x.device)
    view = storage[..., :cols]
    if copy:
        view.copy_(x)
    return view


def _descriptor(t: torch.Tensor, block: list[int]):
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor.from_tensor(t, block)


@cache
def _device_name(device_index: int) -> str:
    return torch.cuda.get_device_name(device_index)


@cache
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


# The interpreter runs programs one after another: a few persistent programs
# exercise the tile loop (several tiles per program) without wasting time.
INTERPRETED_PROGRAMS = 3


def gemm(a: torch.Tensor, b: torch.Tensor, bias, activation, out_dtype, config=None) -> torch.Tensor:
    """``activation(a @ b + bias)`` on the Hopper kernel (interpreted on CPU tensors).

    Arguments are validated by ``kernels.gemm.spec``; ``out_dtype`` is a torch dtype
    and ``config`` a dict of :data:`CONFIG_KEYS` (or None for the table/heuristic); a partial
    one overrides the keys it names (:func:`resolve_config`).
    """
    on_gpu = a.is_cuda
    out = torch.empty((*a.shape[:-1], b.shape[-1]), dtype=out_dtype, device=a.device)
    if a.dim() == 3 and b.dim() == 2:
        # One weight for the whole batch: fold the batch into M.
        a = a if a.stride(-1) == 1 and a.stride(0) == a.shape[1] * a.stride(1) else a.contiguous()
        a = a.reshape(-1, a.shape[-1])
    c = out.view(-1, out.shape[-1]) if a.dim() == 2 else out
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batched = a.dim() == 3
    nbatch = a.shape[0] if batched else 1
    if out.numel() == 0:
        return out
    if k == 0:  # an empty sum: the epilogue of a zero accumulator
        from kernels.gemm.reference import activate_torch

        z = torch.zeros(out.shape, dtype=torch.float32, device=out.device)
        return out.copy_(activate_torch(z + bias.float() if bias is not None else z, activation))

    dtype = str(a.dtype).removeprefix("torch.")
    cfg = resolve_config(m, n, k, dtype, _device_name(a.device.index or 0) if on_gpu else None, config,
                         str(out_dtype).removeprefix("torch."))

    split_k = cfg.SPLIT_K if not batched else 1  # batched problems have parallelism to spare
    a_view, a_trans = _tma_storage(a)
    b_view, b_trans = _tma_storage(b)
    if split_k > 1:
        # fp32 partial planes of m rows; N padded so each row starts on a 16-byte boundary.
        target = _pad_rows(torch.empty((split_k * m, n), dtype=torch.float32, device=a.device), copy=False)
    else:
        target = c if _aligned(c) else _pad_rows(c, copy=False)

    lead = [1] if batched else []
    a_block = lead + ([cfg.BLOCK_K, cfg.BLOCK_M] if a_trans else [cfg.BLOCK_M, cfg.BLOCK_K])
    b_block = lead + ([cfg.BLOCK_N, cfg.BLOCK_K] if b_trans else [cfg.BLOCK_K, cfg.BLOCK_N])
    subtile = cfg.EPILOGUE_SUBTILE and split_k == 1
    c_block = lead + [cfg.BLOCK_M, cfg.BLOCK_N // 2 if subtile else cfg.BLOCK_N]

    num_items = cdiv(m, cfg.BLOCK_M) * cdiv(n, cfg.BLOCK_N) * nbatch * split_k
    programs = _sm_count(a.device.index or 0) if on_gpu else INTERPRETED_PROGRAMS
    num_sms = max(1, min(programs, num_items))
    bias_arg = bias if bias is not None else target  # never read when HAS_BIAS is False

    if split_k > 1:
        from triton.tools.tensor_descriptor import TensorDescriptor

        row = target.stride(0)
        c_desc = TensorDescriptor(target, [split_k, m, n], [m * row, row, 1], [1, cfg.BLOCK_M, cfg.BLOCK_N])
    else:
        c_desc = _descriptor(target, c_block)
    launcher(gemm_kernel, on_gpu=on_gpu)[(num_sms,)](
        _descriptor(a_view, a_block), _descriptor(b_view, b_block), c_desc, bias_arg,
        m, n, k, nbatch, m,
        0, 0, 0, 0, 0, 0, 0, 0,  # strides: only the pointer (non-TMA) path reads them
        A_TRANS=a_trans, B_TRANS=b_trans, BATCHED=batched, USE_TMA=True,
        HAS_BIAS=bias is not None, ACTIVATION=activation or "none",
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, GROUP_M=cfg.GROUP_M,
        NUM_SMS=num_sms, EPILOGUE_SUBTILE=subtile, WARP_SPECIALIZE=cfg.WARP_SPECIALIZE, SPLIT_K=split_k,
        num_stages=cfg.num_stages, num_warps=cfg.num_warps,
    )
    if split_k > 1:
        grid = (cdiv(m, 32), cdiv(n, 128))
        launcher(splitk_reduce_kernel, on_gpu=on_gpu)[grid](
            target, c, bias_arg, m, n, m, target.stride(0), c.stride(0),
            SPLIT_K=split_k, HAS_BIAS=bias is not None, ACTIVATION=activation or "none",
            BLOCK_M=32, BLOCK_N=128, num_warps=4,
        )
    elif target.data_ptr() != c.data_ptr():
        c.copy_(target)
    return out


# --------------------------------------------------------------------------- static inspection

_TRITON_DTYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


def compile_specs(dtype: str = "bfloat16", b_trans: bool = False) -> list:
    """A ``kernels.isa.CompileSpec`` per shipped config, for the 2-D row-major case."""
    return [compile_spec(cfg.as_dict(), dtype, b_trans) for cfg in shipped_configs(dtype)]


def compile_spec(config: dict[str, Any], dtype: str = "bfloat16", b_trans: bool = False):
    """The ``kernels.isa.CompileSpec`` of one config (any point of the search space)."""
    from kernels.isa import CompileSpec

    cfg = GemmConfig.from_dict(config)
    t = _TRITON_DTYPE[dtype]
    c_cols = cfg.BLOCK_N // 2 if cfg.EPILOGUE_SUBTILE and cfg.SPLIT_K == 1 else cfg.BLOCK_N
    b_block = [cfg.BLOCK_N, cfg.BLOCK_K] if b_trans else [cfg.BLOCK_K, cfg.BLOCK_N]
    signature = {
        "a": f"tensordesc<{t}[{cfg.BLOCK_M},{cfg.BLOCK_K}]>",
        "b": f"tensordesc<{t}[{b_block[0]},{b_block[1]}]>",
        # split-K stores fp32 partials into a 3-D (SPLIT_K, M, N) view of its workspace
        "c": (f"tensordesc<fp32[1,{cfg.BLOCK_M},{c_cols}]>" if cfg.SPLIT_K > 1
              else f"tensordesc<{t}[{cfg.BLOCK_M},{c_cols}]>"),
        "bias_ptr": f"*{t}",
        "M": "i32", "N": "i32", "K": "i32", "BATCH": "i32", "PLANE_ROWS": "i32",
    }
    for stride in ("stride_ab", "stride_am", "stride_ak", "stride_bb", "stride_bk", "stride_bn", "stride_cb", "stride_cm"):
        signature[stride] = "i32"
    constexprs = {
        "A_TRANS": False, "B_TRANS": b_trans, "BATCHED": False, "HAS_BIAS": True, "ACTIVATION": "gelu",
        "BLOCK_M": cfg.BLOCK_M, "BLOCK_N": cfg.BLOCK_N, "BLOCK_K": cfg.BLOCK_K, "GROUP_M": cfg.GROUP_M,
        "NUM_SMS": 132, "EPILOGUE_SUBTILE": cfg.EPILOGUE_SUBTILE and cfg.SPLIT_K == 1,
        "WARP_SPECIALIZE": cfg.WARP_SPECIALIZE, "SPLIT_K": cfg.SPLIT_K, "USE_TMA": True,
    }
    for key in constexprs:
        signature[key] = "constexpr"
    name = "gemm_{}x{}x{}_g{}_s{}_w{}{}{}{}".format(
        cfg.BLOCK_M, cfg.BLOCK_N, cfg.BLOCK_K, cfg.GROUP_M, cfg.num_stages, cfg.num_warps,
        "_sub" if cfg.EPILOGUE_SUBTILE else "", "_ws" if cfg.WARP_SPECIALIZE else "",
        f"_splitk{cfg.SPLIT_K}" if cfg.SPLIT_K > 1 else "",
    )
    return CompileSpec(name, gemm_kernel, signature, constexprs,
                       {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}, cfg.as_dict())


@triton.jit
def gemm_kernel_jax(
    a, b, bias_ptr, M, N, K, BATCH, PLANE_ROWS,
    stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn, stride_cb, stride_cm,
    c,
    BATCHED: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, SPLIT_K: tl.constexpr,
):
    """gemm_kernel with jax-triton's argument order (outputs after inputs), on pointers."""
    gemm_kernel(a, b, c, bias_ptr, M, N, K, BATCH, PLANE_ROWS,
                stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn, stride_cb, stride_cm,
                False, False, BATCHED, HAS_BIAS, ACTIVATION, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_SMS,
                EPILOGUE_SUBTILE, WARP_SPECIALIZE, SPLIT_K, False)


@triton.jit
def splitk_reduce_kernel_jax(ws_ptr, bias_ptr, M, N, PLANE_ROWS, stride_ws, stride_cm, c_ptr,
                             SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    splitk_reduce_kernel(ws_ptr, c_ptr, bias_ptr, M, N, PLANE_ROWS, stride_ws, stride_cm,
                         SPLIT_K, HAS_BIAS, ACTIVATION, BLOCK_M, BLOCK_N)


def gemm_jax(a, b, bias, activation, out_dtype, config=None):
    """The same kernel on JAX arrays: through jax-triton on a GPU, interpreted through a
    host callback on a CPU.

    jax-triton passes plain pointers (it cannot build TMA descriptors), so on a GPU
    the kernel runs with ``USE_TMA=False``: the same persistent schedule, wgmma and
    epilogue, with tiles loaded by masked pointer loads that Triton pipelines with
    cp.async.
    """
    import jax

    if jax.default_backend() == "gpu":
        return _gemm_jax_triton(a, b, bias, activation, out_dtype, config)
    from kernels.arrays import torch_dtype
    from kernels.jax_bridge import call_on_cpu

    shape = (*a.shape[:-1], b.shape[-1])
    result = jax.ShapeDtypeStruct(shape, out_dtype)
    args = (a, b) if bias is None else (a, b, bias)

    def run(x, y, z=None):
        return gemm(x, y, z, activation, torch_dtype(str(out_dtype)), config)

    return call_on_cpu(run, result, *args, backend="nvidia")


def _gemm_jax_triton(a, b, bias, activation, out_dtype, config):
    import jax
    import jax.numpy as jnp

    from kernels.jax_bridge import import_jax_triton

    jt = import_jax_triton()

    out_shape = (*a.shape[:-1], b.shape[-1])
    if a.ndim == 3 and b.ndim == 2:  # one weight for the batch: fold the batch into M
        a = a.reshape(-1, a.shape[-1])
    batched = a.ndim == 3
    nbatch = a.shape[0] if batched else 1
    m, k = a.shape[-2:]
    n = b.shape[-1]
    device = jax.devices()[0]
    dtype = jnp.dtype(a.dtype).name
    cfg = resolve_config(m, n, k, dtype, device.device_kind, config, jnp.dtype(out_dtype).name)
    split_k = cfg.SPLIT_K if not batched else 1
    items = cdiv(m, cfg.BLOCK_M) * cdiv(n, cfg.BLOCK_N) * nbatch * split_k
    num_sms = max(1, min(getattr(device, "core_count", H100_H200_SMS), items))
    bias_arg = bias if bias is not None else b  # never read when HAS_BIAS is False
    common = dict(HAS_BIAS=bias is not None, ACTIVATION=activation or "none")
    strides = (m * k, k, 1, k * n, n, 1)
    if split_k > 1:
        ws = jt.triton_call(
            a, b, bias_arg, m, n, k, nbatch, m, *strides, m * n, n,
            kernel=gemm_kernel_jax, out_shape=jax.ShapeDtypeStruct((split_k * m, n), jnp.float32),
            grid=(num_sms,), num_warps=cfg.num_warps, num_stages=cfg.num_stages,
            BATCHED=False, HAS_BIAS=False, ACTIVATION="none", BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N,
            BLOCK_K=cfg.BLOCK_K, GROUP_M=cfg.GROUP_M, NUM_SMS=num_sms, EPILOGUE_SUBTILE=False,
            WARP_SPECIALIZE=cfg.WARP_SPECIALIZE, SPLIT_K=split_k,
        )
        out = jt.triton_call(
            ws, bias_arg, m, n, m, n, n,
            kernel=splitk_reduce_kernel_jax, out_shape=jax.ShapeDtypeStruct((m, n), out_dtype),
            grid=(cdiv(m, 32), cdiv(n, 128)), num_warps=4,
            SPLIT_K=split_k, BLOCK_M=32, BLOCK_N=128, **common,
        )
        return out.reshape(out_shape)
    out = jt.triton_call(
        a, b, bias_arg, m, n, k, nbatch, m, *strides, m * n, n,
        kernel=gemm_kernel_jax, out_shape=jax.ShapeDtypeStruct((nbatch, m, n) if batched else (m, n), out_dtype),
        grid=(num_sms,), num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        BATCHED=batched, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, GROUP_M=cfg.GROUP_M,
        NUM_SMS=num_sms, EPILOGUE_SUBTILE=cfg.EPILOGUE_SUBTILE, WARP_SPECIALIZE=cfg.WARP_SPECIALIZE, SPLIT_K=1,
        **common,
    )
    return out.reshape(out_shape)
