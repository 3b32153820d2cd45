"""The TPU generations the Pallas kernels target, and the facts about each that block shapes and VMEM
budgets depend on; where each figure comes from is noted at :data:`GENERATIONS`.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024

LANES = 128  # the minor dimension of a vreg and of every VMEM tile
SUBLANES = 8  # the second-minor dimension for 32-bit types


@dataclass(frozen=True)
class Generation:
    target: str  # "tpu-v5e", ...
    chip: str  # pltpu.ChipVersion value: "v5e", "v5p", "v6e"
    vmem_bytes: int  # physical VMEM per TensorCore
    scoped_vmem_default_bytes: int  # what a kernel gets without vmem_limit_bytes
    mxu_size: int  # MXU is mxu_size x mxu_size
    tensorcores: int  # per JAX device; 2 = megacore, which splits "parallel" grid axes
    device_kinds: tuple[str, ...]  # jax Device.device_kind strings of this generation

    @property
    def usable_vmem_bytes(self) -> int:
        """The most a kernel's blocks may take: a quarter of VMEM stays free for
        Mosaic's internal scratch and spilled vregs, which no estimate sees."""
        return self.vmem_bytes * 3 // 4


# Physical VMEM, MXU size and TensorCores per chip are those of JAX's own table
# (jax/_src/pallas/mosaic/tpu_info.py, pltpu.get_tpu_info_for_chip); the tests check the two agree.
# The scoped VMEM limits come from XLA:TPU's "Scoped allocation ... limit 16.00M" errors on v5e
# (v5litepod) and "limit 32.00M" on v6e; v5p publishes no figure, so the smaller 16 MiB is assumed.
GENERATIONS: dict[str, Generation] = {
    g.target: g
    for g in (
        Generation("tpu-v5e", "v5e", 128 * MiB, 16 * MiB, 128, 1, ("TPU v5 lite", "TPU v5e", "TPU v5litepod")),
        Generation("tpu-v5p", "v5p", 64 * MiB, 16 * MiB, 128, 2, ("TPU v5p", "TPU v5")),
        Generation("tpu-v6e", "v6e", 128 * MiB, 32 * MiB, 256, 1, ("TPU v6 lite", "TPU v6e", "TPU v6")),
    )
}

TARGETS = tuple(GENERATIONS)

# Configs are chosen for this generation when no TPU is attached (interpret mode).
DEFAULT_TARGET = "tpu-v5e"


def generation(target: str) -> Generation:
    from ceiling.errors import InputError

    if target not in GENERATIONS:
        raise InputError("target", f"one of {TARGETS}", repr(target))
    return GENERATIONS[target]


def target_of_device_kind(kind: str) -> str | None:
    """'TPU v5 lite' -> 'tpu-v5e'; None for a kind none of the targets is."""
    # Longest names first, so "TPU v5 lite" is not taken for v5p's "TPU v5".
    pairs = sorted(((k, g.target) for g in GENERATIONS.values() for k in g.device_kinds), key=lambda p: -len(p[0]))
    for name, target in pairs:
        if kind.startswith(name):
            return target
    return None


def attached_tpu() -> str | None:
    """The target of the TPU JAX sees here, or None without one."""
    import jax

    tpus = [d for d in jax.devices() if d.platform == "tpu"]
    if not tpus:
        return None
    return target_of_device_kind(tpus[0].device_kind) or DEFAULT_TARGET
