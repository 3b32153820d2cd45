"""The GEMM spec: the frozen ``GemmProblem`` a call computes, and :func:`check`, which builds it
from the arrays and gives each violation its ``InputError`` naming the argument, on shapes, dtypes
and devices alone, before any kernel launches (what a call may be: ``docs/gemm.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ceiling.arrays import gpu_facts, require
from ceiling.errors import InputError
from ceiling.op import Problem

DTYPES = ("float16", "bfloat16", "float32")
ACTIVATIONS = (None, "relu", "gelu", "silu")
BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


@dataclass(frozen=True)
class GemmProblem(Problem):
    SIZES: ClassVar[tuple[str, ...]] = ("batch", "m", "n", "k")
    batch: int | None  # None for a 2-D product
    m: int
    n: int
    k: int
    dtype: str
    out_dtype: str
    bias_dtype: str | None
    activation: str | None
    b_shared: bool  # a 3-D ``a`` against a 2-D ``b``
    # a transposed view (unit stride along its rows' dimension: ``x.mT`` of a row-major array)
    a_trans: bool = False
    b_trans: bool = False

    @property
    def flops(self) -> int:
        return 2 * (self.batch or 1) * self.m * self.n * self.k

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.m, self.n) if self.batch is None else (self.batch, self.m, self.n)

    @property
    def rows(self) -> int:
        """M of the product the kernels run: a shared weight folds the batch into it."""
        return self.m * self.batch if self.b_shared else self.m

    def features(self) -> dict:
        """``M``, ``N``, ``K`` (M with a shared weight's batch folded in), the operand and output
        widths in bytes and whether a bias is added: what the tables and spaces read."""
        return {**super().features(), "M": self.rows, "N": self.n, "K": self.k, "dtype_bytes": BYTES[self.dtype],
                "out_dtype_bytes": BYTES[self.out_dtype], "has_bias": int(self.bias_dtype is not None)}




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
    gpu, arch = gpu_facts(ai.framework, ai.device)
    return GemmProblem(
        framework=ai.framework,
        device=ai.device,
        gpu=gpu,
        arch=arch,
        batch=batch,
        m=m,
        n=n,
        k=k,
        dtype=ai.dtype,
        out_dtype=out,
        bias_dtype=bias_dtype,
        activation=activation,
        b_shared=batch is not None and len(bi.shape) == 2,
        a_trans=_transposed(ai),
        b_trans=_transposed(bi),
    )


def _transposed(info) -> bool:
    return info.strides is not None and info.strides[-1] != 1


def check_arrays(a: Any, b: Any, bias: Any, **static: Any) -> GemmProblem:
    """:func:`check` with the arrays in the op's signature order (``ceiling.op.Op.check``)."""
    return check(a, b, bias, static.get("activation"), static.get("out_dtype"))


def default_backend(problem: GemmProblem) -> str:
    """Where GEMM runs when no backend is named: the device's vendor, else the reference."""
    from ceiling.backends import default_for_device

    return default_for_device(problem.device)


def shipped_problem(m: int, n: int, k: int, dtype: str = "bfloat16", *, out_dtype: str | None = None,
                    bias: bool = False, batch: int | None = None, b_shared: bool = False, gpu: str | None = None,
                    arch: str | None = None, framework: str = "torch") -> GemmProblem:
    """A problem on the named GPU (or the CPU), as the tables and compile specs are written for:
    no arrays needed, so a CPU can ask what a device would run."""
    device = ("cuda:0" if framework == "torch" else "gpu:0") if gpu else "cpu"
    return GemmProblem(framework=framework, device=device, gpu=gpu, arch=arch, batch=batch, m=m,
                       n=n, k=k, dtype=dtype, out_dtype=out_dtype or dtype, bias_dtype=dtype if bias else None,
                       activation=None, b_shared=b_shared)
