"""FP8 GEMM for Hopper (sm_90a) in Triton: TMA-fed FP8 wgmma, scales fused, persistent or stream-K.

``out = activation((a * sa) @ (b * sb) + bias)`` for e4m3/e5m2 operands, read the way the
hardware wants them and scaled where each kind of scale belongs:

* **Operands K-major.** Hopper's FP8 wgmma reads both operands from shared memory with K
  contiguous (the transpose bit exists for 16-bit types only), so A is loaded as stored,
  (M, K) row-major, and B from its (N, K) storage (``w.mT`` of a weight ``w``) and
  transposed as a shared-memory view, which is free. Other layouts are copied once on the
  host (FP8 is one byte an element). TMA tensor descriptors zero-fill out-of-bounds rows
  and K columns, so odd sizes need no masks.
* **Promotion.** The FP8 wgmma accumulates in fewer bits than float32 (DeepSeek-V3 measured
  about 14), so long K sums drift. Every ``PROMOTE_STEPS`` K steps the kernel starts a fresh
  ``tl.dot`` partial and adds it into a float32 register accumulator: the promotion
  interval is ``BLOCK_K * PROMOTE_STEPS`` (128 by default, DeepSeek-V3's). ``PROMOTE_STEPS
  = 0`` accumulates all of K in the wgmma accumulator (cuBLASLt's "fast accumulation").
* **Scales where they vary.** Per-tensor and per-row/column scales are constant along K, so
  they factor out of the sum: they multiply the finished accumulator once, in the
  epilogue, and a promotion is a plain add. 1x128 and 128x128 scales change every 128 of
  K, so each promotion multiplies its partial by ``sa[:, None] * sb[None, :]`` for its
  K block before adding it; that is why a block-scaled promotion interval must divide 128.
* **Persistent** (``STREAM_K=False``): one program per SM walks the output tiles in grouped
  order with stride ``NUM_SMS`` (the loop nest flattened so that the next tile's loads
  overlap this tile's epilogue), as the bf16 kernel does.
* **Stream-K** (``STREAM_K=True``): for skinny or few-tile problems, every SM gets an equal
  run of (tile, K step) pairs and split tiles are fixed up in the same launch
  (:mod:`kernels.nvidia.stream_k`): all SMs stream weights until the end.
* **Fused epilogue**: the output scales, bias (fp32), relu / gelu / silu, cast, TMA store,
  optionally in two halves (``EPILOGUE_SUBTILE``).

Configs per device, scale kinds and shape live in ``configs/gemm_fp8.json``; shapes nobody
tuned get :func:`heuristic_config`. A ``config=`` is checked against the search space
(``kernels/spaces/gemm_fp8.json``, target sm_90a) before anything launches. On CPU tensors the
kernel runs under the Triton interpreter (``kernels.triton_runtime``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

from kernels import spaces
from kernels.triton.fp8_scales import output_scales, promote
from kernels.nvidia import stream_k
from kernels.nvidia.gemm import (INTERPRETED_PROGRAMS, _aligned, _descriptor, _device_name, _pad_rows,
                                 _sm_count, cdiv, device_key, grouped_tile, store_tile)
from kernels.nvidia.stream_k import fixup, range_start
from kernels.scaled_gemm.spec import config_context, kinds, scales_key
from kernels.triton_runtime import launcher

CONFIG_FILE = Path(__file__).with_name("configs") / "gemm_fp8.json"
FAMILY, TARGET = "gemm_fp8", "sm_90a"
CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_stages", "num_warps", "PROMOTE_STEPS", "STREAM_K",
               "EPILOGUE_SUBTILE")


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


@dataclass(frozen=True)
class Fp8Config:
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int = 128
    GROUP_M: int = 8
    num_stages: int = 4
    num_warps: int = 8
    PROMOTE_STEPS: int = 1  # K tiles per FP8 partial before it is added into fp32; 0: never
    STREAM_K: bool = False
    EPILOGUE_SUBTILE: bool = False

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Fp8Config":
        """A whole config (a table entry, a candidate), checked against the space: keys, domains, the
        shared memory of a bf16 output (``kernels/spaces/gemm_fp8.json``, target sm_90a)."""
        spaces.check(FAMILY, TARGET, d)
        return cls(**d)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in CONFIG_KEYS}

    @property
    def k_step(self) -> int:
        """K depth of one main-loop step."""
        return self.BLOCK_K * max(self.PROMOTE_STEPS, 1)

    @property
    def promotion_interval(self) -> int | None:
        """K elements summed in the wgmma accumulator before promotion to fp32 (None: never)."""
        return self.BLOCK_K * self.PROMOTE_STEPS if self.PROMOTE_STEPS else None


@cache
def _config_table() -> dict[str, Any]:
    return json.loads(CONFIG_FILE.read_text())


H100_H200_SMS = 132


def heuristic_config(m: int, n: int, k: int, a_kind: str = "tensor", b_kind: str = "tensor") -> Fp8Config:
    """A config for a shape nobody tuned.

    Promoted configs keep two accumulators (the fp32 sum and the FP8 partial), so 128x128 with
    two warpgroups (64 + 64 registers a thread) is the largest tile that does not spill.
    Decode-sized M (<= 64) streams the weights with stream-K, many stages deep; few-tile
    problems use stream-K too, so no SM idles in a partial wave.
    """
    if m <= 64:
        return Fp8Config(64, 128 if n >= 8192 else 64, 128, 8, 8, 4, PROMOTE_STEPS=1, STREAM_K=True)
    tiles = cdiv(m, 128) * cdiv(n, 128)
    return Fp8Config(128, 128, 128, 8, 4, 8, PROMOTE_STEPS=1, STREAM_K=tiles < 2 * H100_H200_SMS)


@lru_cache(maxsize=4096)
def select_config(m: int, n: int, k: int, dtype: str, a_kind: str, b_kind: str,
                  device_name: str | None) -> tuple[Fp8Config, str]:
    """(config, where it came from): the device's tuned table, else the heuristic."""
    key = device_key(device_name)
    entries = _config_table()["devices"].get(key, []) if key else []
    for entry in entries:
        if (entry["dtype"] == dtype and entry["scales"] == scales_key(a_kind, b_kind)
                and tuple(entry["shape"]) == (m, n, k)):
            return Fp8Config.from_dict(entry["config"]), f"tuned:{key}"
    return heuristic_config(m, n, k, a_kind, b_kind), "heuristic"


