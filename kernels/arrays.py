"""Framework-neutral facts about the arrays an op receives. The ops accept PyTorch tensors or JAX arrays
and return the kind they got. Validation works on the small description here (shape, dtype name,
device kind), so one spec serves both frameworks.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from typing import Any

DTYPE_NAMES = ("float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class ArrayInfo:
    framework: str  # "torch" or "jax"
    shape: tuple[int, ...]
    dtype: str  # numpy-style name: "float16", "bfloat16", "float32", ...
    device: str  # "cpu", "cuda:0", "tpu:0", ...
    strides: tuple[int, ...] | None  # in elements; None where the framework hides them


def framework_of(x: Any) -> str | None:
    # isinstance against modules already imported: no import cost, and torch.compile traces it.
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return "torch"
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(x, jax.Array):
        return "jax"
    return None


def describe(x: Any) -> ArrayInfo | None:
    fw = framework_of(x)
    if fw == "torch":
        dtype = str(x.dtype).removeprefix("torch.")
        return ArrayInfo("torch", tuple(x.shape), dtype, str(x.device), tuple(x.stride()))
    if fw == "jax":
        import jax

        try:
            devices = list(x.devices())
            device = f"{devices[0].platform}:{devices[0].id}"
        except (jax.errors.ConcretizationTypeError, AttributeError, IndexError):
            # A tracer under jit or grad has no committed device: it will run on the default one.
            device = f"{jax.default_backend()}:0"
        return ArrayInfo("jax", tuple(x.shape), str(x.dtype), device, None)
    return None


def gpu_facts(framework: str, device: str) -> tuple[str | None, str | None]:
    """(name, architecture) of the GPU ``device`` names ("NVIDIA H200", "sm_90"; "AMD Instinct
    MI300X", "gfx942"), (None, None) off a GPU. Asked once per device."""
    kind = device_kind(device)
    if (framework, kind) not in (("torch", "cuda"), ("jax", "gpu")) or _compiling():
        return None, None
    return _gpu_facts(framework, device)


def _compiling() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


@functools.cache
def _gpu_facts(framework: str, device: str) -> tuple[str | None, str | None]:
    if framework == "torch":
        import torch

        d = torch.device(device)
        if getattr(torch.version, "hip", None):
            return torch.cuda.get_device_name(d), torch.cuda.get_device_properties(d).gcnArchName.split(":")[0]
        major, minor = torch.cuda.get_device_capability(d)
        return torch.cuda.get_device_name(d), f"sm_{major}{minor}"
    import jax

    dev = jax.devices()[0]
    capability = str(getattr(dev, "compute_capability", "") or "")
    if capability.startswith("gfx"):
        return dev.device_kind, capability.split(":")[0]
    major, _, minor = capability.partition(".")
    return dev.device_kind, (f"sm_{major}{minor}" if major.isdigit() and minor.isdigit() else None)


def device_kind(device: str) -> str:
    """'cuda:0' -> 'cuda', 'cpu' -> 'cpu', 'gpu:0' -> 'gpu'."""
    return device.split(":")[0]


def torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def expanded(info: ArrayInfo) -> bool:
    """Whether a dimension of more than one element has stride 0 (an ``expand``-ed view)."""
    return info.strides is not None and any(
        isinstance(st, int) and st == 0 and isinstance(n, int) and n > 1 for n, st in zip(info.shape, info.strides))


def materialized(x: Any) -> Any:
    """``x``, copied where it is an expanded torch view: for the arrays an op's backward hands to
    an op (autograd's gradient of a sum is one), which the op would refuse from a caller."""
    info = describe(x)
    return x.contiguous() if info is not None and expanded(info) else x


def require(name: str, x: Any) -> ArrayInfo:
    """``describe(x)``, or the InputError every op gives a non-array argument or an expanded
    (stride-0) view.

    One policy for every op's arrays: an expanded view is refused before any launch. A kernel
    fed through TMA descriptors, a host copy (TPU, Trainium) or a contiguous layout would copy it
    to its full size, silently (a (1, 2^20, 32, 128) key expanded from one row is 8 GiB of
    bf16), and the ops that broadcast an argument take its size-1 dimensions as they are."""
    from ceiling.errors import InputError

    info = describe(x)
    if info is None:
        raise InputError(name, "a torch.Tensor or a jax.Array", type(x).__name__)
    if expanded(info):
        raise InputError(name, "an array with no expanded (stride-0) dimension: pass it unexpanded, where the "
                         "op broadcasts a size-1 dimension, or materialized (.contiguous())",
                         f"shape {info.shape} with strides {info.strides}")
    return info
