"""The GEMM spec: what ``kernels.gemm`` accepts, and the error each violation gets.

``out = activation(a @ b + bias)`` with

* ``a``: (M, K) or (batch, M, K); ``b``: (K, N) or (batch, K, N). A 3-D ``a`` may
  take a 2-D ``b`` (one weight for the whole batch); a 2-D ``a`` with a 3-D ``b``
  is refused.
* Any strides whose last or second-to-last dimension is unit-stride: row-major
  tensors and transposed views (``x.mT``) run without a copy.
* dtypes float16, bfloat16 or float32, the same for ``a`` and ``b``; accumulation
  is always float32. float32 inputs go through the tensor cores as TF32 on the
  GPU backends (about 10 mantissa bits per product).
* ``bias``: shape (N,), any of those dtypes, added in float32.
* ``activation``: None, "relu", "gelu" (exact, erf form) or "silu".
* ``out_dtype``: defaults to the input dtype.

All checks run on shapes and dtypes alone, before any kernel launches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernels.arrays import require
from kernels.errors import InputError

DTYPES = ("float16", "bfloat16", "float32")
ACTIVATIONS = (None, "relu", "gelu", "silu")


@dataclass(frozen=True)
class GemmProblem:
    framework: str
    batch: int | None  # None for a 2-D product
    m: int
    n: int
    k: int
    dtype: str
    out_dtype: str
    bias_dtype: str | None
    activation: str | None
    device: str
    b_shared: bool  # a 3-D ``a`` against a 2-D ``b``

    @property
    def flops(self) -> int:
        return 2 * (self.batch or 1) * self.m * self.n * self.k

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.m, self.n) if self.batch is None else (self.batch, self.m, self.n)




def _dtype_name(dtype: Any) -> str | None:
    if dtype is None:
        return None
    name = str(dtype).removeprefix("torch.")
    try:  # numpy / jax dtypes and their scalar types
        import numpy as np

        name = np.dtype(dtype).name if not isinstance(dtype, str) and "torch" not in str(type(dtype)) else name
    except TypeError:
        pass
    return name


def check_epilogue(bias: Any, activation: str | None, ai: Any, n: int) -> str | None:
    """Check the fused epilogue's arguments against operand ``a`` (its ``require`` info) and the
    output width ``n``; the bias dtype (None without a bias)."""
    if activation not in ACTIVATIONS:
        raise InputError("activation", f"one of {ACTIVATIONS}", repr(activation))
    if bias is None:
        return None
    ci = require("bias", bias)
    if ci.framework != ai.framework:
        raise InputError("bias", f"a {ai.framework} array like a", f"a {ci.framework} array")
    if ci.shape != (n,):
        raise InputError("bias", f"shape ({n},)", f"shape {ci.shape}")
    if ci.dtype not in DTYPES:
        raise InputError("bias", f"dtype in {DTYPES}", ci.dtype)
    if ci.device != ai.device:
        raise InputError("bias", f"device {ai.device} like a", ci.device)
    return ci.dtype


def check(a: Any, b: Any, bias: Any = None, activation: str | None = None, out_dtype: Any = None) -> GemmProblem:
    ai, bi = require("a", a), require("b", b)
    if bi.framework != ai.framework:
        raise InputError("b", f"a {ai.framework} array like a", f"a {bi.framework} array")
    if len(ai.shape) not in (2, 3):
        raise InputError("a", "a 2-D (M, K) or 3-D (batch, M, K) array", f"shape {ai.shape}")
    if len(bi.shape) not in (2, 3):
        raise InputError("b", "a 2-D (K, N) or 3-D (batch, K, N) array", f"shape {bi.shape}")
    if len(ai.shape) == 2 and len(bi.shape) == 3:
        raise InputError("b", "a 2-D (K, N) array when a is 2-D", f"shape {bi.shape}")
    if ai.dtype not in DTYPES:
        raise InputError("a", f"dtype in {DTYPES}", ai.dtype)
    if bi.dtype != ai.dtype:
        raise InputError("b", f"dtype {ai.dtype} like a", bi.dtype)
    m, k = ai.shape[-2:]
    kb, n = bi.shape[-2:]
    if kb != k:
        raise InputError("b", f"inner dimension {k} (a is {ai.shape})", f"shape {bi.shape}")
    batch = ai.shape[0] if len(ai.shape) == 3 else None
    if len(bi.shape) == 3 and bi.shape[0] != batch:
        raise InputError("b", f"batch {batch} like a", f"shape {bi.shape}")
    if ai.device != bi.device:
        raise InputError("b", f"device {ai.device} like a", bi.device)
    for name, info in (("a", ai), ("b", bi)):
        if info.strides is not None and min(info.shape[-2:]) > 1 and 1 not in info.strides[-2:]:
            raise InputError(
                name, "unit stride in one of the last two dimensions (row-major or a transposed view)", f"strides {info.strides}"
            )
    bias_dtype = check_epilogue(bias, activation, ai, n)
    out = _dtype_name(out_dtype) or ai.dtype
    if out not in DTYPES:
        raise InputError("out_dtype", f"one of {DTYPES}", out)
    return GemmProblem(
        framework=ai.framework,
        batch=batch,
        m=m,
        n=n,
        k=k,
        dtype=ai.dtype,
        out_dtype=out,
        bias_dtype=bias_dtype,
        activation=activation,
        device=ai.device,
        b_shared=batch is not None and len(bi.shape) == 2,
    )


def default_backend(problem: GemmProblem) -> str:
    """Where GEMM runs when no backend is named: the device's vendor, else the reference."""
    from kernels.backends import default_for_device

    return default_for_device(problem.device)
