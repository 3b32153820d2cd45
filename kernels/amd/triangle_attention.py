"""Triangle attention on CDNA3 (MI300X, gfx942): the pointer-based Triton kernels of
:mod:`kernels.triton.triangle_attention` with their own config table.

What differs on CDNA3 is in the configs (``configs/triangle_attention.json``):
a wavefront is 64 lanes, so 4 warps are 256 threads and a 64x64 fp32 tile costs
half the VGPRs per lane that it does on a 32-lane warp; the software pipeliner
gains little from more than one or two stages (LDS is 64 KiB per CU); and
``waves_per_eu`` / ``matrix_instr_nonkdim`` (16x16 MFMA for a 32-wide head) are
passed as launch options.
"""

from __future__ import annotations

from pathlib import Path

from kernels.triton import triangle_attention as _triton

CONFIG_FILE = Path(__file__).with_name("configs") / "triangle_attention.json"
TARGET = "gfx942"
AMD_OPTIONS = ("waves_per_eu", "matrix_instr_nonkdim")


def config_for(device_name: str | None, head_dim: int, dtype: str, table_path: Path = CONFIG_FILE) -> dict:
    """Each kernel's config: the device's entry of the table for this head dim, else ``default``."""
    return _triton.config_for(device_name, head_dim, dtype, table_path)


def resolve_config(device_name: str | None, head_dim: int, dtype: str, config: dict | None) -> dict:
    """``config`` checked against this target's space and merged over this table's entry
    (:func:`kernels.triton.triangle_attention.resolve_config`)."""
    return _triton.resolve_config(TARGET, CONFIG_FILE, device_name, head_dim, dtype, config)


def _resolved(q, config: dict | None) -> dict | None:
    return _triton.resolved_for(q, config, TARGET, CONFIG_FILE)


def triangle_attention_fwd(q, k, v, bias, mask, scale, config=None):
    return _triton.triangle_attention_fwd(q, k, v, bias, mask, scale, _resolved(q, config), table=CONFIG_FILE, extra_keys=AMD_OPTIONS)


def triangle_attention_bwd(q, k, v, bias, mask, scale, out, lse, dout, config=None):
    return _triton.triangle_attention_bwd(q, k, v, bias, mask, scale, out, lse, dout, _resolved(q, config),
                                          table=CONFIG_FILE,
                                          extra_keys=AMD_OPTIONS)


def compile_specs(dtype: str = "bfloat16", head_dim: int = 32, device: str = "MI300X") -> list:
    return _triton.compile_specs(dtype, head_dim, device, table=CONFIG_FILE, prefix="triangle_attention_cdna3",
                                 extra_keys=AMD_OPTIONS)
