"""The FP8 formats the ops take, and what differs between them.

Two families exist in hardware today:

* **OCP FP8** (``float8_e4m3fn``, ``float8_e5m2``): what Hopper's wgmma (and Blackwell,
  and CDNA4) multiplies. e4m3fn has exponent bias 7, no infinities, one NaN per sign
  (``S.1111.111``) and a largest finite value of 448; e5m2 is IEEE-like (bias 15,
  infinities, largest finite 57344).
* **FNUZ FP8** (``float8_e4m3fnuz``, ``float8_e5m2fnuz``): what CDNA3 (MI300X, gfx942)
  multiplies. The exponent bias is one higher (8 and 16), there is no negative zero
  and no infinity, and the one NaN is the bit pattern ``0x80`` (the negative-zero
  slot). e4m3fnuz tops out at 240, e5m2fnuz at 57344.

Because only the bias differs, the same bits read as FNUZ are worth exactly half
their OCP value, for every finite code but the specials: :func:`ocp_to_fnuz` turns
an OCP tensor into the FNUZ tensor of half its value without any rounding (negative
zero becomes zero, NaN becomes the FNUZ NaN, e5m2's infinities become NaN), and the
caller doubles the scale. That is what the AMD backend does with OCP inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Format:
    name: str  # torch's dtype name
    dtype: torch.dtype
    max: float  # largest finite value
    has_inf: bool
    fnuz: bool  # AMD CDNA3's variant: bias + 1, no negative zero, NaN = 0x80
    triton: str  # Triton's name for the element type in signatures
    ocp_twin: str | None = None  # the OCP format with the same bits at twice the value

    @property
    def e5m2(self) -> bool:
        return "e5m2" in self.name


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("float8_e4m3fn", torch.float8_e4m3fn, 448.0, False, False, "fp8e4nv"),
        Format("float8_e5m2", torch.float8_e5m2, 57344.0, True, False, "fp8e5"),
        Format("float8_e4m3fnuz", torch.float8_e4m3fnuz, 240.0, False, True, "fp8e4b8", "float8_e4m3fn"),
        Format("float8_e5m2fnuz", torch.float8_e5m2fnuz, 57344.0, False, True, "fp8e5b16", "float8_e5m2"),
    )
}
OCP = ("float8_e4m3fn", "float8_e5m2")
FNUZ = ("float8_e4m3fnuz", "float8_e5m2fnuz")
# The FNUZ format each OCP one maps to on CDNA3.
TO_FNUZ = {"float8_e4m3fn": "float8_e4m3fnuz", "float8_e5m2": "float8_e5m2fnuz"}


def name_of(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def format_of(dtype) -> Format | None:
    """The :class:`Format` of a torch dtype or dtype name; None for a non-FP8 dtype."""
    return FORMATS.get(name_of(dtype))


def ocp_to_fnuz(x: torch.Tensor) -> torch.Tensor:
    """The FNUZ tensor whose every element is exactly half of ``x``'s (an OCP FP8 tensor).

    The bits are kept; the two codes that mean something else in FNUZ are rewritten:
    negative zero (``0x80``, the FNUZ NaN) becomes zero, and OCP's NaNs and infinities
    become the FNUZ NaN. Multiply the tensor's scale by 2 to keep its dequantized value.
    """
    fmt = format_of(x.dtype)
    if fmt is None or fmt.fnuz:
        raise ValueError(f"ocp_to_fnuz: expected an OCP FP8 tensor, got {x.dtype}")
    bits = x.view(torch.uint8)
    special = (bits & 0x7F) == 0x7F if not fmt.has_inf else (bits & 0x7C) == 0x7C  # NaN (e4m3) / Inf+NaN (e5m2)
    out = torch.where(bits == 0x80, torch.zeros_like(bits), bits)
    out = torch.where(special, torch.full_like(bits, 0x80), out)
    return out.view(FORMATS[TO_FNUZ[fmt.name]].dtype)
