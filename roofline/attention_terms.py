"""Model terms of a flash-attention launch from its tile schedule.

A flash-attention kernel runs one program per block of query rows (forward, dQ)
or key rows (dK/dV) of one (batch, head), looping over the blocks of the other
axis. What it costs on a device follows from that schedule, not from the
useful FLOPs alone:

* causal masking skips whole blocks only: a diagonal block is computed in full,
  so the work is the count of *visited* blocks (at 1024 keys and 128x128 tiles,
  12.5% more than half the square);
* programs are dispatched in launch order to the first free SM, and causal
  programs differ in length, so the busiest SM's share (``waves``) is found by
  list-scheduling the programs, not by dividing the total;
* every score element costs one exponential on the special-function units
  (16 per clock per SM on NVIDIA Hopper, an eighth of the FP32 rate's 128 FMAs),
  which at head dim 64 takes about as long as the two tensor-core products of
  that element (``exp``);
* the backward recomputes the probabilities in two kernels (dK/dV and dQ):
  seven products and two exponentials per visited element, three launches.

Tiles come from the record's config where it names them, else from what the op
resolves for the problem on the device (``ceiling.op.resolve_config`` of the
nvidia Triton implementation: its tuned tables on an H100 or H200), else the
kernels' heuristic.
"""

from __future__ import annotations

import functools
import heapq
import math

from ceiling.roofline import work as _work
from ceiling.roofline.machine import Machine

HOPPER = ("h100", "h200")  # the devices the nvidia Triton attention's tables are written for
SFU_PER_FP32_FLOP = 1 / 16  # exponentials per FP32 FLOP: 16 vs 2 x 128 per clock per SM (sm_80/sm_90)
PROGRAM_OVERHEAD_S = 0.5e-6  # a program's prologue (Q block load) and epilogue (O store), order of magnitude


def head_dim_pad(d: int) -> int:
    from ceiling.triton.attention import head_dim_pad as pad

    return pad(int(d))


@functools.lru_cache(maxsize=256)
def _shipped(gpu: str | None, head_dim: int, causal: bool) -> dict:
    """The nvidia Triton attention's config for a bf16 PyTorch problem at ``head_dim`` (through
    TMA, no bias): what the op resolves on ``gpu``, a Hopper its tables serve; with no ``gpu``,
    the implementation's heuristic for a Hopper nobody tuned."""
    from ceiling.attention.op import ATTENTION
    from ceiling.attention.spec import shipped_problem
    from ceiling.op import resolve_config

    impl = ATTENTION.implementation("nvidia")
    problem = shipped_problem(head_dim, "bfloat16", causal=causal, gpu=gpu, arch="sm_90")
    return resolve_config(problem, impl, None) if gpu else impl.load().heuristic(problem)


def tiles(machine: Machine, head_dim: int, config: dict | None, causal: bool = False) -> dict[str, tuple[int, int]]:
    """(block_m, block_n) per kernel ("fwd", "dkdv", "dq")."""
    hopper = machine.vendor == "nvidia" and machine.key in HOPPER
    shipped = _shipped(machine.name if hopper else None, int(head_dim), causal)
    out = {kernel: (int(shipped[kernel]["block_m"]), int(shipped[kernel]["block_n"])) for kernel in ("fwd", "dkdv", "dq")}
    cfg = {str(k).lower(): v for k, v in (config or {}).items()}
    if "block_m" in cfg and "block_n" in cfg:
        out["fwd"] = (int(cfg["block_m"]), int(cfg["block_n"]))
    for kernel in out:
        section = (config or {}).get(kernel)
        if isinstance(section, dict) and "block_m" in section and "block_n" in section:
            out[kernel] = (int(section["block_m"]), int(section["block_n"]))
    return out


def _rows_blocks(sq: int, sk: int, bm: int, bn: int, causal: bool) -> list[int]:
    """Key blocks visited by each query block (forward, dQ); the causal diagonal is bottom-right aligned."""
    offset = sk - sq
    out = []
    for i in range(math.ceil(sq / bm)):
        visible = min(sk, (i + 1) * bm + offset) if causal else sk
        out.append(max(0, math.ceil(visible / bn)))
    return out


