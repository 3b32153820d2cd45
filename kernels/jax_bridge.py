"""Run a PyTorch-level kernel entry point on JAX arrays that live on the CPU.

The Triton backends are written against PyTorch tensors. On a CPU, a JAX caller
reaches the same kernel (interpreted) through ``jax.pure_callback``: arrays go
to numpy, become CPU tensors without copies (bfloat16 through its bits), run,
and come back. On a GPU this bridge is refused: a host round trip per call is
not a GPU kernel, and JAX must call the Triton kernel on the device instead.
"""

from __future__ import annotations

from typing import Callable

import numpy as np


def to_torch(x: np.ndarray):
    import torch

    # A copy: arrays handed over by JAX are read-only, and a kernel's tensors must be writable.
    if x.dtype.name == "bfloat16":
        return torch.from_numpy(np.array(x).view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(np.array(x))


def to_numpy(t) -> np.ndarray:
    import ml_dtypes
    import torch

    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def call_on_cpu(fn: Callable, result_shape, *arrays, backend: str):
    """``fn(*tensors) -> tensor`` applied to JAX arrays through a host callback (CPU only)."""
    import jax

    if jax.default_backend() != "cpu":
        from kernels.errors import BackendUnavailable

        raise BackendUnavailable(
            f"backend={backend!r} on JAX arrays runs through the CPU interpreter only; "
            f"on a {jax.default_backend()} device JAX needs jax-triton, which these TMA kernels do not support yet"
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
