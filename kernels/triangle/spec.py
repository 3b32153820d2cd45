"""The specs of the triangle ops: what they accept, and the error each violation gets.

Triangle attention (cuEquivariance layout)
-------------------------------------------
* ``q, k, v``: (B, N, H, N, D), float16, bfloat16 or float32, one dtype. Dimension 1
  is the row ``i`` of the pair tensor; each row is an independent attention of
  length N over dimension 3. The last dimension must be unit-stride.
* ``bias``: (B, 1, H, N, N), any float dtype, shared by all N rows; computed with
  (and its gradient returned in) float32 precision, cast back to its dtype.
* ``mask``: optional (B, N, 1, 1, N) bool, True = valid key. Rows with no valid
  key give zero output and zero gradients.
* ``scale``: default ``1/sqrt(D)``.

The ending-node orientation is the starting-node op on the transposed pair
tensor; :class:`kernels.triangle.modules.TriangleAttention` does the transposition.

Triangle multiplicative update (cuEquivariance's argument names)
-----------------------------------------------------------------
* ``x``: (B, N, N, c_z) or (N, N, c_z); float16, bfloat16 or float32.
* ``direction``: "outgoing" or "incoming" (see ``CONVENTIONS.md``).
* ``mask``: optional (B, N, N) (or (N, N)), bool or float; multiplies a and b.
* ``p_in_weight``, ``g_in_weight``: (2c, c_z); ``p_out_weight``: (c_z, c);
  ``g_out_weight``: (c_z, c_z); ``norm_in_*``: (c_z,); ``norm_out_*``: (c,); every
  bias optional (zero when absent), LayerNorm affine parameters optional (identity).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernels.arrays import require
from kernels.errors import InputError

DTYPES = ("float16", "bfloat16", "float32")
DIRECTIONS = ("outgoing", "incoming")




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

    @property
    def flops(self) -> int:
        """Forward FLOPs of the attention core: two GEMMs per (row, head)."""
        return 4 * self.batch * self.n * self.heads * self.n * self.n * self.head_dim


def check_attention(q, k, v, bias, mask=None, scale=None) -> AttentionProblem:
    qi, ki, vi, bi = require("q", q), require("k", k), require("v", v), require("bias", bias)
    if len(qi.shape) != 5:
        raise InputError("q", "a 5-D (B, N, H, N, D) array", f"shape {qi.shape}")
    b, n, h, n2, d = qi.shape
    if n2 != n:
        raise InputError("q", "(B, N, H, N, D) with dimensions 1 and 3 equal", f"shape {qi.shape}")
    if qi.dtype not in DTYPES:
        raise InputError("q", f"dtype in {DTYPES}", qi.dtype)
    for name, info in (("k", ki), ("v", vi)):
        if info.framework != qi.framework:
            raise InputError(name, f"a {qi.framework} array like q", f"a {info.framework} array")
        if info.shape != qi.shape:
            raise InputError(name, f"shape {qi.shape} like q", f"shape {info.shape}")
        if info.dtype != qi.dtype:
            raise InputError(name, f"dtype {qi.dtype} like q", info.dtype)
        if info.device != qi.device:
            raise InputError(name, f"device {qi.device} like q", info.device)
    if bi.framework != qi.framework or bi.device != qi.device:
        raise InputError("bias", f"a {qi.framework} array on {qi.device}", f"a {bi.framework} array on {bi.device}")
    if bi.shape != (b, 1, h, n, n):
        raise InputError("bias", f"shape {(b, 1, h, n, n)}", f"shape {bi.shape}")
    if bi.dtype not in DTYPES:
        raise InputError("bias", f"dtype in {DTYPES}", bi.dtype)
    if mask is not None:
        mi = require("mask", mask)
        if mi.framework != qi.framework or mi.device != qi.device:
            raise InputError("mask", f"a {qi.framework} array on {qi.device}", f"a {mi.framework} array on {mi.device}")
        if mi.shape != (b, n, 1, 1, n):
            raise InputError("mask", f"shape {(b, n, 1, 1, n)}", f"shape {mi.shape}")
        if mi.dtype != "bool":
            raise InputError("mask", "dtype bool (True = valid key)", mi.dtype)
    if scale is not None and not isinstance(scale, (int, float)):
        raise InputError("scale", "a Python float or None", type(scale).__name__)
    return AttentionProblem(
        framework=qi.framework, batch=b, n=n, heads=h, head_dim=d, dtype=qi.dtype, device=qi.device,
        has_mask=mask is not None, scale=float(scale) if scale is not None else d**-0.5,
    )


@dataclass(frozen=True)
class TrimulProblem:
    framework: str
    batch: int
    n: int
    c_z: int
    c_hidden: int
    dtype: str
    device: str
    direction: str
    has_mask: bool

    @property
    def flops(self) -> int:
        """Forward FLOPs: six projections (2c_z.2c twice, c.c_z, c_z.c_z per pair) plus the contraction."""
        pairs = self.batch * self.n * self.n
        linear = 2 * pairs * (2 * self.c_z * 2 * self.c_hidden + self.c_hidden * self.c_z + self.c_z * self.c_z)
        return linear + 2 * self.batch * self.c_hidden * self.n**3


def check_trimul(x, direction, mask, weights: dict[str, Any]) -> TrimulProblem:
    xi = require("x", x)
    if len(xi.shape) != 4:
        raise InputError("x", "a (B, N, N, c_z) array", f"shape {xi.shape}")
    b, n, n2, cz = xi.shape
    if n2 != n:
        raise InputError("x", "(B, N, N, c_z) with dimensions 1 and 2 equal", f"shape {xi.shape}")
    if xi.dtype not in DTYPES:
        raise InputError("x", f"dtype in {DTYPES}", xi.dtype)
    if direction not in DIRECTIONS:
        raise InputError("direction", f"one of {DIRECTIONS}", repr(direction))
    if mask is not None:
        mi = require("mask", mask)
        if mi.shape != (b, n, n):
            raise InputError("mask", f"shape {(b, n, n)}", f"shape {mi.shape}")
        if mi.framework != xi.framework or mi.device != xi.device:
            raise InputError("mask", f"a {xi.framework} array on {xi.device}", f"a {mi.framework} array on {mi.device}")
    for required in ("p_in_weight", "g_in_weight", "p_out_weight", "g_out_weight"):
        if weights.get(required) is None:
            raise InputError(required, "a weight array (it has no default)", "None")
    pin = require("p_in_weight", weights["p_in_weight"])
    if len(pin.shape) != 2 or pin.shape[1] != cz or pin.shape[0] % 2:
        raise InputError("p_in_weight", f"shape (2c, {cz})", f"shape {pin.shape}")
    c = pin.shape[0] // 2
    expected = {
        "norm_in_weight": (cz,), "norm_in_bias": (cz,),
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
        if wi.framework != xi.framework or wi.device != xi.device:
            raise InputError(name, f"a {xi.framework} array on {xi.device}", f"a {wi.framework} array on {wi.device}")
        if wi.dtype not in DTYPES:
            raise InputError(name, f"dtype in {DTYPES}", wi.dtype)
    return TrimulProblem(xi.framework, b, n, cz, c, xi.dtype, xi.device, direction, mask is not None)


def default_backend(device: str) -> str:
    """The device's vendor, else the reference (CPU arrays)."""
    from kernels.backends import default_for_device

    return default_for_device(device)
