"""Host side of the Gluon Hopper attention, the nvidia backend's opt-in implementation: which
problems it takes (``choice``, which :meth:`ceiling.op.Op.select` asks, and which
``ceiling.attention.implementation_for`` reports), its tiles (``tables/sm_90a/attention_gluon.json``
under ``config["gluon"]``, checked against ``kernels/spaces/attention_gluon.json``), the table
entries that make it a problem's default (``"default": true``, written by a device run that
proved it right and faster there), and the launches of its kernels
(:mod:`~ceiling.nvidia.gluon.attention_fwd`, :mod:`~ceiling.nvidia.gluon.attention_bwd`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

import torch

from ceiling import spaces, tables
from ceiling.constants import LOG2E
from ceiling.nvidia.gluon import tma_descriptors as gtd
from ceiling.nvidia.gluon import unsupported_reason

TARGET = "sm_90a"
SPACE = "attention_gluon"  # the space of config["gluon"]
DIRECTIONS = {"forward": "fwd", "backward": "bwd"}  # the op's directions -> this space's sections
BLOCK_M = 128  # forward query tile: two consumer warpgroups of 64 rows
BWD_BLOCK_N = 128  # backward key block: two consumer warpgroups of 64 keys
DQ_PIECE = 64  # backward dQ columns per TMA reduction
CONSUMER_REGS, PRODUCER_REGS = 240, 24  # FlashAttention-3's split of the register file


def shipped() -> dict[int, dict]:
    """Head dim -> its shipped tiles per section (``fwd``, ``bwd``): the head dims the kernels take,
    each an entry ``head_dim == D`` of the target's table (later ones, a point imported by
    ``ceiling import-point``, over earlier ones)."""
    table = tables.read(tables.path("nvidia", TARGET, SPACE))
    out: dict[int, dict] = {}
    for entry in table["entries"]:
        if not entry.get("default"):
            head_dim = int(entry["when"].split("==")[1])
            out[head_dim] = spaces.merge(out.get(head_dim, {}), entry["config"])
    return out


def head_dims(direction: str) -> list[int]:
    """Head dims with a shipped Gluon config for ``direction`` ("fwd" or "bwd")."""
    return sorted(d for d, entry in shipped().items() if direction in entry)


# ----------------------------------------------------------------------------------------------
# Which problems it runs (ceiling.op asks ``choice``), and with which tiles
# ----------------------------------------------------------------------------------------------


def uncovered(problem, direction: str = "fwd") -> str | None:
    """Why the Gluon kernels cannot run ``problem`` (a :class:`ceiling.attention.AttentionProblem`)
    here, or None when they can."""
    if problem.framework != "torch":
        return f"{problem.framework} arrays (the Gluon kernels are launched from PyTorch)"
    if not str(problem.device).startswith("cuda"):
        return f"{problem.device} tensors (Gluon has no interpreter)"
    why = unsupported_reason()
    if why:
        return why
    if problem.arch != "sm_90":
        return f"the Gluon kernels are built for Hopper (sm_90a); this GPU is {problem.arch}"
    if problem.dtype not in ("float16", "bfloat16"):
        return f"dtype {problem.dtype} (the Gluon kernels take float16 and bfloat16)"
    if problem.bias_shape is not None or problem.has_mask:
        return "a bias or a boolean mask (the Gluon kernels take neither)"
    if problem.head_dim not in head_dims(direction):
        return f"head_dim {problem.head_dim} (the Gluon {direction} is built for {head_dims(direction)})"
    if gtd.too_large(problem.batch, problem.q_len, problem.k_len, problem.heads, problem.head_dim, direction):
        return ("a dimension its tensor descriptors cannot hold (batch, q_len, k_len, heads * head_dim"
                f"{' or batch * heads * q_len' if direction == 'bwd' else ''} >= 2^31: Triton's 32-bit descriptor shapes)")
    return None


def proven_default(problem, direction: str) -> dict | None:
    """The table entry marked ``"default"`` that makes the Gluon kernels the default for
    ``problem`` in ``direction`` ("fwd" or "bwd"): measured right and faster on this GPU model."""
    features = {**problem.features(), "direction": direction}
    return tables.lookup("nvidia", SPACE, problem.gpu, TARGET, features).default


def choice(problem, config, direction: str) -> tuple[bool, str]:
    """(whether the Gluon kernels run ``problem`` in ``direction`` ("forward"/"backward"), why)."""
    direction = DIRECTIONS.get(direction, direction)
    config = config if isinstance(config, Mapping) else {}  # not a dict: refused where configs are resolved
    requested = config.get("implementation")
    if requested == "triton":
        return False, "config asks for the Triton kernels"
    if direction == "bwd" and config.get("deterministic"):
        return False, "config asks for a deterministic backward (the Triton dK/dV + dQ kernels)"
    why_not = uncovered(problem, direction)
    if requested == "gluon":
        if why_not is None:
            return True, "config asks for the Gluon kernels"
        return False, f"config asks for the Gluon kernels, which do not take {why_not}: the Triton kernels run"
    if why_not is None:
        proven = proven_default(problem, direction)
        if proven is not None:
            return True, f"measured right and faster on {proven['measured']['device']} ({proven['measured']['provenance']})"
    return False, ("the default: the Gluon kernels are opt-in (config={'implementation': 'gluon'}) until a "
                   "device run proves them right and faster for a problem")


def features(problem, user=None) -> dict:
    return {"direction": None}  # the "default" entries name a direction; the tiles do not


def heuristic(problem, user=None) -> dict:
    return {}  # the table has an entry for every head dim the kernels take (uncovered() refuses the rest)


def own(user) -> dict | None:
    """The Gluon tiles in an attention config: ``config["gluon"]``, after the whole config is
    checked against the sm_90a attention space (whose ``gluon`` key names the Gluon space)."""
    if user is None:
        return None
    spaces.check("attention", TARGET, user, partial=True)
    return user.get("gluon")


def resolve(problem, impl, user):
    """The shipped tiles for the head dim, ``config["gluon"]`` over them, checked against the Gluon
    space at this head dim; an error names the keys under ``gluon`` as the caller wrote them."""
    from ceiling.op import resolve_tabled

    nested = spaces.get(SPACE, TARGET)
    tiles = own(user)
    try:
        return resolve_tabled(problem, impl, tiles)
    except spaces.ConfigError as err:
        raise err.under("gluon", [*nested.flat(), *nested.keys()]) from None


def availability() -> tuple[str, str]:
    """(mode, reason) of the Gluon implementation on this machine, for ``ceiling.backends.report``."""
    why = unsupported_reason()
    if why:
        return "unavailable", why
    if not torch.cuda.is_available():
        return "unavailable", ("no GPU visible to PyTorch, and Gluon has no interpreter: config={'implementation': "
                               "'gluon'} runs the interpreted Triton kernels instead")
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return "unavailable", f"the Gluon kernels are built for Hopper (sm_90a); this GPU is sm_{major}{minor}"
    table = tables.read(tables.path("nvidia", TARGET, SPACE))
    defaults = sum(1 for e in table["entries"] if e.get("default"))
    return "native", (f"{torch.cuda.get_device_name()}: opt-in with config={{'implementation': 'gluon'}}; the default "
                      f"for {defaults} measured problem(s)")


# ----------------------------------------------------------------------------------------------
# Launches
# ----------------------------------------------------------------------------------------------


def fwd_constexprs(head_dim: int, causal: bool, knobs: dict) -> dict:
    """The forward kernel's compile-time constants at ``knobs`` (a ``fwd`` section): what a launch
    passes and the static check compiles."""
    return dict(HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_N=knobs["block_n"], NUM_STAGES=knobs["num_stages"],
                CAUSAL=bool(causal), EXP2_SPLIT=bool(knobs.get("exp2_split", False)),
                PINGPONG=bool(knobs.get("pingpong", True)), O_IN_Q=head_dim > 128,
                CONSUMER_REGS=knobs.get("consumer_regs", CONSUMER_REGS),
                PRODUCER_REGS=knobs.get("producer_regs", PRODUCER_REGS))


def bwd_constexprs(head_dim: int, causal: bool, knobs: dict) -> dict:
    """The backward kernel's compile-time constants at ``knobs`` (a ``bwd`` section)."""
    return dict(HEAD_DIM=head_dim, BLOCK_M=knobs["block_m"], BLOCK_N=BWD_BLOCK_N, NUM_STAGES=knobs["num_stages"],
                CAUSAL=bool(causal), CONSUMER_REGS=knobs.get("consumer_regs", CONSUMER_REGS),
                PRODUCER_REGS=knobs.get("producer_regs", PRODUCER_REGS))


