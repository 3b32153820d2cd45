"""GEMM for Hopper (sm_90a) in Triton, the op's implementation: its config hooks (the heuristic,
``config="autotune"``) and its launcher, which feeds the persistent TMA kernel (or, for skinny M,
split-K and the stream-K schedule of :mod:`ceiling.nvidia.stream_k`) in
:mod:`ceiling.nvidia.gemm_kernels`. The README's "The Hopper GEMM" says why each piece is there;
the tuned tables are ``tables/<device>/gemm.json``, the JAX launcher :mod:`ceiling.nvidia.gemm_jax`,
the compile specs :mod:`ceiling.nvidia.gemm_specs`.
"""

from __future__ import annotations

from functools import cache

import torch

from ceiling import spaces
from ceiling.nvidia import blackwell, stream_k
from ceiling.nvidia import tma_descriptors as td
from ceiling.nvidia.gemm_kernels import (H100_H200_SMS, cdiv, gemm_kernel, gemm_streamk_kernel, grouped_tile,  # noqa: F401
                                         splitk_reduce_kernel, store_tile)  # grouped_tile, store_tile: the FP8 GEMM's
from ceiling.triton_runtime import launcher

TARGET = "sm_90a"
SMEM_LIMIT_SM90 = spaces.target_limits(TARGET)["smem_per_block"]  # 227 KiB of shared memory per block
JAX = "gpu"  # forward_jax runs on a JAX GPU (jax-triton); elsewhere the host callback


# --------------------------------------------------------------------------- configs


def _config(BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, GROUP_M: int = 8, num_stages: int = 3, num_warps: int = 8,
            EPILOGUE_SUBTILE: bool = False, WARP_SPECIALIZE: bool = False, SPLIT_K: int = 1,
            STREAM_K: bool = False) -> dict:
    return dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, num_stages=num_stages,
                num_warps=num_warps, EPILOGUE_SUBTILE=EPILOGUE_SUBTILE, WARP_SPECIALIZE=WARP_SPECIALIZE,
                SPLIT_K=SPLIT_K, STREAM_K=STREAM_K)


def target(problem, user=None) -> str:
    return blackwell.target(problem)


def heuristic(problem, user=None) -> dict:
    """The shape class's config (:func:`hopper_heuristic`, sized for the target's SM count); on
    Blackwell, with the sm_90a table's entries, fitted to the Blackwell space."""
    where = target(problem)
    return blackwell.config("gemm", problem, hopper_heuristic(problem, blackwell.units(where, H100_H200_SMS)),
                            problem.features())


def hopper_heuristic(problem, sms: int = H100_H200_SMS) -> dict:
    """A config for a shape nobody tuned, from the shape class.

    wgmma wants BLOCK_M a multiple of 64 per warpgroup and a wide BLOCK_N; a tile grid that
    leaves most SMs idle is worse than a smaller tile. Skinny M (decode, small batches) is bound by
    streaming B: narrow tiles and split-K give every SM a share of B to stream. Up to M = 64 (one
    wgmma row block) that is the stream-K schedule: 64x64 tiles, 128 deep, six stages, so each SM
    keeps 96 KB of weights in flight and every SM streams an equal share of them (no partial wave,
    no reduction launch).
    """
    m, n, k = problem.rows, problem.n, problem.k
    if problem.dtype == "float32":  # 4-byte operands: half the K depth for the same shared memory
        return _config(128, 128, 32, 8, 3, 8) if m > 256 else _config(64, 64, 64, 8, 3, 4)
    if m <= 64:
        return _config(64, 64, 128, 8, 6, 4, STREAM_K=True)
    if m <= 256:
        tiles = cdiv(m, 64) * cdiv(n, 64)
        k_tiles = cdiv(k, 128)
        split = 1
        while split < 8 and tiles * split * 2 <= 2 * sms and k_tiles >= 4 * split * 2:
            split *= 2
        return _config(64, 64, 128, 8, 5, 4, SPLIT_K=split)
    if cdiv(m, 128) * cdiv(n, 256) >= sms:
        return _config(128, 256, 64, 8, 3, 8, EPILOGUE_SUBTILE=True)
    if cdiv(m, 128) * cdiv(n, 128) >= sms:
        return _config(128, 128, 64, 8, 5, 8)
    return _config(64, 128, 64, 8, 4, 4)


def resolve(problem, impl, user):
    """``config="autotune"`` becomes the cached winner (:func:`autotune`); then, as any config=,
    over the device's tuned entry for this shape, else the heuristic, checked once."""
    from ceiling.op import resolve_tabled

    if isinstance(user, str) and user == "autotune":
        user = autotune(problem)
    return resolve_tabled(problem, impl, user)


