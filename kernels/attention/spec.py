"""The attention spec: the frozen ``AttentionProblem`` a call computes, and :func:`check`, which
builds it from the arrays and gives each violation its ``InputError`` naming the argument, on
shapes, dtypes and devices alone, before any kernel launches."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from ceiling.arrays import device_kind, gpu_facts, require
from ceiling.errors import InputError
from ceiling.op import Problem

KERNEL_DTYPES = ("float16", "bfloat16")
REFERENCE_DTYPES = ("float16", "bfloat16", "float32", "float64")
BIAS_DTYPES = ("float16", "bfloat16", "float32", "float64")
HEAD_DIM_RANGE = (32, 256)


@dataclass(frozen=True)
class AttentionProblem(Problem):
    SIZES: ClassVar[tuple[str, ...]] = ("batch", "q_len", "k_len", "heads")
    batch: int
    q_len: int
    k_len: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype: str
    causal: bool
    scale: float
    bias_shape: tuple[int, ...] | None
    has_mask: bool
    bias_dtype: str | None = None

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    @property
    def flops(self) -> int:
        """Forward FLOPs by the FlashAttention convention (halved when causal and square)."""
        f = 4 * self.batch * self.heads * self.q_len * self.k_len * self.head_dim
        return f // 2 if self.causal else f

    @property
    def biased(self) -> bool:
        """A bias or mask tile is loaded next to the scores."""
        return self.bias_shape is not None or self.has_mask

    def features(self) -> dict:
        return {**super().features(), "group": self.group, "biased": self.biased,
                "dtype_bytes": 2 if self.dtype in ("float16", "bfloat16") else 4}


def _broadcastable(shape: tuple[int, ...], full: tuple[int, ...]) -> bool:
    if len(shape) > len(full):
        return False
    return all(s in (1, f) for s, f in zip(reversed(shape), reversed(full)))


def check(
    q: Any,
    k: Any,
    v: Any,
    *,
    causal: bool = False,
    scale: float | None = None,
    bias: Any = None,
    mask: Any = None,
    backend: str | None = None,
) -> AttentionProblem:
    """The problem of ``out = softmax(scale * q @ k^T + bias, masked) @ v`` per (batch, head), with

    * ``q``: (batch, q_len, heads, head_dim); ``k``, ``v``: (batch, k_len, kv_heads, head_dim).
      ``kv_heads`` divides ``heads`` (GQA; MQA is ``kv_heads == 1``): query head ``h`` reads
      key/value head ``h // (heads // kv_heads)``. q_len and k_len may differ.
    * head_dim from 32 to 256, the same for q, k and v (any value: 80 and 96 run on a padded
      power of two inside the kernels).
    * dtypes: float16 or bfloat16 on every backend; float32 and float64 only on the reference.
      q, k and v share one dtype.
    * ``scale``: defaults to ``1 / sqrt(head_dim)``.
    * ``causal``: key ``j`` is visible to query ``i`` when ``j <= i + k_len - q_len`` (the
      diagonal aligned to the bottom right, as in FlashAttention >= 2.1). With q_len > k_len the
      first ``q_len - k_len`` queries see nothing.
    * ``bias``: an additive float array broadcastable to (batch, heads, q_len, k_len) (numpy
      rules, up to 4 dimensions), any float dtype. It is differentiable; its gradient has the
      bias's shape (summed over the broadcast dimensions) and dtype.
    * ``mask``: a boolean array broadcastable likewise; True means attend.
    * A query that sees no key at all (masked out, or above the causal diagonal) gets output 0,
      log-sum-exp ``-inf`` and zero gradients, never NaN.
    * ``return_lse`` (of ``ceiling.attention``): also return the log-sum-exp of the scaled,
      biased scores, natural log, (batch, heads, q_len) float32.
    """
    qi, ki, vi = require("q", q), require("k", k), require("v", v)
    for name, info in (("k", ki), ("v", vi)):
        if info.framework != qi.framework:
            raise InputError(name, f"a {qi.framework} array like q", f"a {info.framework} array")
    for name, info in (("q", qi), ("k", ki), ("v", vi)):
        if len(info.shape) != 4:
            raise InputError(name, "a 4-D (batch, seq, heads, head_dim) array", f"shape {info.shape}")
    batch, q_len, heads, head_dim = qi.shape
    _, k_len, kv_heads, k_dim = ki.shape
    if k_dim != head_dim:
        raise InputError("k", f"head_dim {head_dim} like q (shape {qi.shape})", f"shape {ki.shape}")
    if ki.shape[0] != batch:
        raise InputError("k", f"batch {batch} like q", f"shape {ki.shape}")
    if vi.shape != ki.shape:
        raise InputError("v", f"the shape of k, {ki.shape}", f"shape {vi.shape}")
    # an empty batch, sequence or head dimension is a problem (the reference's answer: empty
    # outputs; with no key, each query's 0 and log-sum-exp -inf)
    if (heads == 0) != (kv_heads == 0):
        raise InputError("k", f"a number of heads that divides q's {heads}", f"{kv_heads} heads")
    if kv_heads and heads % kv_heads:
        raise InputError("k", f"a number of heads that divides q's {heads}", f"{kv_heads} heads")
    if not HEAD_DIM_RANGE[0] <= head_dim <= HEAD_DIM_RANGE[1]:
        raise InputError("q", f"head_dim in [{HEAD_DIM_RANGE[0]}, {HEAD_DIM_RANGE[1]}]", str(head_dim))

    allowed = REFERENCE_DTYPES if backend in (None, "reference") else KERNEL_DTYPES
    if qi.dtype not in allowed:
        where = "" if backend in (None, "reference") else f" on backend {backend!r} (float32 runs on 'reference')"
        raise InputError("q", f"dtype in {allowed}{where}", qi.dtype)
    for name, info in (("k", ki), ("v", vi)):
        if info.dtype != qi.dtype:
            raise InputError(name, f"dtype {qi.dtype} like q", info.dtype)
        if info.device != qi.device:
            raise InputError(name, f"device {qi.device} like q", info.device)

    full = (batch, heads, q_len, k_len)
    bias_shape = bias_dtype = None
    if bias is not None:
        bi = require("bias", bias)
        if bi.framework != qi.framework:
            raise InputError("bias", f"a {qi.framework} array like q", f"a {bi.framework} array")
        if not _broadcastable(bi.shape, full):
            raise InputError("bias", f"a shape broadcastable to (batch, heads, q_len, k_len) = {full}", f"shape {bi.shape}")
        if bi.dtype not in BIAS_DTYPES:
            raise InputError("bias", f"dtype in {BIAS_DTYPES}", bi.dtype)
        if bi.device != qi.device:
            raise InputError("bias", f"device {qi.device} like q", bi.device)
        bias_shape, bias_dtype = bi.shape, bi.dtype
    if mask is not None:
        mi = require("mask", mask)
        if mi.framework != qi.framework:
            raise InputError("mask", f"a {qi.framework} array like q", f"a {mi.framework} array")
        if mi.dtype != "bool":
            raise InputError("mask", "a boolean array (True = attend)", mi.dtype)
        if not _broadcastable(mi.shape, full):
            raise InputError("mask", f"a shape broadcastable to (batch, heads, q_len, k_len) = {full}", f"shape {mi.shape}")
        if mi.device != qi.device:
            raise InputError("mask", f"device {qi.device} like q", mi.device)
    if not isinstance(causal, bool):
        raise InputError("causal", "a bool", repr(causal))
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    elif not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise InputError("scale", "a finite Python float or None", repr(scale))
    gpu, arch = gpu_facts(qi.framework, qi.device)
    return AttentionProblem(
        gpu=gpu,
        arch=arch,
        framework=qi.framework,
        batch=batch,
        q_len=q_len,
        k_len=k_len,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        dtype=qi.dtype,
        device=qi.device,
        causal=causal,
        scale=float(scale),
        bias_shape=bias_shape,
        has_mask=mask is not None,
        bias_dtype=bias_dtype,
    )


def check_arrays(q: Any, k: Any, v: Any, bias: Any, mask: Any, **static: Any) -> AttentionProblem:
    """:func:`check` with the arrays in the op's signature order (``ceiling.op.Op.check``)."""
    return check(q, k, v, bias=bias, mask=mask, **static)


def default_backend(problem: AttentionProblem) -> str:
    """The device's vendor for GPU arrays (reference for float32), else the reference."""
    from ceiling.backends import default_for_device

    if problem.dtype not in KERNEL_DTYPES or device_kind(problem.device) != "cuda":
        return "reference"  # JAX arrays reach the attention kernels only when a backend is named
    return default_for_device(problem.device)


def shipped_problem(head_dim: int, dtype: str, *, causal: bool, biased: bool = False, gpu: str | None = None,
                    arch: str | None = None, batch: int = 4, seq: int = 4096, heads: int = 32) -> AttentionProblem:
    """A PyTorch problem on the named GPU, as the compile specs and tables are written for: no
    arrays needed, so a CPU can ask what a device would run."""
    full = (batch, heads, seq, seq)
    return AttentionProblem(framework="torch", device="cuda:0" if gpu else "cpu", gpu=gpu, arch=arch, batch=batch,
                            q_len=seq, k_len=seq, heads=heads, kv_heads=heads, head_dim=head_dim, dtype=dtype,
                            causal=causal, scale=head_dim ** -0.5, bias_shape=full if biased else None,
                            has_mask=biased, bias_dtype="float32" if biased else None)
