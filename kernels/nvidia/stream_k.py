"""The stream-K schedule (Osama et al., "Stream-K", PPoPP 2023) for the Hopper GEMMs: program ``p`` of
``S`` (one per SM) runs the contiguous steps ``[p*T//S, (p+1)*T//S)`` of the ``T = tiles * k_iters``
(output tile, K step) pairs, so every SM streams the same bytes whatever the tile count (decode-sized
GEMMs, whose few tiles cannot fill the SMs); a tile split between programs is summed in the same
launch by its last contributor, in program order. The README ("The Hopper GEMM") says more.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def range_start(pid, total, NUM_SMS: tl.constexpr):
    """First step of program ``pid``: floor(pid * T / S), in 64-bit (T * S can pass 2**31)."""
    return ((pid + tl.zeros((), tl.int64)) * total // NUM_SMS).to(tl.int32)


@triton.jit
def owner(step, total, NUM_SMS: tl.constexpr):
    """The program whose range holds ``step``: the largest p with range_start(p) <= step."""
    return (((step + tl.zeros((), tl.int64) + 1) * NUM_SMS + total - 1) // total - 1).to(tl.int32)


@triton.jit
def fixup(acc, tile, pid, begin, k_iters, total, ws_ptr, sem_ptr, rows_valid,
          NUM_SMS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Contribute this program's fp32 partial ``acc`` of a split ``tile``; returns (is_last, sum):
    for the last contributor to arrive, the sum of every contributor's partial in program order
    (its own read back too, so that order does not depend on who arrives last). Only the tile's
    first ``rows_valid`` rows travel through the workspace: for M = 16 in a 64-row tile, a
    quarter of it."""
    tile_start = tile * k_iters
    first = owner(tile_start, total, NUM_SMS)
    last = owner(tile_start + k_iters - 1, total, NUM_SMS)
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    rows = offs // BLOCK_N < rows_valid
    slot = pid * 2 + (begin < tile_start).to(tl.int32)  # 0: my range starts in this tile; 1: it ends in it
    tl.store(ws_ptr + slot.to(tl.int64) * (BLOCK_M * BLOCK_N) + offs, acc, mask=rows)
    # Every thread's partial is written before one thread's release increment publishes it
    # (a CTA barrier, then a gpu-scope acq_rel atomic: CUTLASS's semaphore pattern).
    tl.debug_barrier()
    arrived = tl.atomic_add(sem_ptr + tile, 1, sem="acq_rel", scope="gpu")
    is_last = arrived == last - first
    summed = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    if is_last:
        for q in range(first, last + 1):
            q_slot = q * 2 + (range_start(q, total, NUM_SMS) < tile_start).to(tl.int32)
            # .cg: from L2, never a stale L1 line (another SM wrote it)
            summed += tl.load(ws_ptr + q_slot.to(tl.int64) * (BLOCK_M * BLOCK_N) + offs, mask=rows, other=0.0,
                              cache_modifier=".cg")
        tl.atomic_xchg(sem_ptr + tile, 0)
    return is_last, summed


# --------------------------------------------------------------------------- host side


def programs_for(total_steps: int, sms: int) -> int:
    """Programs to launch: one per SM, never more than there are steps."""
    # T >= S: every program has at least one step, and a tile's contributors are exactly the
    # programs owner(first step) .. owner(last step), which fixup relies on.
    return max(1, min(sms, total_steps))


_semaphores: dict = {}


def semaphores(device, tiles: int):
    """A zeroed int32 counter per tile, kept per (device, stream): every fixup leaves its counter
    at zero again, so the buffer is allocated (and zeroed) once, not per launch."""
    import torch

    stream = torch.cuda.current_stream(device).stream_id if device.type == "cuda" else 0
    key = (str(device), stream)
    buf = _semaphores.get(key)
    if buf is None or buf.numel() < tiles:
        buf = torch.zeros(max(tiles, 1024), dtype=torch.int32, device=device)
        _semaphores[key] = buf
    return buf


def workspace(device, programs: int, block_m: int, block_n: int):
    """Two fp32 partial tiles per program (the caching allocator makes this free after the first call)."""
    import torch

    return torch.empty((2 * programs, block_m, block_n), dtype=torch.float32, device=device)