def _cols_blocks(sq: int, sk: int, bm: int, bn: int, causal: bool) -> list[int]:
    """Query blocks visited by each key block (dK/dV)."""
    offset = sk - sq
    out = []
    for j in range(math.ceil(sk / bn)):
        first = max(0, j * bn - offset) if causal else 0
        out.append(max(0, math.ceil(sq / bm) - first // bm))
    return out


def busiest(per_program: list[int], copies: int, units: int, overhead_steps: float) -> tuple[float, int]:
    """List-schedule ``copies`` repetitions of ``per_program`` (launch order, first free SM).
    Returns the busiest SM's block steps and its program count."""
    return _busiest(tuple(per_program), copies, units, overhead_steps)


@functools.lru_cache(maxsize=4096)
def _busiest(per_program: tuple[int, ...], copies: int, units: int, overhead_steps: float) -> tuple[float, int]:
    """:func:`busiest`, remembered: a template's points share their tiles, so their schedules."""
    load = [(0.0, 0, u) for u in range(units)]  # (busy until, programs, sm)
    heapq.heapify(load)
    for _ in range(copies):
        for steps in per_program:
            t, n, u = heapq.heappop(load)
            heapq.heappush(load, (t + steps + overhead_steps, n + 1, u))
    t, n, _ = max(load)
    return t, n


def terms(shape: dict, config: dict, machine: Machine, dtype: str, launch_s: float) -> dict[str, float]:
    p = _work.attention_problem(shape, config)
    b, h, sq, sk, d = p.batch, p.heads, p.seq_q, p.seq_k, p.head_dim
    causal, backward = p.causal, p.backward
    size = _work.dtype_bytes(dtype)
    dpad = head_dim_pad(d)
    units = max(1, machine.units)
    per_sm_peak = machine.peak(dtype) / units
    per_sm_sfu = machine.peak("float32") * SFU_PER_FP32_FLOP / units
    bw = machine.bandwidth
    per_sm_l2 = bw.get("l2", bw.get("hbm", 1.0)) / units
    t = tiles(machine, d, config, causal)
    # (kernel, blocks per program, block rows, block cols, tensor FLOPs per element, rows loaded per step)
    dkdv_section = (config or {}).get("dkdv")
    if backward and isinstance(dkdv_section, dict) and dkdv_section.get("dq_atomic"):
        bm1, bn1 = t["dkdv"]  # dQ accumulated in the dK/dV kernel: 5 products, no dQ kernel
        kernels = [(_cols_blocks(sq, sk, bm1, bn1, causal), bm1, bn1, 10 * dpad, 2 * bm1)]
        launches = 2  # row statistics (O . dO), dK/dV with dQ
    elif backward:
        bm1, bn1 = t["dkdv"]
        bm2, bn2 = t["dq"]
        kernels = [(_cols_blocks(sq, sk, bm1, bn1, causal), bm1, bn1, 8 * dpad, 2 * bm1),
                   (_rows_blocks(sq, sk, bm2, bn2, causal), bm2, bn2, 6 * dpad, 2 * bn2)]
        launches = 3  # row statistics (O . dO), dK/dV, dQ
    else:
        bm, bn = t["fwd"]
        kernels = [(_rows_blocks(sq, sk, bm, bn, causal), bm, bn, 4 * dpad, 2 * bn)]
        launches = 1
    fwd_section = (config or {}).get("fwd")
    # exp2_split: half of a forward step's exponentials run on the FMA pipe instead of the SFU
    sfu_share = 0.5 if not backward and isinstance(fwd_section, dict) and fwd_section.get("exp2_split") else 1.0
    compute = exp = pipe = programs = 0.0
    for blocks, bm_, bn_, flops_per_elem, rows in kernels:
        elems = bm_ * bn_
        step = max(elems * flops_per_elem / per_sm_peak, sfu_share * elems / per_sm_sfu)  # the slower unit paces a step
        steps, n = busiest(blocks, b * h, units, PROGRAM_OVERHEAD_S / step)
        steps -= n * PROGRAM_OVERHEAD_S / step
        compute += steps * elems * flops_per_elem / per_sm_peak
        exp += steps * sfu_share * elems / per_sm_sfu
        pipe += steps * rows * dpad * size / per_sm_l2
        programs += n
    w = _work.attention(shape, config, dtype)
    out = {
        "compute": compute,
        "exp": exp,
        "hbm": w.bytes["hbm"] / bw["hbm"] if "hbm" in bw else 0.0,
        "pipe": pipe,
        "tiles": programs * PROGRAM_OVERHEAD_S,
        "launch": launches * launch_s,
    }
    out["roof"] = max(out["compute"], out["exp"], out["hbm"])
    return out
