"""Host side of the Gluon Hopper attention: which problems it takes, its configs, and its launches.

The Gluon kernels (:mod:`~kernels.nvidia.gluon.attention_fwd`, :mod:`~kernels.nvidia.gluon.attention_bwd`)
are a second implementation of the nvidia attention backend beside the Triton kernels
(:mod:`kernels.triton.attention`, chosen and launched by :mod:`kernels.nvidia.attention`). Which
one runs a problem is decided by :func:`implementation_for`:

* ``config={"implementation": "gluon"}`` asks for them; ``"triton"`` for the Triton kernels;
* without it, the Triton kernels run, except on the problems ``configs/attention_gluon.json``
  lists under ``"default"``: those a device run proved right (against float64, error-ratio rule)
  and faster, each with its run's provenance. The list is empty until such a run.
* problems the Gluon kernels do not cover run the Triton kernels even when Gluon is asked for,
  and :func:`implementation_for` says why: CPU tensors (Gluon has no interpreter: the
  interpreted Triton kernel, their oracle, runs instead), JAX arrays, a GPU other than Hopper,
  a Triton release they are not checked under, float32, a bias or a boolean mask, head dims
  without a shipped config (forward: 64, 128, 256; backward: 64, 128).

The backward has two modes. By default (FA3's design) one kernel accumulates dQ in float32 by
TMA reductions from every key block, in whatever order the CTAs run, so dQ varies in its last
bits from run to run (dK and dV do not). ``config={"deterministic": True}`` runs the Triton
dK/dV and dQ kernels instead, which are bitwise reproducible. The fast mode is the Gluon
default because it is what the Gluon implementation exists for (five products per block pair
instead of seven); determinism is a choice the caller makes.

Tile overrides: ``config={"implementation": "gluon", "gluon": {"fwd": {"block_n": 64}, "bwd": {...}}}``
over the table's entry for the head dim. The whole config is checked against the sm_90a attention
space (``kernels/spaces/attention.json``, whose ``gluon`` key holds a config of
``kernels/spaces/attention_gluon.json``) before anything is decided, and the merged tiles of the
kernel about to run against the Gluon space's constraints (shared memory at this head dim) before
it launches: a bad key or value is an ``InputError`` naming it (``gluon.fwd.block_n``).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from kernels import spaces
from kernels.nvidia.gluon import static_check, unsupported_reason

LOG2E = 1.4426950408889634
TARGET = "sm_90a"
SPACE = "attention_gluon"  # the space of config["gluon"]
CONFIG_KEYS = ("implementation", "deterministic", "gluon")  # the keys of an attention config read here
KERNEL_DTYPES = (torch.float16, torch.bfloat16)


def _table() -> dict:
    return static_check.table()


def head_dims(direction: str) -> list[int]:
    """Head dims with a shipped Gluon config for ``direction`` ("fwd" or "bwd")."""
    return sorted(int(d) for d, entry in _table()["sm90"].items() if direction in entry)


# ----------------------------------------------------------------------------------------------
# Configs
# ----------------------------------------------------------------------------------------------


def validate_config(config: dict | None) -> None:
    """Raise ``InputError`` for a key or value the sm_90a attention space does not allow (the
    Triton kernels' keys and, under ``"gluon"``, the Gluon kernels' tiles)."""
    if config is not None:
        spaces.check("attention", TARGET, config, partial=True)


def tiles(head_dim: int, direction: str, config: dict | None = None, dtype_bytes: int = 2) -> dict:
    """The shipped config of ``direction`` at ``head_dim`` with ``config["gluon"][direction]`` over
    it, checked whole against the Gluon space at this head dim."""
    entry = {direction: _table()["sm90"][str(head_dim)][direction]}
    override = ((config or {}).get("gluon") or {}).get(direction)
    nested = spaces.get(SPACE, TARGET)
    try:
        merged = spaces.resolve(SPACE, TARGET, entry, {direction: override} if override else None,
                                {"head_dim": head_dim, "dtype_bytes": dtype_bytes})
    except spaces.ConfigError as err:
        raise err.under("gluon", [*nested.flat(), *nested.keys()]) from None
    return merged[direction]


# ----------------------------------------------------------------------------------------------
# Which implementation a problem gets
# ----------------------------------------------------------------------------------------------


def uncovered(problem, direction: str = "fwd") -> str | None:
    """Why the Gluon kernels cannot run ``problem`` (a :class:`kernels.attention.AttentionProblem`)
    here, or None when they can."""
    if problem.framework != "torch":
        return f"{problem.framework} arrays (the Gluon kernels are launched from PyTorch)"
    if not str(problem.device).startswith("cuda"):
        return f"{problem.device} tensors (Gluon has no interpreter)"
    why = unsupported_reason()
    if why:
        return why
    major, minor = torch.cuda.get_device_capability(torch.device(problem.device))
    if (major, minor) != (9, 0):
        return f"the Gluon kernels are built for Hopper (sm_90a); this GPU is sm_{major}{minor}"
    if problem.dtype not in ("float16", "bfloat16"):
        return f"dtype {problem.dtype} (the Gluon kernels take float16 and bfloat16)"
    if problem.bias_shape is not None or problem.has_mask:
        return "a bias or a boolean mask (the Gluon kernels take neither)"
    if problem.head_dim not in head_dims(direction):
        return f"head_dim {problem.head_dim} (the Gluon {direction} is built for {head_dims(direction)})"
    if direction == "bwd" and problem.batch * problem.heads * problem.q_len >= 2 ** 31:
        return "batch * heads * q_len >= 2^31 (the backward's 32-bit TMA coordinates)"
    return None


def proven_default(problem, direction: str) -> dict | None:
    """The ``"default"`` table entry that makes the Gluon kernels the default for ``problem``:
    same head dim, causality and direction, measured on this GPU model."""
    name = torch.cuda.get_device_name(torch.device(problem.device)) if str(problem.device).startswith("cuda") else None
    for entry in _table().get("default", []):
        if (entry["head_dim"] == problem.head_dim and entry["causal"] == problem.causal
                and entry["direction"] == direction and entry["device"] == name):
            return entry
    return None


def implementation_for(problem, config: dict | None = None, direction: str = "fwd") -> tuple[str, str]:
    """("gluon" or "triton", why) for ``problem`` in ``direction`` ("fwd" or "bwd") with ``config``."""
    validate_config(config)
    config = config or {}
    requested = config.get("implementation")
    if requested == "triton":
        return "triton", "config asks for the Triton kernels"
    if direction == "bwd" and config.get("deterministic"):
        return "triton", "config asks for a deterministic backward (the Triton dK/dV + dQ kernels)"
    why_not = uncovered(problem, direction)
    if requested == "gluon":
        if why_not is None:
            return "gluon", "config asks for the Gluon kernels"
        return "triton", f"config asks for the Gluon kernels, which do not take {why_not}: the Triton kernels run"
    if why_not is None:
        proven = proven_default(problem, direction)
        if proven is not None:
            return "gluon", f"measured right and faster on {proven['device']} ({proven['provenance']})"
    return "triton", ("the default: the Gluon kernels are opt-in (config={'implementation': 'gluon'}) until a "
                      "device run proves them right and faster for a problem")


def availability() -> tuple[str, str]:
    """(mode, reason) of the Gluon implementation on this machine, for ``kernels.backends.report``."""
    why = unsupported_reason()
    if why:
        return "unavailable", why
    if not torch.cuda.is_available():
        return "unavailable", ("no GPU visible to PyTorch, and Gluon has no interpreter: config={'implementation': "
                               "'gluon'} runs the interpreted Triton kernels instead")
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return "unavailable", f"the Gluon kernels are built for Hopper (sm_90a); this GPU is sm_{major}{minor}"
    defaults = len(_table().get("default", []))
    return "native", (f"{torch.cuda.get_device_name()}: opt-in with config={{'implementation': 'gluon'}}; the default "
                      f"for {defaults} measured problem(s)")


# ----------------------------------------------------------------------------------------------
# Launches
# ----------------------------------------------------------------------------------------------


def _empty(shape, like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Every buffer a kernel must fill completely comes from here (tests poison it with NaN)."""
    return torch.empty(shape, device=like.device, dtype=dtype or like.dtype)


