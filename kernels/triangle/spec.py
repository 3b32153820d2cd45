"""The specs of the triangle ops: the frozen problems of triangle attention (cuEquivariance's layout,
or its 4-D single-batch form) and of the triangle multiplicative update (cuEquivariance's argument
names), and the ``InputError`` each violation gets before anything launches. The accepted shapes and
dtypes are listed in ``docs/triangle.md``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from ceiling.arrays import gpu_facts, require
from ceiling.errors import InputError
from ceiling.op import Problem

DTYPES = ("float16", "bfloat16", "float32")
REFERENCE_DTYPES = (*DTYPES, "float64")
# bool, or any real dtype: nonzero = valid key (attention) / multiplies a and b (trimul).
MASK_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", *REFERENCE_DTYPES)
DIRECTIONS = ("outgoing", "incoming")
# The multiplicative update's weights, in the order its op carries them.
TRIMUL_WEIGHTS = (
    "norm_in_weight", "norm_in_bias", "p_in_weight", "p_in_bias", "g_in_weight", "g_in_bias",
    "norm_out_weight", "norm_out_bias", "p_out_weight", "p_out_bias", "g_out_weight", "g_out_bias",
)

# The head dims (inclusive; None: no bound) each backend's triangle attention takes.
# nvidia/amd: the Triton kernels pad D to a power of two of at least 16 lanes; at 256
# every kernel still compiles for sm_90a within shared memory (139 KB at most; the
# dK/dV kernel spills from D = 128 on) and for gfx942 within its 64 KB of LDS without
# scratch. tpu: the Pallas flash attention's own range (kernels/tpu/attention.py).
# trainium: the NKI flash attention contracts over D in 128-partition chunks; bounded
# at 256 like ceiling.attention.
HEAD_DIM_LIMITS: dict[str, tuple[int, int | None]] = {
    "reference": (1, None),
    "nvidia": (1, 256),
    "amd": (1, 256),
    "tpu": (32, 256),
    "trainium": (1, 256),
}


@dataclass(frozen=True)
class TriangleAttentionProblem(Problem):
    """One call of triangle attention in its batched form (B, N, H, N, D); the single-batch
    4-D form is batch 1."""

    SIZES: ClassVar[tuple[str, ...]] = ("batch", "n", "heads")
    batch: int
    n: int
    heads: int
    head_dim: int
    dtype: str
    has_mask: bool
    scale: float
    bias_dtype: str

    @property
    def flops(self) -> int:
        """Forward FLOPs of the attention core: two GEMMs per (row, head)."""
        return 4 * self.batch * self.n * self.heads * self.n * self.n * self.head_dim


@dataclass(frozen=True)
class TrimulProblem(Problem):
    """One call of the triangle multiplicative update on (B, N, N, c_z), the leading batch
    dimensions flattened into ``batch``."""

    SIZES: ClassVar[tuple[str, ...]] = ("batch", "n")
    batch: int
    n: int
    c_z: int
    c: int  # the hidden width: p_in and g_in are (2c, c_z)
    dtype: str
    direction: str
    has_mask: bool
    eps: float

    @property
    def flops(self) -> int:
        """Forward FLOPs: six projections (2c_z.2c twice, c.c_z, c_z.c_z per pair) plus the contraction."""
        pairs = self.batch * self.n * self.n
        linear = 2 * pairs * (2 * self.c_z * 2 * self.c + self.c * self.c_z + self.c_z * self.c_z)
        return linear + 2 * self.batch * self.c * self.n**3


@functools.lru_cache(maxsize=256)
def rows_attention(problem: TriangleAttentionProblem):
    """One batch element of ``problem`` as a ``ceiling.attention`` problem: the N pair rows are its
    batch, the bias (1, H, N, N) is shared by the rows and the mask (N, 1, 1, N) is a key mask per
    row. The TPU and Trainium triangle attentions run their flash attention on it."""
    from ceiling.attention.spec import AttentionProblem

    p = problem
    return AttentionProblem(framework=p.framework, device=p.device, gpu=p.gpu, arch=p.arch, batch=p.n, q_len=p.n,
                            k_len=p.n, heads=p.heads, kv_heads=p.heads, head_dim=p.head_dim, dtype=p.dtype,
                            causal=False, scale=p.scale, bias_shape=(1, p.heads, p.n, p.n), has_mask=p.has_mask,
                            bias_dtype=p.bias_dtype)


def _same_place(name: str, info, like) -> None:
    if info.framework != like.framework or info.device != like.device:
        raise InputError(name, f"a {like.framework} array on {like.device}", f"a {info.framework} array on {info.device}")


def check_attention(q, k, v, bias, mask=None, scale=None) -> TriangleAttentionProblem:
    """The checks on shapes, dtypes and devices that hold for every backend (see :func:`check_backend`)."""
    qi, ki, vi, bi = require("q", q), require("k", k), require("v", v), require("bias", bias)
    if len(qi.shape) not in (4, 5):
        raise InputError("q", "a 5-D (B, N, H, N, D) array or the 4-D (N, H, N, D) form of one batch element",
                         f"shape {qi.shape}")
    batched = len(qi.shape) == 5
    b, n, h, n2, d = qi.shape if batched else (1, *qi.shape)
    form = "(B, N, H, N, D)" if batched else "(N, H, N, D)"
    if n2 != n:
        raise InputError("q", f"{form} with the two N dimensions equal", f"shape {qi.shape}")
    if d < 1:  # an empty batch, N or head dimension is a problem (empty outputs); no head dim is not
        raise InputError("q", f"a {form} array with a head dim of at least 1", f"shape {qi.shape}")
    if qi.dtype not in REFERENCE_DTYPES:
        raise InputError("q", f"dtype in {DTYPES} (float64 on the reference)", qi.dtype)
    for name, info in (("k", ki), ("v", vi)):
        if info.framework != qi.framework:
            raise InputError(name, f"a {qi.framework} array like q", f"a {info.framework} array")
        if info.shape != qi.shape:
            raise InputError(name, f"shape {qi.shape} like q", f"shape {info.shape}")
        if info.dtype != qi.dtype:
            raise InputError(name, f"dtype {qi.dtype} like q", info.dtype)
        if info.device != qi.device:
            raise InputError(name, f"device {qi.device} like q", info.device)
    _same_place("bias", bi, qi)
    bias_shape = (b, 1, h, n, n) if batched else (1, h, n, n)
    if bi.shape != bias_shape:
        raise InputError("bias", f"shape {bias_shape}", f"shape {bi.shape}")
    if bi.dtype not in REFERENCE_DTYPES:
        raise InputError("bias", f"dtype in {REFERENCE_DTYPES}", bi.dtype)
    if mask is not None:
        mi = require("mask", mask)
        _same_place("mask", mi, qi)
        mask_shape = (b, n, 1, 1, n) if batched else (n, 1, 1, n)
        if mi.shape != mask_shape:
            raise InputError("mask", f"shape {mask_shape}", f"shape {mi.shape}")
        if mi.dtype not in MASK_DTYPES:
            raise InputError("mask", "dtype bool or a real dtype (nonzero = valid key)", mi.dtype)
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale)):
        raise InputError("scale", "a finite Python float or None", repr(scale))
    gpu, arch = gpu_facts(qi.framework, qi.device)
    return TriangleAttentionProblem(
        framework=qi.framework, device=qi.device, gpu=gpu, arch=arch, batch=b, n=n, heads=h, head_dim=d,
        dtype=qi.dtype, has_mask=mask is not None, scale=float(scale) if scale is not None else d**-0.5,
        bias_dtype=bi.dtype,
    )


def check_attention_arrays(q, k, v, bias, mask, *, scale: float) -> TriangleAttentionProblem:
    """:func:`check_attention` with the arrays in the op's signature order (``ceiling.op.Op.check``)."""
    return check_attention(q, k, v, bias, mask, scale)


