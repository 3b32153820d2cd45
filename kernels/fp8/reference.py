"""The quantization oracle in float32 with plain PyTorch (and jnp): a group's scale is the amax of
its finite elements over the format's largest value, floored so an all-zero group gets a finite
nonzero scale, optionally rounded up to a power of two (DeepGEMM's UE8M0); a finite element
becomes ``round_to_nearest_even(clamp(x / scale))``; NaN stays NaN, an infinity stays infinite
where the format has one (e5m2) and becomes NaN where it has none. Also the ``fp8_quantize``
op's reference implementation.
"""

from __future__ import annotations

import torch

from ceiling.fp8.formats import Format, format_of

GRANULARITIES = ("tensor", "row", "1x128", "128x128")
GROUP = 128  # elements along K (and rows, for 128x128) that share one scale
AMAX_FLOOR = 2.0**-100  # far inside float32: its reciprocal and products of two scales stay finite


def scale_shape(granularity: str, rows: int, cols: int) -> tuple[int, ...]:
    """Shape of the scales of a (rows, cols) operand quantized along cols (its K)."""
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    return {"tensor": (), "row": (rows, 1), "1x128": (rows, cdiv(cols, GROUP)),
            "128x128": (cdiv(rows, GROUP), cdiv(cols, GROUP))}[granularity]


def pow2_ceil(x: torch.Tensor) -> torch.Tensor:
    """The smallest power of two >= x, for positive normal float32 x (exact, by the bits)."""
    bits = x.float().view(torch.int32)
    exponent = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).int()
    return (exponent.clamp(1, 254) << 23).view(torch.float32)


def scales_from_amax(amax: torch.Tensor, fmt: Format, pow2: bool = False) -> torch.Tensor:
    scale = torch.clamp(amax.float(), min=AMAX_FLOOR) / fmt.max
    return pow2_ceil(scale) if pow2 else scale


def encode(x: torch.Tensor, scale: torch.Tensor, fmt: Format) -> torch.Tensor:
    """``x`` (float32) times ``1/scale`` (broadcast), as FP8 codes of ``fmt`` by the rules above."""
    y = torch.clamp(x * (1.0 / scale), -fmt.max, fmt.max)
    special = torch.full_like(x, float("nan"))
    if fmt.has_inf:
        special = torch.where(torch.isinf(x), x, special)
    return torch.where(torch.isfinite(x), y, special).to(fmt.dtype)


