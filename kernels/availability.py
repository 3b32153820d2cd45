"""How each backend (a vendor's kernels, or the plain-framework ``reference``) would run on this
machine, whatever the op: ``native`` on the vendor's device, ``interpreted`` (the same Triton or
Pallas source under its interpreter on the CPU), ``emulated`` (the same NKI source on
``ceiling.trainium.emulator``) or ``unavailable``, with the reason; :mod:`ceiling.backends` adds each
op's view (whether it has a kernel there).
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass

BACKENDS = ("reference", "nvidia", "amd", "tpu", "trainium")


@dataclass(frozen=True)
class Availability:
    backend: str
    mode: str  # "native", "interpreted", "emulated" or "unavailable"
    reason: str

    @property
    def runs(self) -> bool:
        return self.mode != "unavailable"


@functools.cache
def gpu_vendor() -> str | None:
    """'nvidia' or 'amd' when PyTorch sees a GPU of that vendor, else None."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return "amd" if getattr(torch.version, "hip", None) else "nvidia"


@functools.cache
def gpu_name() -> str | None:
    if gpu_vendor() is None:
        return None
    import torch

    return torch.cuda.get_device_name()


def default_for_device(device: str) -> str:
    """Where an op runs when no backend is named: the device's vendor, else the reference."""
    kind = device.split(":")[0]
    if kind == "cuda":
        return gpu_vendor() or "reference"
    if kind == "gpu":  # JAX names CUDA and ROCm devices alike
        return gpu_vendor() or "nvidia"
    if kind == "tpu":
        return "tpu"
    return "reference"


def has_module(name: str) -> tuple[bool, str]:
    try:
        importlib.import_module(name)
    except ImportError as exc:
        return False, f"{name} cannot be imported ({exc.__class__.__name__}: {exc})"
    return True, ""


@functools.cache
def availability(backend: str) -> Availability:
    """How ``backend`` would run here, independent of any op."""
    if backend == "reference":
        return Availability(backend, "native", "plain PyTorch/JAX math on any device")
    if backend in ("nvidia", "amd"):
        ok, why = has_module("triton")
        if not ok:
            return Availability(backend, "unavailable", why)
        vendor = gpu_vendor()
        if vendor == backend:
            if backend == "nvidia":
                import torch

                major, minor = torch.cuda.get_device_capability()
                if major < 9:
                    return Availability(
                        backend,
                        "unavailable",
                        f"the kernels target Hopper (sm_90) and later; this GPU is sm_{major}{minor}",
                    )
            return Availability(backend, "native", f"{gpu_name()}")
        seen = f"a {vendor} GPU is present" if vendor else "no GPU is visible to PyTorch"
        return Availability(backend, "interpreted", f"{seen}: the Triton interpreter runs the kernel on the CPU")
    if backend == "tpu":
        ok, why = has_module("jax")
        if not ok:
            return Availability(backend, "unavailable", why)
        import jax

        if any(d.platform == "tpu" for d in jax.devices()):
            return Availability(backend, "native", jax.devices()[0].device_kind)
        return Availability(backend, "interpreted", "no TPU: Pallas interpret mode runs the kernel on the CPU")
    if backend == "trainium":
        ok, why = has_module("ceiling.trainium.nki_compat")  # the emulator needs the trainium extra
        if not ok:
            return Availability(backend, "unavailable", why)
        from ceiling.trainium import nki_compat

        if not nki_compat.EMULATED:
            return Availability(backend, "native", "the Neuron toolchain (nki) is importable")
        return Availability(
            backend,
            "emulated",
            "no working Neuron toolchain (its registry packages are empty): kernels run on ceiling.trainium.emulator",
        )
    raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