def autotune(problem) -> dict | None:
    """The fastest candidate config for ``problem`` on this GPU (:mod:`ceiling.autotune`: timed
    on random operands of the problem's shapes and layouts the first time, then read from the
    cache); None for an empty problem, which has nothing to tune."""
    from ceiling import autotune as tuner
    from ceiling.spaces.config import Config

    if (problem.batch or 1) * problem.m * problem.k == 0 or problem.n == 0:
        return None
    operands = cache(lambda: _random_operands(problem))  # made once, if anything is timed
    where = target(problem)
    candidates = tuner.candidates("gemm", where, problem.features())
    return tuner.best("gemm", problem.device, problem.gpu, _autotune_key(problem), candidates,
                      lambda c: forward(problem, Config(c, "gemm", where, "autotune candidate"), *operands()))


def _autotune_key(p) -> str:
    a_shape = (p.m, p.k) if p.batch is None else (p.batch, p.m, p.k)
    b_shape = (p.k, p.n) if p.batch is None or p.b_shared else (p.batch, p.k, p.n)
    return "|".join([f"torch.{p.dtype}", f"torch.{p.out_dtype}", "x".join(map(str, a_shape)),
                     "x".join(map(str, b_shape)), ("T" if p.a_trans else "N") + ("T" if p.b_trans else "N"),
                     str(p.activation), "bias" if p.bias_dtype else "nobias"])


def _random_operands(p) -> tuple:
    gen = torch.Generator(device=p.device).manual_seed(0)

    def operand(lead, rows, cols, trans):
        shape = (*lead, cols, rows) if trans else (*lead, rows, cols)
        x = torch.randn(shape, generator=gen, device=p.device).to(getattr(torch, p.dtype))
        return x.mT if trans else x

    lead = () if p.batch is None else (p.batch,)
    a = operand(lead, p.m, p.k, p.a_trans)
    b = operand(() if p.b_shared else lead, p.k, p.n, p.b_trans)
    bias = None if p.bias_dtype is None else torch.randn(p.n, generator=gen, device=p.device).to(
        getattr(torch, p.bias_dtype))
    return a, b, bias


# --------------------------------------------------------------------------- launch

def _aligned(x: torch.Tensor) -> bool:
    """Whether a descriptor can read x as it is (:func:`ceiling.nvidia.tma_descriptors.tma_ready`)."""
    return bool(td.tma_ready(td.Operand.of(x)))