def _group_amax(a: torch.Tensor, granularity: str) -> torch.Tensor:
    """Per-group max of ``a`` (finite |x|, zero elsewhere), in the scale shape."""
    rows, cols = a.shape
    if granularity == "tensor":
        return a.amax() if a.numel() else a.new_zeros(())
    if granularity == "row":
        return a.amax(dim=1, keepdim=True) if cols else a.new_zeros(rows, 1)
    pr = -(-rows // GROUP) * GROUP if granularity == "128x128" else rows
    pc = -(-cols // GROUP) * GROUP
    padded = a.new_zeros(pr, pc)
    padded[:rows, :cols] = a
    if granularity == "1x128":
        return padded.view(rows, pc // GROUP, GROUP).amax(dim=2)
    return padded.view(pr // GROUP, GROUP, pc // GROUP, GROUP).amax(dim=(1, 3))


def expand(scale: torch.Tensor, granularity: str, rows: int, cols: int) -> torch.Tensor:
    """Scales broadcast to every element of a (rows, cols) operand."""
    if granularity == "tensor":
        return scale.reshape(1, 1).expand(rows, cols)
    if granularity == "row":
        return scale.reshape(rows, 1).expand(rows, cols)
    # An index gather, not repeat_interleave + slice: torch.compile (Inductor, CPU, PyTorch 2.13)
    # miscompiles the latter's slice.
    s = scale[:, torch.arange(cols, device=scale.device) // GROUP]
    if granularity == "128x128":
        s = s[torch.arange(rows, device=scale.device) // GROUP]
    return s


def quantize(x: torch.Tensor, granularity: str = "1x128", dtype=torch.float8_e4m3fn, *, transpose: bool = False,
             pow2: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes, scales) of a 2-D ``x`` quantized along its last dimension (or of ``x.T`` if
    ``transpose``); ``codes.float() * expand(scales)`` approximates it."""
    fmt = format_of(dtype)
    xf = x.float().T if transpose else x.float()
    finite = torch.where(torch.isfinite(xf), xf.abs(), torch.zeros_like(xf))
    scale = scales_from_amax(_group_amax(finite, granularity), fmt, pow2)
    rows, cols = xf.shape
    codes = encode(xf, expand(scale, granularity, rows, cols), fmt).contiguous()
    # 1x128 scales column-major, like the kernels write them (one row block's scales adjacent)
    if granularity == "1x128":
        return codes, scale.new_empty(scale.shape[::-1]).T.copy_(scale)
    return codes, scale.contiguous()


def dequantize(q: torch.Tensor, scale: torch.Tensor, granularity: str) -> torch.Tensor:
    """``q`` (rows, cols) FP8 codes times their scales, in float32."""
    rows, cols = q.shape
    return q.float() * expand(scale.float(), granularity, rows, cols)


# --------------------------------------------------------------------------- JAX


def quantize_jax(x, granularity: str = "1x128", dtype=None, *, transpose: bool = False, pow2: bool = False):
    """:func:`quantize` on JAX arrays: the same rules, JAX's quantizer on every device. XLA's float32
    division on the CPU is not correctly rounded, so a scale can differ from the torch oracle's in
    its last bit (and a code on a rounding boundary by one step)."""
    import jax
    import jax.numpy as jnp

    name = jnp.dtype(dtype or jnp.float8_e4m3fn).name
    fmt = format_of(name)
    xf = x.astype(jnp.float32).T if transpose else x.astype(jnp.float32)
    rows, cols = xf.shape
    mag = jnp.where(jnp.isfinite(xf), jnp.abs(xf), 0.0)
    if granularity == "tensor":
        amax = mag.max() if mag.size else jnp.zeros((), jnp.float32)
    elif granularity == "row":
        amax = mag.max(axis=1, keepdims=True) if cols else jnp.zeros((rows, 1), jnp.float32)
    else:
        pr = -(-rows // GROUP) * GROUP if granularity == "128x128" else rows
        pc = -(-cols // GROUP) * GROUP
        padded = jnp.zeros((pr, pc), jnp.float32).at[:rows, :cols].set(mag)
        if granularity == "1x128":
            amax = padded.reshape(rows, pc // GROUP, GROUP).max(axis=2)
        else:
            amax = padded.reshape(pr // GROUP, GROUP, pc // GROUP, GROUP).max(axis=(1, 3))
    scale = jnp.maximum(amax, AMAX_FLOOR) / fmt.max
    if pow2:
        bits = jax.lax.bitcast_convert_type(scale, jnp.int32)
        exponent = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).astype(jnp.int32)
        scale = jax.lax.bitcast_convert_type(jnp.clip(exponent, 1, 254) << 23, jnp.float32)
    full = expand_jax(scale, granularity, rows, cols)
    y = jnp.clip(xf * (1.0 / full), -fmt.max, fmt.max)
    special = jnp.where(jnp.isinf(xf), xf, jnp.nan) if fmt.has_inf else jnp.full_like(xf, jnp.nan)
    return jnp.where(jnp.isfinite(xf), y, special).astype(name), scale


def expand_jax(scale, granularity: str, rows: int, cols: int):
    """:func:`expand` on JAX arrays."""
    import jax.numpy as jnp

    scale = scale.astype(jnp.float32)
    if granularity == "tensor":
        return jnp.broadcast_to(scale.reshape(1, 1), (rows, cols))
    if granularity == "row":
        return jnp.broadcast_to(scale.reshape(rows, 1), (rows, cols))
    s = scale[:, jnp.arange(cols) // GROUP]
    if granularity == "128x128":
        s = s[jnp.arange(rows) // GROUP]
    return s


def dequantize_jax(q, scale, granularity: str):
    import jax.numpy as jnp

    return q.astype(jnp.float32) * expand_jax(scale, granularity, *q.shape)


# --------------------------------------------------------------------------- the reference implementation


def forward(problem, config, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``ceiling.fp8.quantize`` on the oracle: codes and the scales as stored (1x128 K-block-major)."""
    codes, scale = quantize(x, problem.granularity, format_of(problem.fp8).dtype, transpose=problem.transpose,
                            pow2=problem.pow2)
    return codes, scale.T if problem.granularity == "1x128" else scale
