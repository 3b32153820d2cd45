"""The triangle multiplicative update on Hopper (sm_90a): the kernels of
:mod:`kernels.triton.triangle_multiplication` with Hopper's config table
(``configs/triangle_multiplication.json``, per device name, tuned stage by stage on the H200 by
``ceiling tune trimul``).
"""

from __future__ import annotations

from pathlib import Path

from kernels.triton import triangle_multiplication as _triton

CONFIG_FILE = Path(__file__).with_name("configs") / "triangle_multiplication.json"
TARGET = "sm_90a"


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
    return _triton.trimul_fwd(x, direction, mask, weights, eps, _resolved(x, config), table=CONFIG_FILE)


def trimul_bwd(x, direction, mask, weights, eps, saved, dout, config=None):
    return _triton.trimul_bwd(x, direction, mask, weights, eps, saved, dout, _resolved(x, config), table=CONFIG_FILE)


def compile_specs(dtype: str = "bfloat16", c_z: int = 128, c: int = 128, device: str = "H200", *,
                  cfgs: dict | None = None, prefix: str = "trimul") -> list:
    """The kernels at this table's configs for ``device`` (or at ``cfgs``, a whole per-stage
    config, as the tuning sweep compiles a candidate)."""
    return _triton.compile_specs(dtype, c_z, c, device, table=CONFIG_FILE, cfgs=cfgs, prefix=prefix)


def jax_compile_specs(dtype: str = "bfloat16", c_z: int = 128, c: int = 128, n: int = 384,
                      device: str = "H200") -> list:
    """The jax-triton wrappers (:mod:`kernels.triton.triangle_multiplication_jax`) at this table's configs."""
    from kernels.triton import triangle_multiplication_jax

    return triangle_multiplication_jax.compile_specs(config_for(device, dtype), dtype, c_z, c, n)