def check_backend(problem: TriangleAttentionProblem | TrimulProblem, backend: str) -> None:
    """What ``backend`` alone limits: float64 (the reference only) and, for attention, the head dim."""
    if problem.dtype == "float64" and backend != "reference":
        name = "q" if isinstance(problem, TriangleAttentionProblem) else "x"
        raise InputError(name, f"dtype in {DTYPES} on backend {backend!r} (float64 runs on 'reference')", "float64")
    if isinstance(problem, TriangleAttentionProblem):
        low, high = HEAD_DIM_LIMITS[backend]
        if problem.head_dim < low or (high is not None and problem.head_dim > high):
            span = f"[{low}, {high}]" if high is not None else f">= {low}"
            raise InputError("q", f"head_dim in {span} on backend {backend!r}", str(problem.head_dim))


def check_trimul(x, direction, mask, weights: dict[str, Any], eps: float = 1e-5) -> TrimulProblem:
    xi = require("x", x)
    if len(xi.shape) < 3:
        raise InputError("x", "a (*, N, N, c_z) array (any number of leading batch dimensions)", f"shape {xi.shape}")
    *lead, n, n2, cz = xi.shape
    if n2 != n:
        raise InputError("x", "(*, N, N, c_z) with the two N dimensions equal", f"shape {xi.shape}")
    batch = math.prod(lead)
    if cz < 1:  # an empty batch or N is a problem (an empty output); no channels are not
        raise InputError("x", "a (*, N, N, c_z) array with c_z of at least 1", f"shape {xi.shape}")
    if xi.dtype not in REFERENCE_DTYPES:
        raise InputError("x", f"dtype in {DTYPES} (float64 on the reference)", xi.dtype)
    if direction not in DIRECTIONS:
        raise InputError("direction", f"one of {DIRECTIONS}", repr(direction))
    if mask is not None:
        mi = require("mask", mask)
        if mi.shape != (*lead, n, n):
            raise InputError("mask", f"shape {(*lead, n, n)} (x's leading dimensions, then N, N)", f"shape {mi.shape}")
        _same_place("mask", mi, xi)
        if mi.dtype not in MASK_DTYPES:
            raise InputError("mask", "dtype bool or a real dtype", mi.dtype)
    for required in ("p_in_weight", "g_in_weight", "p_out_weight", "g_out_weight"):
        if weights.get(required) is None:
            raise InputError(required, "a weight array (it has no default)", "None")
    pin = require("p_in_weight", weights["p_in_weight"])
    if len(pin.shape) != 2 or pin.shape[1] != cz or pin.shape[0] % 2 or pin.shape[0] == 0:
        raise InputError("p_in_weight", f"shape (2c, {cz}) with c >= 1", f"shape {pin.shape}")
    c = pin.shape[0] // 2
    expected = {
        "p_in_weight": (2 * c, cz), "norm_in_weight": (cz,), "norm_in_bias": (cz,),
        "p_in_bias": (2 * c,), "g_in_weight": (2 * c, cz), "g_in_bias": (2 * c,),
        "norm_out_weight": (c,), "norm_out_bias": (c,),
        "p_out_weight": (cz, c), "p_out_bias": (cz,), "g_out_weight": (cz, cz), "g_out_bias": (cz,),
    }
    for name, shape in expected.items():
        w = weights.get(name)
        if w is None:
            continue
        wi = require(name, w)
        if wi.shape != shape:
            raise InputError(name, f"shape {shape}", f"shape {wi.shape}")
        _same_place(name, wi, xi)
        if wi.dtype not in DTYPES and not (wi.dtype == "float64" and xi.dtype == "float64"):
            raise InputError(name, f"dtype in {DTYPES} (float64 with a float64 x)", wi.dtype)
    gpu, arch = gpu_facts(xi.framework, xi.device)
    return TrimulProblem(framework=xi.framework, device=xi.device, gpu=gpu, arch=arch, batch=batch, n=n, c_z=cz, c=c,
                         dtype=xi.dtype, direction=direction, has_mask=mask is not None, eps=float(eps))