def resolve_config(m: int, n: int, k: int, dtype: str, a_kind: str, b_kind: str, device_name: str | None,
                   config: dict | None = None, out_dtype: str = "bfloat16") -> Fp8Config:
    """The config a problem runs with: ``config`` (checked against the sm_90a space: keys, domains,
    the shared memory of this output dtype, the promotion this scaling needs) over the table's
    entry for this shape and scaling, else the heuristic's. A partial config overrides the keys it
    names and keeps the others; one that names ``SCALES`` must name the call's."""
    base, _ = select_config(m, n, k, dtype, a_kind, b_kind, device_name)
    if config is None:  # the table's and the heuristic's configs are points of the space (tests/test_spaces.py)
        return base
    context = config_context(m, n, k, a_kind, b_kind, out_dtype, config)
    merged = spaces.resolve(FAMILY, TARGET, base.as_dict(), config, context)
    return Fp8Config(**{key: v for key, v in merged.items() if key != "SCALES"})


def shipped_configs() -> list[tuple[Fp8Config, str, str]]:
    """Every distinct (config, a kind, b kind) the table ships, plus the heuristic's."""
    seen: dict[tuple, None] = {}
    for entries in _config_table()["devices"].values():
        for entry in entries:
            a_kind, b_kind = entry["scales"].split("/")
            seen[(Fp8Config.from_dict(entry["config"]), a_kind, b_kind)] = None
    for a_kind, b_kind in (("tensor", "tensor"), ("1x128", "128x128")):
        for shape in ((16, 4096, 4096), (64, 8192, 8192), (1024, 1024, 4096), (8192, 8192, 8192)):
            seen[(heuristic_config(*shape, a_kind, b_kind), a_kind, b_kind)] = None
    return list(seen)


# --------------------------------------------------------------------------- launch


def _k_major(x: torch.Tensor) -> torch.Tensor:
    """x (rows, K) with unit K stride and 16-byte aligned rows, as TMA reads FP8 operands."""
    if x.stride(1) != 1 and x.shape[1] > 1:
        x = x.contiguous()
    if x.shape[0] > 1 and x.stride(0) < x.shape[1]:
        x = x.contiguous()
    return x if _aligned(x) else _pad_rows(x)


def _scale_strides(scale: torch.Tensor, kind: str) -> tuple[int, int]:
    if kind == "tensor":
        return 0, 0
    return scale.stride(0), scale.stride(1)


