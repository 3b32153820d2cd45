"""Run one Triton kernel source either compiled for a GPU or interpreted on the CPU: every kernel is
decorated with plain ``triton.jit`` (so it compiles for real targets, and ``ceiling.isa`` can
cross-compile it for sm_90a and gfx942), and :func:`interpreted` builds its interpreter twin on
demand, because Triton reads ``TRITON_INTERPRET`` when a function is decorated, which would force a
whole process into one mode.
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
    # Triton's own library functions written in Triton (tl.cdiv, tl.sigmoid, tl.max...) are
    # JITFunctions too; they are swapped on the triton.language modules for the duration of an
    # interpreted launch, as the interpreter itself patches those modules while it runs. So, as
    # with the interpreter's own patching, do not compile a kernel in another thread meanwhile.
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
    """Make the interpreter's bfloat16 and FP8 arithmetic match the GPU's.

    The interpreter stores bfloat16 as raw uint16 bits. In Triton 3.9 its
    ``tl.dot`` multiplies those bits as integers, and its float32 -> bfloat16
    cast truncates where the GPU rounds to nearest even. Here the dot widens the
    bits to float32 first (exact), and the cast rounds to nearest even. FP8 values (uint8 bits
    in the interpreter) are decoded and encoded through PyTorch's own conversions
    (see ``_fp8_decode``). Applied once; each is a no-op where operands are not
    stored that way.
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

    def create_dot_fp8(self, a, b, d, input_precision, max_num_imprecise_acc):
        if _fp8_torch_dtype(a.dtype) or _fp8_torch_dtype(b.dtype):
            a, b = _fp8_decode(a), _fp8_decode(b)
        return create_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    def cast_impl_fp8(self, src, dst_type):
        if _fp8_torch_dtype(src.dtype):
            src = _fp8_decode(src)
            if dst_type.scalar == tl.float32:
                return src
        if _fp8_torch_dtype(dst_type):
            return _fp8_encode(src, dst_type)
        return cast_impl(self, src, dst_type)

    original_fp_to_fp = builder.create_fp_to_fp

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if _fp8_torch_dtype(src.dtype) or _fp8_torch_dtype(dst_type):
            return self.cast_impl(src, dst_type)
        return original_fp_to_fp(self, src, dst_type, rounding_mode)

    builder.create_dot = create_dot_fp8
    builder.cast_impl = cast_impl_fp8
    builder.create_fp_to_fp = create_fp_to_fp
    builder.create_fp_trunc = lambda self, src, dst_type: self.cast_impl(src, dst_type)
    builder._ceiling_fixed = True


# The interpreter's FP8 conversions (Triton 3.9) go bit by bit through float16: they round
# ties away from zero, carry a rounded-up mantissa into the exponent with an OR instead of an
# add, read e4m3fn's NaN as 480 and FNUZ's NaN (0x80) as -0.0, and write out-of-range values
# as NaN codes. Its tl.dot on FP8 operands takes that same path (exact for finite values,
# since every FP8 value is a float16, but NaN inputs come out finite). The fix decodes and
# encodes through PyTorch's own FP8 conversions: exact, round-to-nearest-even, NaN kept.
_FP8_TORCH = {"fp8e4nv": "float8_e4m3fn", "fp8e5": "float8_e5m2", "fp8e4b8": "float8_e4m3fnuz",
              "fp8e5b16": "float8_e5m2fnuz"}


def _fp8_torch_dtype(tl_dtype):
    import torch

    name = _FP8_TORCH.get(getattr(tl_dtype.scalar, "name", ""))
    return getattr(torch, name) if name else None


def _fp8_decode(h):
    """An FP8 tensor handle (uint8 bits) as the float32 handle of the same values."""
    import numpy as np
    import torch
    import triton.language as tl
    from triton.runtime import interpreter

    dtype = _fp8_torch_dtype(h.dtype)
    if dtype is None:
        return h
    bits = torch.from_numpy(np.ascontiguousarray(h.data).view(np.uint8))
    return interpreter.TensorHandle(bits.view(dtype).float().numpy().reshape(h.data.shape), tl.float32)


def _fp8_encode(h, dst_type):
    """A float handle cast to FP8 the way the GPU's cvt.rn does for in-range values (nearest even)."""
    import numpy as np
    import torch
    from triton.runtime import interpreter

    values = torch.from_numpy(np.ascontiguousarray(h.data).astype(np.float32))
    bits = values.to(_fp8_torch_dtype(dst_type)).view(torch.uint8).numpy()
    return interpreter.TensorHandle(bits.reshape(h.data.shape), dst_type.scalar)


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
    # The twin runs the same source in a private copy of the module's globals in which every
    # @triton.jit helper is itself replaced by its twin, so kernels must call helpers by their bare
    # name, as the Triton tutorials do.
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
