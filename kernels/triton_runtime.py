"""Run one Triton kernel source either compiled for a GPU or interpreted on the CPU.

Triton picks its interpreter from ``TRITON_INTERPRET`` when a function is
decorated, which would force a whole process into one mode. Here every kernel is
decorated with plain ``triton.jit`` (so it compiles for real targets, and
``kernels.isa`` can cross-compile it for sm_90a and gfx942), and
:func:`interpreted` builds an interpreter twin of it on demand. The twin runs the
same source in a private copy of the kernel module's globals in which every
``@triton.jit`` helper is itself replaced by its twin, so helpers must be called by
their bare name, as the Triton tutorials do.

Triton's own library functions written in Triton (``tl.cdiv``, ``tl.sigmoid``,
``tl.max``...) are ``JITFunction`` objects too; for the duration of an
interpreted launch they are swapped for their twins on the ``triton.language``
modules, the same way the interpreter itself patches those modules while it runs.
As with the interpreter's own patching, do not compile a kernel in another thread
while an interpreted launch is running.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any

# Keyed by id(): hashing a JITFunction computes its cache key, which is costly.
_twins: dict[int, Any] = {}


_patch_depth = 0


@contextlib.contextmanager
def _library_twins():
    """Swap triton.language's JIT-written functions for twins while interpreting."""
    global _patch_depth
    if _patch_depth:
        _patch_depth += 1
        try:
            yield
        finally:
            _patch_depth -= 1
        return
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    # Modules that Triton imports lazily during a launch copy library functions at
    # import time and insist they are JITFunctions: import them before the swap.
    with contextlib.suppress(ImportError):
        import triton.experimental.gluon  # noqa: F401

    swapped = []
    for module in (tl, tl.math, tl.standard):
        for name, member in list(vars(module).items()):
            if isinstance(member, JITFunction):
                swapped.append((module, name, member))
                setattr(module, name, interpreted(member))
    _patch_depth = 1
    try:
        yield
    finally:
        _patch_depth = 0
        for module, name, member in reversed(swapped):
            setattr(module, name, member)


def _interpreter_fixes() -> None:
    """Make the interpreter's bfloat16 arithmetic match the GPU's.

    The interpreter stores bfloat16 as raw uint16 bits. In Triton 3.9 its
    ``tl.dot`` multiplies those bits as integers, and its float32 -> bfloat16
    cast truncates where the GPU rounds to nearest even. Here the dot widens the
    bits to float32 first (exact), and the cast rounds to nearest even. Applied
    once; each is a no-op where operands are not stored that way.
    """
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = type(interpreter.interpreter_builder)
    if getattr(builder, "_ceiling_fixed", False):
        return
    original_dot = builder.create_dot
    original_cast = builder.cast_impl

    def widen(h):
        if h.dtype.scalar.name == "bf16" and h.data.dtype == np.uint16:
            return interpreter.TensorHandle((h.data.astype(np.uint32) << 16).view(np.float32), tl.float32)
        return h

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original_dot(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16 and src.data.dtype == np.float32:
            bits = np.ascontiguousarray(src.data).view(np.uint32).astype(np.uint64)
            rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
            nan = np.isnan(src.data)
            rounded = np.where(nan, np.uint16(0x7FC0), rounded)
            return interpreter.TensorHandle(rounded.reshape(src.data.shape), dst_type.scalar)
        return original_cast(self, src, dst_type)

    builder.create_dot = create_dot
    builder.cast_impl = cast_impl
    builder.create_fp_trunc = lambda self, src, dst_type: self.cast_impl(src, dst_type)
    builder._ceiling_fixed = True


def _twin_class():
    from triton.runtime.interpreter import InterpretedFunction

    class Twin(InterpretedFunction):
        def run(self, *args, **kwargs):
            with _library_twins():
                return super().run(*args, **kwargs)

        def __call__(self, *args, **kwargs):
            # A helper called from a kernel. The interpreter's own __call__ patches
            # triton.language for the helper's globals and never restores it, which
            # would leave the modules patched for later real compilations; restore here.
            from triton.runtime import interpreter

            with _library_twins():
                scope = interpreter._patch_lang(self.fn)
                if scope is None or not hasattr(scope, "restore"):
                    return super().__call__(*args, **kwargs)
                try:
                    return self.rewrite()(*args, **kwargs)
                except Exception as exc:
                    raise interpreter.InterpreterError(repr(exc)) from exc
                finally:
                    scope.restore()

    return Twin


def interpreted(jit_fn: Any) -> Any:
    """The interpreter twin of a ``triton.jit`` function (cached per function)."""
    from triton.runtime.jit import JITFunction

    _interpreter_fixes()
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
    _twins[id(fn)] = _twin_class()(twin)
    for name, value in fn.__globals__.items():
        if isinstance(value, JITFunction):
            namespace[name] = interpreted(value)
    return _twins[id(fn)]


def launcher(jit_fn: Any, *, on_gpu: bool) -> Any:
    """The object to index with a grid: the compiled kernel on a GPU, else its twin."""
    return jit_fn if on_gpu else interpreted(jit_fn)
