"""Run one Triton kernel source either compiled for a GPU or interpreted on the CPU.

Triton picks its interpreter from ``TRITON_INTERPRET`` when a function is
decorated, which would force a whole process into one mode. Here every kernel is
decorated with plain ``triton.jit`` (so it compiles for real targets, and
``kernels.isa`` can cross-compile it for sm_90a and gfx942), and
:func:`interpreted` builds an interpreter twin of it on demand. The twin runs the
same source in a private copy of the kernel module's globals in which every
``@triton.jit`` helper is itself replaced by its twin, so helpers must be called by
their bare name, as the Triton tutorials do.
"""

from __future__ import annotations

import types
from typing import Any

# Keyed by id(): hashing a JITFunction computes its cache key, which is costly.
_twins: dict[int, Any] = {}


def triton_available() -> tuple[bool, str]:
    try:
        import triton  # noqa: F401
    except ImportError as exc:  # pragma: no cover - the test extra installs triton
        return False, f"triton is not installed ({exc})"
    return True, ""


def interpreted(jit_fn: Any) -> Any:
    """The interpreter twin of a ``triton.jit`` function (cached per function)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    fn = jit_fn.fn if isinstance(jit_fn, JITFunction) else jit_fn
    if id(fn) in _twins:
        return _twins[id(fn)]
    # Register the twin before visiting helpers: a module's kernels and helpers
    # see each other through the shared globals, so the walk can come back here.
    namespace = dict(fn.__globals__)
    twin = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)
    twin.__kwdefaults__ = fn.__kwdefaults__
    twin.__qualname__ = fn.__qualname__
    twin.__module__ = fn.__module__
    twin.__doc__ = fn.__doc__
    _twins[id(fn)] = InterpretedFunction(twin)
    for name, value in fn.__globals__.items():
        if isinstance(value, JITFunction):
            namespace[name] = interpreted(value)
    return _twins[id(fn)]


def launcher(jit_fn: Any, *, on_gpu: bool) -> Any:
    """The object to index with a grid: the compiled kernel on a GPU, else its twin."""
    return jit_fn if on_gpu else interpreted(jit_fn)
