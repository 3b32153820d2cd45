"""Triangle attention on Hopper (sm_90a): the kernels of :mod:`kernels.triton.triangle_attention`
with Hopper's config table (``configs/triangle_attention.json``, per device name and head-dim
bucket, tuned on the H200 by ``ceiling tune triangle-attention``).
"""

from __future__ import annotations

from pathlib import Path

from kernels.triton import triangle_attention as _triton

CONFIG_FILE = Path(__file__).with_name("configs") / "triangle_attention.json"
TARGET = "sm_90a"


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
    return _triton.triangle_attention_fwd(q, k, v, bias, mask, scale, _resolved(q, config), table=CONFIG_FILE)


def triangle_attention_bwd(q, k, v, bias, mask, scale, out, lse, dout, config=None, only: str | None = None):
    """``only`` (a kernel name) runs the preprocess and that kernel alone, for the tuning sweep."""
    return _triton.triangle_attention_bwd(q, k, v, bias, mask, scale, out, lse, dout, _resolved(q, config),
                                          table=CONFIG_FILE,
                                          only=only)


def compile_specs(dtype: str = "bfloat16", head_dim: int = 32, device: str = "H200") -> list:
    return _triton.compile_specs(dtype, head_dim, device, table=CONFIG_FILE, prefix="triangle_attention")


def jax_compile_specs(dtype: str = "bfloat16", head_dim: int = 32, n: int = 384, device: str = "H200") -> list:
    """The jax-triton wrappers (:mod:`kernels.triton.triangle_attention_jax`) at this table's configs."""
    from kernels.triton import triangle_attention_jax

    return triangle_attention_jax.compile_specs(config_for(device, head_dim, dtype), dtype, head_dim, n)