def scaled_gemm(a, b, a_scale, b_scale, bias, activation, out_dtype, config=None) -> torch.Tensor:
    """``activation(deq(a) @ deq(b) + bias)`` on the Hopper kernel (interpreted on CPU tensors).

    Arguments are validated by ``kernels.scaled_gemm.spec``; ``config`` is a dict of
    :data:`CONFIG_KEYS`, whole or partial (:func:`resolve_config`), or None (the table, then the
    heuristic).
    """
    m, k = a.shape
    n = b.shape[1]
    a_kind, b_kind = kinds(a.shape, b.shape, a_scale.shape, b_scale.shape)
    on_gpu = a.is_cuda
    cfg = resolve_config(m, n, k, str(a.dtype).removeprefix("torch."), a_kind, b_kind,
                         _device_name(a.device.index or 0) if on_gpu else None, config,
                         str(out_dtype).removeprefix("torch."))
    out = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if out.numel() == 0:
        return out
    if k == 0:  # an empty sum: the epilogue of a zero accumulator
        from kernels.gemm.reference import activate_torch

        z = torch.zeros((m, n), dtype=torch.float32, device=a.device)
        return out.copy_(activate_torch(z + bias.float() if bias is not None else z, activation))

    a_view, bt_view = _k_major(a), _k_major(b.mT)
    target = out if _aligned(out) else _pad_rows(out, copy=False)
    c_cols = cfg.BLOCK_N // 2 if cfg.EPILOGUE_SUBTILE else cfg.BLOCK_N
    tiles = cdiv(m, cfg.BLOCK_M) * cdiv(n, cfg.BLOCK_N)
    k_groups = cdiv(k, cfg.k_step)
    sms = _sm_count(a.device.index or 0) if on_gpu else INTERPRETED_PROGRAMS
    if cfg.STREAM_K:
        programs = stream_k.programs_for(tiles * k_groups, sms)
        ws = stream_k.workspace(a.device, programs, cfg.BLOCK_M, cfg.BLOCK_N)
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
        _descriptor(a_view, [cfg.BLOCK_M, cfg.BLOCK_K]), _descriptor(bt_view, [cfg.BLOCK_N, cfg.BLOCK_K]),
        _descriptor(target, [cfg.BLOCK_M, c_cols]), a_scale, b_scale, bias_arg, ws, sem,
        m, n, k, sam, sak, sbk, sbn,
        A_SCALE=a_kind, B_SCALE=b_kind, HAS_BIAS=bias is not None, ACTIVATION=activation or "none",
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, GROUP_M=cfg.GROUP_M, NUM_SMS=programs,
        PROMOTE_STEPS=cfg.PROMOTE_STEPS, K_STEP=cfg.k_step, STREAM_K=cfg.STREAM_K,
        EPILOGUE_SUBTILE=cfg.EPILOGUE_SUBTILE, num_stages=cfg.num_stages, num_warps=cfg.num_warps,
    )
    if target.data_ptr() != out.data_ptr():
        out.copy_(target)
    return out


def scaled_gemm_jax(a, b, a_scale, b_scale, bias, activation, out_dtype, config=None):
    """The same kernel on JAX arrays on the CPU, interpreted through a host callback
    (``kernels.jax_bridge``); refused, with the reason, on a GPU, by :mod:`kernels.scaled_gemm.jax_op`."""
    import jax

    from kernels.arrays import torch_dtype
    from kernels.jax_bridge import call_on_cpu

    (m, k), n = a.shape, b.shape[1]
    a_kind, b_kind = kinds(a.shape, b.shape, a_scale.shape, b_scale.shape)
    cfg = resolve_config(m, n, k, str(a.dtype), a_kind, b_kind, None, config, str(jax.numpy.dtype(out_dtype)))
    result = jax.ShapeDtypeStruct((m, n), out_dtype)
    args = (a, b, a_scale, b_scale) if bias is None else (a, b, a_scale, b_scale, bias)

    def run(x, y, sx, sy, z=None):
        return scaled_gemm(x, y, sx, sy, z, activation, torch_dtype(str(out_dtype)), cfg.as_dict())

    return call_on_cpu(run, result, *args, backend="nvidia")


# --------------------------------------------------------------------------- static inspection

_TRITON_FP8 = {"float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5"}


