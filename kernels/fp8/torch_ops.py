"""``ceiling::fp8_quantize``: quantization as a PyTorch custom op (fake registration included),
so ``torch.compile(fullgraph=True)`` sees one opaque node instead of tracing a Triton launch."""

from __future__ import annotations

import torch

from kernels.fp8 import reference
from kernels.fp8.formats import format_of


@torch.library.custom_op("ceiling::fp8_quantize", mutates_args=())
def quantize_op(x: torch.Tensor, granularity: str, dtype: torch.dtype, transpose: bool, pow2: bool,
                backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    if backend == "reference":
        return reference.quantize(x, granularity, dtype, transpose=transpose, pow2=pow2)
    from kernels.triton import fp8_quantize

    return fp8_quantize.quantize(x, granularity, dtype, transpose=transpose, pow2=pow2)


def empty_quantized(x: torch.Tensor, granularity: str, dtype: torch.dtype, transpose: bool):
    """Uninitialized (codes, scales) with the shapes, dtypes and strides ``quantize`` returns."""
    rows, cols = (x.shape[1], x.shape[0]) if transpose else tuple(x.shape)
    q = x.new_empty((rows, cols), dtype=format_of(dtype).dtype)
    shape = reference.scale_shape(granularity, rows, cols)
    if granularity == "1x128":
        return q, x.new_empty(shape[::-1], dtype=torch.float32).T
    return q, x.new_empty(shape, dtype=torch.float32)


@quantize_op.register_fake
def _(x, granularity, dtype, transpose, pow2, backend):
    return empty_quantized(x, granularity, dtype, transpose)
