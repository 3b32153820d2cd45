"""The specs of the triangle ops: what they accept, and the error each violation gets.

Triangle attention (cuEquivariance layout)
-------------------------------------------
* ``q, k, v``: (B, N, H, N, D), or (N, H, N, D) for one batch element (cuEquivariance's
  single-batch form; the result then has that form too). float16, bfloat16 or
  float32, one dtype (float64 on the ``reference`` backend). Dimension 1 (0 in the
  4-D form) is the row ``i`` of the pair tensor; each row is an independent
  attention of length N over the next-to-last dimension.
* ``bias``: (B, 1, H, N, N) (or (1, H, N, N)), any float dtype, shared by all N rows;
  computed with (and its gradient returned in) float32 precision, cast back to its dtype.
* ``mask``: optional (B, N, 1, 1, N) (or (N, 1, 1, N)), bool or any real dtype;
  nonzero = valid key (cast to bool, as cuEquivariance does). Rows with no valid
  key give zero output and zero gradients.
* ``scale``: default ``1/sqrt(D)``.
* head dim ``D``: each backend's range in :data:`HEAD_DIM_LIMITS`, checked before
  anything launches.

The ending-node orientation is the starting-node op on the transposed pair
tensor; :class:`kernels.triangle.modules.TriangleAttention` does the transposition.

Triangle multiplicative update (cuEquivariance's argument names)
-----------------------------------------------------------------
* ``x``: (*, N, N, c_z) with any number of leading batch dimensions (none, one,
  several); float16, bfloat16 or float32 (float64 on the ``reference`` backend).
* ``direction``: "outgoing" or "incoming" (see ``CONVENTIONS.md``).
* ``mask``: optional (*, N, N) with x's leading dimensions, bool or any real dtype;
  multiplies a and b.
* ``p_in_weight``, ``g_in_weight``: (2c, c_z); ``p_out_weight``: (c_z, c);
  ``g_out_weight``: (c_z, c_z); ``norm_in_*``: (c_z,); ``norm_out_*``: (c,); every
  bias optional (zero when absent), LayerNorm affine parameters optional (identity).
  Any float dtype: the four projection matrices are used in x's dtype (cast when
  they differ, as autocast would cast them), LayerNorm parameters and biases in
  float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kernels.arrays import require
from kernels.errors import InputError

DTYPES = ("float16", "bfloat16", "float32")
REFERENCE_DTYPES = (*DTYPES, "float64")
# bool, or any real dtype: nonzero = valid key (attention) / multiplies a and b (trimul).
MASK_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", *REFERENCE_DTYPES)
DIRECTIONS = ("outgoing", "incoming")

# The head dims (inclusive; None: no bound) each backend's triangle attention takes.
# nvidia/amd: the Triton kernels pad D to a power of two of at least 16 lanes; at 256
# every kernel still compiles for sm_90a within shared memory (139 KB at most; the
# dK/dV kernel spills from D = 128 on) and for gfx942 within its 64 KB of LDS without
# scratch. tpu: the Pallas flash attention's own range (kernels/tpu/attention.py).
# trainium: the NKI flash attention contracts over D in 128-partition chunks; bounded
# at 256 like kernels.attention.
HEAD_DIM_LIMITS: dict[str, tuple[int, int | None]] = {
    "reference": (1, None),
    "nvidia": (1, 256),
    "amd": (1, 256),
    "tpu": (32, 256),
    "trainium": (1, 256),
}


@dataclass(frozen=True)
class AttentionProblem:
    framework: str
    batch: int
    n: int
    heads: int
    head_dim: int
    dtype: str
    device: str
    has_mask: bool
    scale: float
    batched: bool = True  # False: the 4-D single-batch form (N, H, N, D)

    @property
    def flops(self) -> int:
        """Forward FLOPs of the attention core: two GEMMs per (row, head)."""
        return 4 * self.batch * self.n * self.heads * self.n * self.n * self.head_dim


def _same_place(name: str, info, like) -> None:
    if info.framework != like.framework or info.device != like.device:
        raise InputError(name, f"a {like.framework} array on {like.device}", f"a {info.framework} array on {info.device}")


def check_attention(q, k, v, bias, mask=None, scale=None) -> AttentionProblem:
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
    if min(b, n, h, d) < 1:
        raise InputError("q", f"a non-empty {form} array", f"shape {qi.shape}")
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
    return AttentionProblem(
        framework=qi.framework, batch=b, n=n, heads=h, head_dim=d, dtype=qi.dtype, device=qi.device,
        has_mask=mask is not None, scale=float(scale) if scale is not None else d**-0.5, batched=batched,
    )


def check_backend(problem: AttentionProblem | TrimulProblem, backend: str) -> None:
    """What ``backend`` alone limits: float64 (the reference only) and, for attention, the head dim."""
    if problem.dtype == "float64" and backend != "reference":
        name = "q" if isinstance(problem, AttentionProblem) else "x"
        raise InputError(name, f"dtype in {DTYPES} on backend {backend!r} (float64 runs on 'reference')", "float64")
    if isinstance(problem, AttentionProblem):
        low, high = HEAD_DIM_LIMITS[backend]
        if problem.head_dim < low or (high is not None and problem.head_dim > high):
            span = f"[{low}, {high}]" if high is not None else f">= {low}"
            raise InputError("q", f"head_dim in {span} on backend {backend!r}", str(problem.head_dim))


@dataclass(frozen=True)
class TrimulProblem:
    framework: str
    batch: int  # the product of the leading dimensions
    n: int
    c_z: int
    c_hidden: int
    dtype: str
    device: str
    direction: str
    has_mask: bool
    lead: tuple[int, ...] = (1,)  # x's leading (batch) dimensions as given

    @property
    def flops(self) -> int:
        """Forward FLOPs: six projections (2c_z.2c twice, c.c_z, c_z.c_z per pair) plus the contraction."""
        pairs = self.batch * self.n * self.n
        linear = 2 * pairs * (2 * self.c_z * 2 * self.c_hidden + self.c_hidden * self.c_z + self.c_z * self.c_z)
        return linear + 2 * self.batch * self.c_hidden * self.n**3


def check_trimul(x, direction, mask, weights: dict[str, Any]) -> TrimulProblem:
    xi = require("x", x)
    if len(xi.shape) < 3:
        raise InputError("x", "a (*, N, N, c_z) array (any number of leading batch dimensions)", f"shape {xi.shape}")
    *lead, n, n2, cz = xi.shape
    if n2 != n:
        raise InputError("x", "(*, N, N, c_z) with the two N dimensions equal", f"shape {xi.shape}")
    batch = math.prod(lead)
    if min(batch, n, cz) < 1:
        raise InputError("x", "a non-empty (*, N, N, c_z) array", f"shape {xi.shape}")
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
    return TrimulProblem(xi.framework, batch, n, cz, c, xi.dtype, xi.device, direction, mask is not None, tuple(lead))


def default_backend(device: str) -> str:
    """The device's vendor, else the reference (CPU arrays)."""
    from kernels.backends import default_for_device

    return default_for_device(device)
