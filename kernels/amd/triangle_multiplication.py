"""The triangle multiplicative update on CDNA3 (MI300X, gfx942): the pointer-based
Triton kernels of :mod:`kernels.triton.triangle_multiplication` with their own
config table (``configs/triangle_multiplication.json``): 64-lane wavefronts, one or
two pipeline stages, 16x16 MFMA for the row kernels' thin dots and 32x32 MFMA for
the contraction, ``waves_per_eu`` set per kernel.
"""

from __future__ import annotations

from pathlib import Path

from kernels.triton import triangle_multiplication as _triton

CONFIG_FILE = Path(__file__).with_name("configs") / "triangle_multiplication.json"
TARGET = "gfx942"
AMD_OPTIONS = ("waves_per_eu", "matrix_instr_nonkdim")


def config_for(device_name: str | None, dtype: str, table_path: Path = CONFIG_FILE) -> dict:
    """Each stage's config: the device's entry of the table, else ``default``."""
    return _triton.config_for(device_name, dtype, table_path)


def resolve_config(device_name: str | None, dtype: str, config: dict | None) -> dict:
    """``config`` checked against this target's space and merged over this table's entry
    (:func:`kernels.triton.triangle_multiplication.resolve_config`)."""
    return _triton.resolve_config(TARGET, CONFIG_FILE, device_name, dtype, config)


def _resolved(x, config: dict | None) -> dict | None:
    return _triton.resolved_for(x, config, TARGET, CONFIG_FILE)


def trimul_saved_shapes(x, c, config=None):
    return _triton.trimul_saved_shapes(x, c, _resolved(x, config), table=CONFIG_FILE)


def trimul_fwd(x, direction, mask, weights, eps, config=None):
    return _triton.trimul_fwd(x, direction, mask, weights, eps, _resolved(x, config), table=CONFIG_FILE, extra_keys=AMD_OPTIONS)


def trimul_bwd(x, direction, mask, weights, eps, saved, dout, config=None):
    return _triton.trimul_bwd(x, direction, mask, weights, eps, saved, dout, _resolved(x, config), table=CONFIG_FILE,
                              extra_keys=AMD_OPTIONS)


def compile_specs(dtype: str = "bfloat16", c_z: int = 128, c: int = 128, device: str = "MI300X") -> list:
    return _triton.compile_specs(dtype, c_z, c, device, table=CONFIG_FILE, prefix="trimul_cdna3",
                                 extra_keys=AMD_OPTIONS)