def compile_spec(config: dict[str, Any], a_kind: str = "1x128", b_kind: str = "128x128",
                 a_dtype: str = "float8_e4m3fn", b_dtype: str = "float8_e4m3fn", out_dtype: str = "bfloat16"):
    """The ``kernels.isa.CompileSpec`` of one config (a whole point of the search space, checked
    against it for these scale kinds and output dtype), bias + gelu epilogue, as a launch on a
    16-byte aligned problem specializes it."""
    from kernels.isa import CompileSpec

    spaces.check(FAMILY, TARGET, config, config_context(None, None, None, a_kind, b_kind, out_dtype, config))
    cfg = Fp8Config(**{key: v for key, v in config.items() if key != "SCALES"})
    out = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[out_dtype]
    c_cols = cfg.BLOCK_N // 2 if cfg.EPILOGUE_SUBTILE else cfg.BLOCK_N
    signature = {
        "a": f"tensordesc<{_TRITON_FP8[a_dtype]}[{cfg.BLOCK_M},{cfg.BLOCK_K}]>",
        "b": f"tensordesc<{_TRITON_FP8[b_dtype]}[{cfg.BLOCK_N},{cfg.BLOCK_K}]>",
        "c": f"tensordesc<{out}[{cfg.BLOCK_M},{c_cols}]>",
        "a_scale_ptr": "*fp32", "b_scale_ptr": "*fp32", "bias_ptr": f"*{out}", "ws_ptr": "*fp32", "sem_ptr": "*i32",
        "M": "i32", "N": "i32", "K": "i32",
        "stride_sam": "i32", "stride_sak": "i32", "stride_sbk": "i32", "stride_sbn": "i32",
    }
    constexprs = {
        "A_SCALE": a_kind, "B_SCALE": b_kind, "HAS_BIAS": True, "ACTIVATION": "gelu",
        "BLOCK_M": cfg.BLOCK_M, "BLOCK_N": cfg.BLOCK_N, "BLOCK_K": cfg.BLOCK_K, "GROUP_M": cfg.GROUP_M,
        "NUM_SMS": H100_H200_SMS, "PROMOTE_STEPS": cfg.PROMOTE_STEPS, "K_STEP": cfg.k_step, "STREAM_K": cfg.STREAM_K,
        "EPILOGUE_SUBTILE": cfg.EPILOGUE_SUBTILE,
    }
    # Scale strides as a launch specializes them: a unit stride becomes the constant 1
    # (1x128 scales are column-major, rows adjacent; a weight's 128x128 scales are (Kb, Nb)
    # viewed from their (Nb, Kb) storage).
    unit = {"1x128": ("stride_sam",), "128x128": ("stride_sam",), "row": ("stride_sam",)}.get(a_kind, ())
    unit += {"128x128": ("stride_sbk",), "row": ("stride_sbn",), "1x128": ("stride_sbn",)}.get(b_kind, ())
    for name in unit:
        signature[name] = "constexpr"
        constexprs[name] = 1
    for key in constexprs:
        signature[key] = "constexpr"
    name = "gemm_fp8_{}x{}x{}_g{}_s{}_w{}_p{}{}{}_{}".format(
        cfg.BLOCK_M, cfg.BLOCK_N, cfg.BLOCK_K, cfg.GROUP_M, cfg.num_stages, cfg.num_warps, cfg.PROMOTE_STEPS,
        "_streamk" if cfg.STREAM_K else "", "_sub" if cfg.EPILOGUE_SUBTILE else "", scales_key(a_kind, b_kind))
    aligned = tuple(n for n, t in signature.items() if t.startswith("*") or n in ("N", "K") or
                    (t == "i32" and n.startswith("stride")))
    return CompileSpec(name, gemm_fp8_kernel, signature, constexprs,
                       {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages},
                       {**cfg.as_dict(), "scales": scales_key(a_kind, b_kind)}, divisible_by_16=aligned)


def compile_specs(dtype: str = "float8_e4m3fn") -> list:
    """A ``kernels.isa.CompileSpec`` per shipped (config, scale kinds), for FP8 operands of ``dtype``
    (an output dtype such as "bfloat16", the CLI's default, means e4m3 operands with that output)."""
    fp8, out = (dtype, "bfloat16") if dtype in _TRITON_FP8 else ("float8_e4m3fn", dtype)
    return [compile_spec(cfg.as_dict(), a_kind, b_kind, fp8, fp8, out) for cfg, a_kind, b_kind in shipped_configs()]
