"""FP8: the formats, :func:`quantize` (the ``fp8_quantize`` op: Triton kernels on a GPU and, for
``backend="nvidia"``/``"amd"``, interpreted on CPU tensors; the float32 oracle otherwise) to the scale
layouts ``ceiling.scaled_gemm`` reads (the README's "FP8 GEMM" lists them and shows a call), and the
oracle.
"""

from __future__ import annotations

from typing import Any

from ceiling.fp8.formats import FNUZ, FORMATS, OCP, Format, format_of, ocp_to_fnuz
from ceiling.fp8.reference import GRANULARITIES, GROUP, dequantize, scale_shape

__all__ = ["quantize", "dequantize", "scale_shape", "format_of", "ocp_to_fnuz", "FORMATS", "OCP", "FNUZ",
           "GRANULARITIES", "GROUP", "Format"]



def quantize(x, granularity: str = "1x128", dtype=None, *, transpose: bool = False, pow2: bool = False,
             backend: str | None = None):
    """FP8 codes and float32 scales of the 2-D ``x``, grouped along its last dimension.

    Args:
        x: (rows, K) float16, bfloat16 or float32.
        granularity: "tensor", "row", "1x128" or "128x128" (see :mod:`ceiling.triton.fp8_quantize`).
        dtype: the FP8 dtype; ``torch.float8_e4m3fn`` by default (e5m2 for gradients,
            the FNUZ dtypes for AMD CDNA3).
        transpose: quantize ``x.T`` (written contiguous) instead of ``x``.
        pow2: round each scale up to a power of two.
        backend: "reference", or "nvidia"/"amd" for the Triton kernels (interpreted on CPU
            tensors); None picks the kernels on a GPU and the reference on the CPU.

    Returns ``(codes, scales)``: codes (rows, K) (or (K, rows)), scales of
    :func:`scale_shape` (1x128 scales column-major: one row block's scales adjacent);
    ``dequantize(codes, scales, granularity)`` gives the values back. Non-finite inputs: NaN
    stays NaN; an infinity stays infinite in e5m2 and becomes NaN in formats without
    infinities; neither counts toward a scale.
    """
    import torch

    from ceiling.backends import default_for_device
    from ceiling.fp8 import spec
    from ceiling.fp8.op import FP8_QUANTIZE

    dtype = torch.float8_e4m3fn if dtype is None else dtype
    problem = spec.check(x, granularity, dtype, backend, transpose, pow2)
    chosen = backend or default_for_device(problem.device)
    static = {"granularity": granularity, "dtype": problem.fp8, "backend": chosen, "transpose": problem.transpose,
              "pow2": problem.pow2}
    codes, scales = FP8_QUANTIZE.run(problem, chosen, None, (x,), static)
    return codes, spec.scales_view(problem, scales)