def smem_layout(block: list[int], dtype: str):
    """The NVMMA shared layout of a TMA block: the launch's descriptors and the static check's
    signatures (:mod:`ceiling.nvidia.gluon.static_check`) use the same."""
    from ceiling.nvidia.gluon.api import gl

    return gl.NVMMASharedLayout.get_default_for(block, getattr(gl, dtype))


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
    from ceiling.nvidia.gluon.api import TensorDescriptor

    b, s, h, d = t.shape
    layout = smem_layout([1, rows, cols or d], _gl_dtype(t))
    desc = gtd.rows("", b, s, h, d, t.element_size(), rows, layout.swizzle_byte_width, cols)
    return TensorDescriptor(t.view(desc.shape), list(desc.shape), list(desc.strides), list(desc.block), layout)


def _vector_descriptor(t: torch.Tensor, rows: int):
    from ceiling.nvidia.gluon.api import TensorDescriptor

    flat = t.view(-1)
    layout = smem_layout([rows], "float32")
    desc = gtd.vector("", flat.numel(), rows, layout.swizzle_byte_width)
    return TensorDescriptor(flat, list(desc.shape), list(desc.strides), list(desc.block), layout)


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def refuse_other_gpus(problem) -> None:
    """An ``InputError`` for any GPU but Hopper, before anything compiles: the kernels are wgmma
    code, and compiling them for Blackwell ends the process in an LLVM error, not an exception.
    Off a GPU (no architecture) the tests' emulator runs them."""
    from ceiling.errors import InputError

    if problem.arch is not None and problem.arch != "sm_90":
        raise InputError("device", "a Hopper GPU (sm_90) for the Gluon attention kernels, which are built for sm_90a",
                         f"{problem.gpu or problem.device} ({problem.arch or 'no GPU architecture'})")


