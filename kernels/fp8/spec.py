"""The quantizer's spec: what ``ceiling.fp8.quantize`` accepts (a 2-D float16/bfloat16/float32 torch
tensor, a granularity, an FP8 dtype, a backend), the error each violation gets, and the frozen
problem it becomes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ceiling.arrays import gpu_facts, require
from ceiling.errors import InputError
from ceiling.fp8.formats import FORMATS, format_of, name_of
from ceiling.fp8.reference import GRANULARITIES, scale_shape
from ceiling.op import Problem

SOURCE_DTYPES = ("float16", "bfloat16", "float32")
QUANTIZE_BACKENDS = ("reference", "nvidia", "amd")


@dataclass(frozen=True)
class QuantizeProblem(Problem):
    rows: int  # of the source (before any transpose)
    cols: int
    dtype: str  # the source's
    granularity: str
    fp8: str  # the codes' format
    transpose: bool = False
    pow2: bool = False

    @property
    def codes_shape(self) -> tuple[int, int]:
        return (self.cols, self.rows) if self.transpose else (self.rows, self.cols)

    @property
    def scales_stored(self) -> tuple[int, ...]:
        """The scales' shape as the kernels store them: 1x128 scales K-block-major (one row block's
        scales adjacent, as cuBLASLt and DeepGEMM read them), every other kind as its shape."""
        shape = scale_shape(self.granularity, *self.codes_shape)
        return shape[::-1] if self.granularity == "1x128" else shape


def scales_view(problem: QuantizeProblem, stored: Any) -> Any:
    """The scales in their logical shape (:func:`ceiling.fp8.scale_shape`) from their storage."""
    return stored.T if problem.granularity == "1x128" else stored


def check(x: Any, granularity: str, dtype: Any, backend: str | None, transpose: bool = False,
          pow2: bool = False) -> QuantizeProblem:
    """InputError naming the argument, before any launch."""
    import torch

    if not isinstance(x, torch.Tensor):
        raise InputError("x", "a torch.Tensor", type(x).__name__)
    xi = require("x", x)
    if len(xi.shape) != 2:
        raise InputError("x", "a 2-D (rows, K) tensor", f"shape {xi.shape}")
    if xi.dtype not in SOURCE_DTYPES:
        raise InputError("x", f"dtype in {SOURCE_DTYPES}", str(x.dtype))
    if granularity not in GRANULARITIES:
        raise InputError("granularity", f"one of {GRANULARITIES}", repr(granularity))
    if format_of(dtype) is None:
        raise InputError("dtype", f"an FP8 dtype among {sorted(FORMATS)}", repr(dtype))
    if backend is not None and backend not in QUANTIZE_BACKENDS:
        raise InputError("backend", f"one of {QUANTIZE_BACKENDS} or None", repr(backend))
    gpu, arch = gpu_facts(xi.framework, xi.device)
    return QuantizeProblem(xi.framework, xi.device, gpu=gpu, arch=arch, rows=xi.shape[0], cols=xi.shape[1],
                           dtype=xi.dtype, granularity=granularity, fp8=name_of(dtype), transpose=bool(transpose),
                           pow2=bool(pow2))


def check_arrays(x: Any, **static: Any) -> QuantizeProblem:
    """:func:`check` in the op's signature order (``ceiling.op.Op.check``)."""
    return check(x, static["granularity"], static["dtype"], static.get("backend"), static["transpose"],
                 static["pow2"])
