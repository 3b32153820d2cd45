"""JAX arrays to the Triton kernels, whose launchers take PyTorch tensors: on a CPU through
``jax.pure_callback`` (arrays to numpy, then CPU tensors, bfloat16 through its bits, and back); on a
GPU that bridge is refused (a host round trip per call is not a GPU kernel) and the ops' JAX
launchers call the same kernel sources through jax-triton (:func:`triton_call`), with pointer loads,
since jax-triton cannot build TMA descriptors.
"""

from __future__ import annotations

from typing import Callable

import numpy as np


def to_torch(x: np.ndarray):
    import torch

    # A copy: arrays handed over by JAX are read-only, and a kernel's tensors must be writable.
    if x.dtype.name == "bfloat16":
        return torch.from_numpy(np.array(x).view(np.uint16)).view(torch.bfloat16)
    if x.dtype.name.startswith("float8"):  # ml_dtypes FP8: through the bits
        return torch.from_numpy(np.array(x).view(np.uint8)).view(getattr(torch, x.dtype.name))
    return torch.from_numpy(np.array(x))


def to_numpy(t) -> np.ndarray:
    import ml_dtypes
    import torch

    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    if t.dtype.is_floating_point and t.element_size() == 1:  # FP8
        return t.view(torch.uint8).numpy().view(getattr(ml_dtypes, str(t.dtype).removeprefix("torch.")))
    return t.numpy()


def call_on_cpu(fn: Callable, result_shape, *arrays, backend: str):
    """``fn(*tensors) -> tensor`` applied to JAX arrays through a host callback (CPU only)."""
    import jax

    if jax.default_backend() != "cpu":
        from ceiling.errors import BackendUnavailable

        raise BackendUnavailable(
            f"backend={backend!r} on JAX arrays runs through the CPU interpreter only; "
            f"on a {jax.default_backend()} device the op's jax-triton launcher runs instead"
        )

    def host(*xs):
        return to_numpy(fn(*[None if x is None else to_torch(np.asarray(x)) for x in xs]))

    return jax.pure_callback(host, result_shape, *arrays)


def import_jax_triton():
    """``import jax_triton`` without its side effect on the rest of the process.

    jax-triton sets ``TRITON_CACHE_DIR=""`` when imported (it keeps its own cache),
    which leaves every later PyTorch-side Triton launch unable to create a cache
    directory. The variable is restored to what it was.
    """
    import os

    before = os.environ.get("TRITON_CACHE_DIR")
    import jax_triton

    if before is None:
        os.environ.pop("TRITON_CACHE_DIR", None)
    else:
        os.environ["TRITON_CACHE_DIR"] = before
    return jax_triton


def on_gpu() -> bool:
    """Whether JAX computes on a GPU (CUDA or ROCm), where the kernels go through jax-triton."""
    import jax

    return jax.default_backend() == "gpu"


def jax_triton_unavailable() -> str | None:
    """Why JAX arrays cannot reach the Triton kernels natively here, or None when they can
    (JAX on a GPU with jax-triton installed)."""
    import importlib.util

    # find_spec, not import: importing jax-triton changes TRITON_CACHE_DIR for the process.
    for name in ("jax", "jax_triton"):
        if importlib.util.find_spec(name) is None:
            return f"needs jax and jax-triton ({name} is not installed)"
    return None if on_gpu() else "needs JAX on a GPU"


def triton_call(*args, **kwargs):
    """``jax_triton.triton_call``: the one place the JAX launchers reach jax-triton through.

    Integer arguments reach the kernel without the divisibility-by-16 specialization
    that Triton's own launcher gives them (only the value 1 is specialized, as a
    constant), and every array is assumed 16-byte aligned.
    """
    return import_jax_triton().triton_call(*args, **kwargs)


def device_key(vendor: str) -> str:
    """The tuned-table key of JAX's first GPU: 'sm90' on Hopper, the gfx architecture on AMD,
    'interpreter' (the heuristics) when JAX does not say."""
    import jax

    device = jax.devices()[0]
    capability = str(getattr(device, "compute_capability", "") or "")
    if vendor == "amd":
        return capability.split(":")[0] if capability.startswith("gfx") else "interpreter"
    major, _, minor = capability.partition(".")
    return f"sm{major}{minor}" if major.isdigit() and minor.isdigit() else "interpreter"


def device_name() -> str | None:
    """JAX's name for its first GPU ('NVIDIA H200'), for tables keyed by device name."""
    import jax

    return jax.devices()[0].device_kind if on_gpu() else None