def forward(problem, config, q, k, v, bias=None, mask=None):
    """(o, lse) by the Gluon forward: o like q, lse (batch, heads, q_len) float32, natural log."""
    refuse_other_gpus(problem)
    from ceiling.nvidia.gluon.attention_fwd import attention_fwd_kernel

    causal, scale = problem.causal, problem.scale
    # The kernel takes the row max before scaling, which needs scale > 0 (0 * -inf is NaN):
    # softmax(s q k^T) = softmax(|s| q (-k)^T), and a zero scale gives the scores of a zero q.
    if scale < 0:
        k, scale = -k, -scale
    elif scale == 0:
        q, scale = torch.zeros_like(q), 1.0
    q, k, v = _tma_ready(q), _tma_ready(k), _tma_ready(v)
    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_k, kv_heads = k.shape[1], k.shape[2]
    c = fwd_constexprs(head_dim, causal, config["fwd"])
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

    from ceiling.triton import attention as triton_attention
    from ceiling.triton_runtime import launcher

    batch, seqlen_q, heads, head_dim = o.shape
    delta = _empty((batch, heads, seqlen_q), o, torch.float32)
    block = 64
    launcher(triton_attention.KERNELS["preprocess"], on_gpu=o.is_cuda)[(triton.cdiv(seqlen_q, block), batch * heads)](
        o, do, delta, o.stride(0), o.stride(1), o.stride(2), do.stride(0), do.stride(1), do.stride(2), heads, seqlen_q,
        HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim, BLOCK_M=block)
    return delta


def backward(problem, config, saved, grads, needs):
    """(dq, dk, dv, None) by the Gluon backward (dQ by float32 TMA reductions: not bitwise
    reproducible). Any scale works here: the backward takes no row max."""
    refuse_other_gpus(problem)
    from ceiling.nvidia.gluon.attention_bwd import attention_bwd_kernel

    causal, scale = problem.causal, problem.scale
    do, q, k, v, o = (_tma_ready(t) for t in (grads["out"], saved["q"], saved["k"], saved["v"], saved["out"]))
    lse = saved["lse"].contiguous()
    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_k, kv_heads = k.shape[1], k.shape[2]
    group = heads // kv_heads
    c = bwd_constexprs(head_dim, causal, config["bwd"])
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
        _rows_descriptor(dq32, bm, DQ_PIECE), dk, dv, seqlen_q, seqlen_k, heads, group,
        float(scale) * LOG2E, float(scale), **c, num_warps=4)
    dq = dq32.to(q.dtype)
    if group > 1:
        dk = dk.view(batch, seqlen_k, kv_heads, group, head_dim).sum(3).to(k.dtype)
        dv = dv.view(batch, seqlen_k, kv_heads, group, head_dim).sum(3).to(v.dtype)
    return dq, dk, dv, None
