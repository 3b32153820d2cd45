"""The FP8 formats the ops take: OCP ``float8_e4m3fn``/``float8_e5m2`` (what Hopper, Blackwell
and CDNA4 multiply) and FNUZ ``float8_e4m3fnuz``/``float8_e5m2fnuz`` (CDNA3: exponent bias one
higher, no negative zero or infinity, NaN at ``0x80``). Only the bias differs, so an OCP code
read as FNUZ is worth exactly half: :func:`ocp_to_fnuz` maps one to the other without rounding
(the specials to the FNUZ NaN) and the caller doubles the scale, as the AMD backend does.
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