def _tma_storage(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(a unit-last-stride view TMA can read, whether x is the transpose of it); the choice is
    :func:`ceiling.nvidia.tma_descriptors.gemm_view`'s, which ``ceiling verify`` proves legal."""
    o = td.Operand.of(x)
    if td.keeps_layout(o):
        view, trans = x, False
    elif td.transposable(o):
        view, trans = x.mT, True
    else:
        view, trans = x.contiguous(), False
    if not _aligned(view):
        view = _pad_rows(view)
    return view, trans


def _pad_rows(x: torch.Tensor, copy: bool = True) -> torch.Tensor:
    """A view like x whose rows start on 16-byte boundaries, holding x if ``copy``."""
    cols = x.shape[-1]
    storage = torch.empty((*x.shape[:-1], td.padded_cols(cols, x.element_size())), dtype=x.dtype, device=x.device)
    view = storage[..., :cols]
    if copy:
        view.copy_(x)
    return view


def _descriptor(t: torch.Tensor, block: list[int]):
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor.from_tensor(t, block)


@cache
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


# The interpreter runs programs one after another: a few persistent programs
# exercise the tile loop (several tiles per program) without wasting time.

# The interpreter runs programs one after another: a few persistent programs
# exercise the tile loop (several tiles per program) without wasting time.

@cache
def _device_name(device_index: int) -> str:  # the FP8 GEMM's table lookup
    return torch.cuda.get_device_name(device_index)


# The interpreter runs programs one after another: a few persistent programs
# exercise the tile loop (several tiles per program) without wasting time.
INTERPRETED_PROGRAMS = 3


def forward(problem, config, a: torch.Tensor, b: torch.Tensor, bias) -> tuple[torch.Tensor]:
    """``activation(a @ b + bias)`` on the Hopper kernel (interpreted on CPU tensors), with the
    resolved ``config``: the persistent kernel (and the split-K reduction), or stream-K."""
    on_gpu = a.is_cuda
    activation = problem.activation
    out = torch.empty(problem.out_shape, dtype=getattr(torch, problem.out_dtype), device=a.device)
    if problem.b_shared:
        # One weight for the whole batch: fold the batch into M.
        a = a if a.stride(-1) == 1 and a.stride(0) == a.shape[1] * a.stride(1) else a.contiguous()
        a = a.reshape(-1, a.shape[-1])
    c = out.view(-1, out.shape[-1]) if a.dim() == 2 else out
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batched = a.dim() == 3
    nbatch = a.shape[0] if batched else 1
    if out.numel() == 0:
        return (out,)
    if k == 0:  # an empty sum: the epilogue of a zero accumulator
        from ceiling.gemm.reference import activate_torch

        z = torch.zeros(out.shape, dtype=torch.float32, device=out.device)
        return (out.copy_(activate_torch(z + bias.float() if bias is not None else z, activation)),)

    too_large = td.gemm_too_large(nbatch, m, n, k)
    if too_large:  # before any copy: a descriptor could not describe the operand
        from ceiling.errors import InputError

        arg, name, value = too_large
        raise InputError(arg, f"{name} below 2^31 (the Hopper kernel's TMA descriptors)", f"{name} = {value}")
    cfg = config
    split_k = cfg["SPLIT_K"] if not batched else 1  # batched problems have parallelism to spare
    if bias is not None:
        bias = bias.contiguous()  # the epilogue reads it with unit stride (a strided view is copied: N elements)
    a_view, a_trans = _tma_storage(a)
    b_view, b_trans = _tma_storage(b)
    if cfg["STREAM_K"] and not batched:
        _gemm_streamk(a_view, a_trans, b_view, b_trans, c, bias, activation, cfg, on_gpu)
        return (out,)
    if split_k > 1:
        # fp32 partial planes of m rows; N padded so each row starts on a 16-byte boundary.
        target = _pad_rows(torch.empty((split_k * m, n), dtype=torch.float32, device=a.device), copy=False)
    else:
        target = c if _aligned(c) else _pad_rows(c, copy=False)

    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    subtile = cfg["EPILOGUE_SUBTILE"] and split_k == 1
    a_block, b_block, c_block = td.gemm_blocks(bm, bn, bk, a_trans, b_trans, batched, bn // 2 if subtile else bn)

    num_items = cdiv(m, bm) * cdiv(n, bn) * nbatch * split_k
    programs = _sm_count(a.device.index or 0) if on_gpu else INTERPRETED_PROGRAMS
    num_sms = max(1, min(programs, num_items))
    bias_arg = bias if bias is not None else target  # never read when HAS_BIAS is False

    if split_k > 1:
        from triton.tools.tensor_descriptor import TensorDescriptor

        d = td.splitk_partials(split_k, m, n, bm, bn)
        assert target.stride(0) == d.strides[1]  # the plan's padded row is the buffer's
        c_desc = TensorDescriptor(target, list(d.shape), list(d.strides), list(d.block))
    else:
        c_desc = _descriptor(target, c_block)
    launcher(gemm_kernel, on_gpu=on_gpu)[(num_sms,)](
        _descriptor(a_view, a_block), _descriptor(b_view, b_block), c_desc, bias_arg,
        m, n, k, nbatch, m,
        0, 0, 0, 0, 0, 0, 0, 0,  # strides: only the pointer (non-TMA) path reads them
        A_TRANS=a_trans, B_TRANS=b_trans, BATCHED=batched, USE_TMA=True,
        HAS_BIAS=bias is not None, ACTIVATION=activation or "none",
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"],
        NUM_SMS=num_sms, EPILOGUE_SUBTILE=subtile, WARP_SPECIALIZE=cfg["WARP_SPECIALIZE"], SPLIT_K=split_k,
        num_stages=cfg["num_stages"], num_warps=cfg["num_warps"],
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
    return (out,)


def _gemm_streamk(a_view, a_trans, b_view, b_trans, c, bias, activation, cfg, on_gpu: bool) -> None:
    """Launch :func:`gemm_streamk_kernel` into ``c`` (2-D)."""
    m, n = c.shape
    k = a_view.shape[0] if a_trans else a_view.shape[1]
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    target = c if _aligned(c) else _pad_rows(c, copy=False)
    tiles = cdiv(m, bm) * cdiv(n, bn)
    sms = _sm_count(c.device.index or 0) if on_gpu else INTERPRETED_PROGRAMS
    programs = stream_k.programs_for(tiles * cdiv(k, bk), sms)
    a_block, b_block, c_block = td.gemm_blocks(bm, bn, bk, a_trans, b_trans, False,
                                               bn // 2 if cfg["EPILOGUE_SUBTILE"] else bn)
    launcher(gemm_streamk_kernel, on_gpu=on_gpu)[(programs,)](
        _descriptor(a_view, a_block), _descriptor(b_view, b_block), _descriptor(target, c_block),
        bias if bias is not None else target, stream_k.workspace(c.device, programs, bm, bn),
        stream_k.semaphores(c.device, tiles), m, n, k,
        A_TRANS=a_trans, B_TRANS=b_trans, HAS_BIAS=bias is not None, ACTIVATION=activation or "none",
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"], NUM_SMS=programs,
        EPILOGUE_SUBTILE=cfg["EPILOGUE_SUBTILE"], num_stages=cfg["num_stages"], num_warps=cfg["num_warps"],
    )
    if target.data_ptr() != c.data_ptr():
        c.copy_(target)


def forward_jax(problem, config, a, b, bias):
    """The same kernel on JAX arrays on a GPU, through jax-triton (:mod:`ceiling.nvidia.gemm_jax`)."""
    from ceiling.nvidia import gemm_jax

    return (gemm_jax.forward(problem, config, a, b, bias),)