def _tma_ready(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a contiguous, 16-byte-aligned (batch, seq, heads, head_dim) tensor."""
    if not t.is_contiguous():
        t = t.contiguous()
    if t.data_ptr() % 16:
        t = t.clone()
    return t


def _gl_dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _rows_descriptor(t: torch.Tensor, rows: int, cols: int | None = None):
    """A TMA descriptor over (batch, seq, heads * head_dim) with blocks of ``rows`` sequence
    positions of one head (``cols`` columns, the head dim by default): the hardware zero-fills a
    block's rows past its own sequence on load and clips them on store."""
    from kernels.nvidia.gluon.api import TensorDescriptor

    b, s, h, d = t.shape
    block = [1, rows, cols or d]
    return TensorDescriptor(t.view(b, s, h * d), [b, s, h * d], [s * h * d, h * d, 1], block,
                            static_check.smem_layout(block, _gl_dtype(t)))


def _vector_descriptor(t: torch.Tensor, rows: int):
    from kernels.nvidia.gluon.api import TensorDescriptor

    flat = t.view(-1)
    return TensorDescriptor(flat, [flat.numel()], [1], [rows], static_check.smem_layout([rows], "float32"))


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def forward(q, k, v, causal: bool, scale: float, config: dict | None = None):
    """(o, lse) by the Gluon forward: o like q, lse (batch, heads, q_len) float32, natural log."""
    from kernels.nvidia.gluon.attention_fwd import attention_fwd_kernel

    # The kernel takes the row max before scaling, which needs scale > 0 (0 * -inf is NaN):
    # softmax(s q k^T) = softmax(|s| q (-k)^T), and a zero scale gives the scores of a zero q.
    if scale < 0:
        k, scale = -k, -scale
    elif scale == 0:
        q, scale = torch.zeros_like(q), 1.0
    q, k, v = _tma_ready(q), _tma_ready(k), _tma_ready(v)
    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_k, kv_heads = k.shape[1], k.shape[2]
    knobs = tiles(head_dim, "fwd", config, q.element_size())
    c = static_check.fwd_constexprs(head_dim, causal, knobs)
    o = _empty(q.shape, q)
    lse = _empty((batch, heads, seqlen_q), q, torch.float32)
    n_mblocks = math.ceil(seqlen_q / c["BLOCK_M"])
    n_tiles = n_mblocks * batch * heads
    grid = (min(n_tiles, _sm_count(q.device.index or 0)),)
    attention_fwd_kernel[grid](
        _rows_descriptor(q, 64), _rows_descriptor(k, c["BLOCK_N"]), _rows_descriptor(v, c["BLOCK_N"]),
        _rows_descriptor(o, 64), lse, seqlen_q, seqlen_k, heads, heads // kv_heads, n_mblocks, batch * heads,
        float(scale) * LOG2E, **c, num_warps=4)
    return o, lse


def _delta(o: torch.Tensor, do: torch.Tensor) -> torch.Tensor:
    """rowsum(dO * O), (batch, heads, q_len) float32, by the Triton kernels' preprocess kernel."""
    import triton

    from kernels.triton import attention as triton_attention
    from kernels.triton_runtime import launcher

    batch, seqlen_q, heads, head_dim = o.shape
    delta = _empty((batch, heads, seqlen_q), o, torch.float32)
    block = 64
    launcher(triton_attention.KERNELS["preprocess"], on_gpu=o.is_cuda)[(triton.cdiv(seqlen_q, block), batch * heads)](
        o, do, delta, o.stride(0), o.stride(1), o.stride(2), do.stride(0), do.stride(1), do.stride(2), heads, seqlen_q,
        HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim, BLOCK_M=block)
    return delta


def backward(do, q, k, v, o, lse, causal: bool, scale: float, config: dict | None = None):
    """(dq, dk, dv) by the Gluon backward (dQ by float32 TMA reductions: not bitwise reproducible).
    Any scale works here: the backward takes no row max."""
    from kernels.nvidia.gluon.attention_bwd import attention_bwd_kernel

    do, q, k, v, o = (_tma_ready(t) for t in (do, q, k, v, o))
    lse = lse.contiguous()
    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_k, kv_heads = k.shape[1], k.shape[2]
    group = heads // kv_heads
    knobs = tiles(head_dim, "bwd", config, q.element_size())
    c = static_check.bwd_constexprs(head_dim, causal, knobs)
    delta = _delta(o, do)
    dq32 = torch.zeros((batch, seqlen_q, heads, head_dim), device=q.device, dtype=torch.float32)
    # Per query head; with GQA float32 slices, summed over each group below.
    out_dtype = q.dtype if group == 1 else torch.float32
    dk = _empty((batch, seqlen_k, heads, head_dim), q, out_dtype)
    dv = _empty((batch, seqlen_k, heads, head_dim), q, out_dtype)
    bm = c["BLOCK_M"]
    grid = (math.ceil(seqlen_k / c["BLOCK_N"]), batch * heads)
    attention_bwd_kernel[grid](
        _rows_descriptor(q, bm), _rows_descriptor(k, c["BLOCK_N"]), _rows_descriptor(v, c["BLOCK_N"]),
        _rows_descriptor(do, bm), _vector_descriptor(lse, bm), _vector_descriptor(delta, bm),
        _rows_descriptor(dq32, bm, static_check.DQ_PIECE), dk, dv, seqlen_q, seqlen_k, heads, group,
        float(scale) * LOG2E, float(scale), **c, num_warps=4)
    dq = dq32.to(q.dtype)
    if group > 1:
        dk = dk.view(batch, seqlen_k, kv_heads, group, head_dim).sum(3).to(k.dtype)
        dv = dv.view(batch, seqlen_k, kv_heads, group, head_dim).sum(3).to(v.dtype)
    return dq, dk, dv


def problem_of(q, k, bias, mask, causal: bool, scale: float) -> Any:
    """The :class:`kernels.attention.AttentionProblem` of torch tensors the backend was handed."""
    from kernels.attention.spec import AttentionProblem

    batch, q_len, heads, head_dim = q.shape
    return AttentionProblem(
        framework="torch", batch=batch, q_len=q_len, k_len=k.shape[1], heads=heads, kv_heads=k.shape[2],
        head_dim=head_dim, dtype=str(q.dtype).removeprefix("torch."), device=str(q.device), causal=bool(causal),
        scale=float(scale), bias_shape=None if bias is None else tuple(bias.shape), has_mask=mask is not None)
