"""FP8: the formats, quantization to the scale layouts the scaled GEMM reads, and its oracle.

    from kernels import fp8
    q, s = fp8.quantize(x, "1x128")                    # activations: DeepSeek-V3 1x128 tiles
    w_q, w_s = fp8.quantize(w, "128x128")              # a weight stored (N, K): 128x128 blocks
    y = kernels.scaled_gemm(q, w_q.mT, s, w_s.mT)      # x @ w.T in FP8, bf16 out
    x_t, x_ts = fp8.quantize(x, "1x128", transpose=True)   # x.T grouped along M, for dW

``quantize`` runs the Triton kernels of :mod:`kernels.triton.fp8_quantize` on a GPU (and under the
Triton interpreter for ``backend="nvidia"``/``"amd"`` on CPU tensors) and the float32
oracle of :mod:`kernels.fp8.reference` otherwise. The package is the one home of FP8
quantization; the GEMM itself is :func:`kernels.scaled_gemm`.
"""

from __future__ import annotations

from typing import Any

from kernels.errors import InputError
from kernels.fp8.formats import FNUZ, FORMATS, OCP, Format, format_of, ocp_to_fnuz
from kernels.fp8.reference import GRANULARITIES, GROUP, dequantize, scale_shape

__all__ = ["quantize", "dequantize", "scale_shape", "format_of", "ocp_to_fnuz", "FORMATS", "OCP", "FNUZ",
           "GRANULARITIES", "GROUP", "Format"]

SOURCE_DTYPES = ("float16", "bfloat16", "float32")
QUANTIZE_BACKENDS = ("reference", "nvidia", "amd")


def check_quantize(x: Any, granularity: str, dtype: Any, backend: str | None) -> None:
    """InputError naming the argument, before any launch."""
    import torch

    if not isinstance(x, torch.Tensor):
        raise InputError("x", "a torch.Tensor", type(x).__name__)
    if x.dim() != 2:
        raise InputError("x", "a 2-D (rows, K) tensor", f"shape {tuple(x.shape)}")
    if str(x.dtype).removeprefix("torch.") not in SOURCE_DTYPES:
        raise InputError("x", f"dtype in {SOURCE_DTYPES}", str(x.dtype))
    if granularity not in GRANULARITIES:
        raise InputError("granularity", f"one of {GRANULARITIES}", repr(granularity))
    if format_of(dtype) is None:
        raise InputError("dtype", f"an FP8 dtype among {sorted(FORMATS)}", repr(dtype))
    if backend is not None and backend not in QUANTIZE_BACKENDS:
        raise InputError("backend", f"one of {QUANTIZE_BACKENDS} or None", repr(backend))


def quantize(x, granularity: str = "1x128", dtype=None, *, transpose: bool = False, pow2: bool = False,
             backend: str | None = None):
    """FP8 codes and float32 scales of the 2-D ``x``, grouped along its last dimension.

    Args:
        x: (rows, K) float16, bfloat16 or float32.
        granularity: "tensor", "row", "1x128" or "128x128" (see :mod:`kernels.triton.fp8_quantize`).
        dtype: the FP8 dtype; ``torch.float8_e4m3fn`` by default (e5m2 for gradients,
            the FNUZ dtypes for AMD CDNA3).
        transpose: quantize ``x.T`` (written contiguous) instead of ``x``.
        pow2: round each scale up to a power of two.
        backend: "reference", or "nvidia"/"amd" for the Triton kernels (interpreted on CPU
            tensors); None picks the kernels on a GPU and the reference on the CPU.

    Returns ``(codes, scales)``: codes (rows, K) (or (K, rows)), scales of
    :func:`scale_shape`; ``dequantize(codes, scales, granularity)`` gives the values back.
    Non-finite inputs: NaN stays NaN; an infinity stays infinite in e5m2 and becomes NaN
    in formats without infinities; neither counts toward a scale.
    """
    import torch

    dtype = torch.float8_e4m3fn if dtype is None else dtype
    check_quantize(x, granularity, dtype, backend)
    from kernels.fp8 import torch_ops

    chosen = backend or ("reference" if not x.is_cuda else ("amd" if torch.version.hip else "nvidia"))
    return torch_ops.quantize_op(x, granularity, dtype, transpose, pow2, chosen)