def check_trimul_arrays(x, mask, *weights, direction: str, eps: float) -> TrimulProblem:
    """:func:`check_trimul` with the arrays in the op's signature order (``ceiling.op.Op.check``)."""
    return check_trimul(x, direction, mask, dict(zip(TRIMUL_WEIGHTS, weights)), eps)


def default_backend(device: str) -> str:
    """The device's vendor, else the reference (CPU arrays)."""
    from ceiling.backends import default_for_device

    return default_for_device(device)


# The device each Triton target's compile specs and tuning sweeps are written for.
# the GPU whose configs a target's compile specs, templates and tests are written for
SHIPPED_GPUS = {"sm_90a": ("NVIDIA H200", "sm_90"), "sm_100a": ("NVIDIA B200", "sm_100"), "sm_103a": ("NVIDIA B300", "sm_103"),
                "gfx942": ("AMD Instinct MI300X", "gfx942"), "gfx950": ("AMD Instinct MI355X", "gfx950")}


def shipped_attention_problem(head_dim: int = 32, dtype: str = "bfloat16", *, target: str | None = None,
                              batch: int = 1, n: int = 384, heads: int = 4,
                              framework: str = "torch") -> TriangleAttentionProblem:
    """A masked problem at AlphaFold 3's widths on ``target``'s GPU (none: the CPU), as the compile
    specs and tuning sweeps are written for: no arrays needed, so a CPU can ask what a device runs."""
    gpu, arch = SHIPPED_GPUS[target] if target else (None, None)
    return TriangleAttentionProblem(framework=framework, device="cuda:0" if gpu else "cpu", gpu=gpu, arch=arch,
                                    batch=batch, n=n, heads=heads, head_dim=head_dim, dtype=dtype, has_mask=True,
                                    scale=head_dim**-0.5, bias_dtype="float32")


def shipped_trimul_problem(dtype: str = "bfloat16", c_z: int = 128, c: int = 128, *, target: str | None = None,
                           batch: int = 1, n: int = 768, direction: str = "outgoing",
                           framework: str = "torch") -> TrimulProblem:
    """:func:`shipped_attention_problem` for the multiplicative update (masked, AlphaFold 3's widths)."""
    gpu, arch = SHIPPED_GPUS[target] if target else (None, None)
    return TrimulProblem(framework=framework, device="cuda:0" if gpu else "cpu", gpu=gpu, arch=arch, batch=batch,
                         n=n, c_z=c_z, c=c, dtype=dtype, direction=direction, has_mask=True, eps=1e-5)
