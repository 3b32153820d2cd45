"""The scaled (FP8) GEMM spec: what ``kernels.scaled_gemm`` accepts, and the error each violation gets.

``out = activation((a * a_scale) @ (b * b_scale) + bias)``, with the scales broadcast over
the blocks they cover, float32 accumulation, and

* ``a``: (M, K) and ``b``: (K, N), FP8: ``float8_e4m3fn`` / ``float8_e5m2`` (OCP; e5m2
  is meant for gradients), or their FNUZ twins ``float8_e4m3fnuz`` / ``float8_e5m2fnuz``
  (AMD CDNA3); any mix of e4m3 and e5m2 within one family. Row-major ``a`` and a
  column-major ``b`` (``w.mT`` for a weight ``w`` stored (N, K), as ``torch._scaled_mm``
  wants) are read in place; other layouts are copied by the Hopper kernel, whose FP8
  wgmma reads both operands K-major.
* ``a_scale`` and ``b_scale``: float32, one of these shapes each (``Kb = ceil(K/128)``,
  ``Mb = ceil(M/128)``, ``Nb = ceil(N/128)``), any strides:

  ==========  =================  ==================  ====================================
  kind        a_scale            b_scale             covers
  ==========  =================  ==================  ====================================
  tensor      () or (1,), (1,1)  () or (1,), (1,1)   the whole operand
  row         (M, 1)             (1, N)              a row of a / a column of b (all of K)
  1x128       (M, Kb)            (Kb, N)             one row (column) x 128 of K
  128x128     (Mb, Kb)           (Kb, Nb)            a 128 x 128 block
  ==========  =================  ==================  ====================================

  These are ``torch._scaled_mm``'s shapes (tensorwise, rowwise, and the DeepSeek-V3 /
  DeepGEMM blockwise 1x128 activations with 128x128 weights), and any pairing of kinds
  is accepted. Where two kinds give the same shape (M = 1, K <= 128, ...) they mean the
  same scaling.
* ``bias``: optional (N,), float16/bfloat16/float32, added in float32 after the scales.
* ``activation``: None, "relu", "gelu" (erf) or "silu"; ``out_dtype``: bfloat16 (default),
  float16 or float32.

All checks run on shapes and dtypes alone, before any kernel launches. FP8 operands carry no
gradient (``kernels.fp8_gemm`` is the trainable form); one that requires grad is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernels.arrays import require
from kernels.errors import InputError
from kernels.fp8.formats import FNUZ, OCP
from kernels.gemm.spec import DTYPES, _dtype_name, check_epilogue

FP8_DTYPES = OCP + FNUZ
OUT_DTYPES = DTYPES
SCALE_KINDS = ("tensor", "row", "1x128", "128x128")
GROUP = 128
# kernels.fp8_gemm's recipes: name -> (scale kind of a, scale kind of b); b's kind is over b.T,
# the (N, K) weight.
RECIPES = {
    "tensor": ("tensor", "tensor"),  # one scale per operand (torchao's tensorwise)
    "row": ("row", "row"),  # per token of a, per output channel of b (torchao's rowwise)
    "block": ("1x128", "128x128"),  # DeepSeek-V3: 1x128 activation tiles, 128x128 weight blocks
}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class ScaledGemmProblem:
    framework: str
    m: int
    n: int
    k: int
    a_dtype: str
    b_dtype: str
    a_scale: str  # kind, one of SCALE_KINDS
    b_scale: str
    out_dtype: str
    bias_dtype: str | None
    activation: str | None
    device: str

    @property
    def fnuz(self) -> bool:
        return self.a_dtype in FNUZ

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


def scale_kind(name: str, shape: tuple[int, ...], outer: int, k: int, outer_first: bool) -> str:
    """The kind of a scale of ``shape`` for an operand with ``outer`` rows (a) or columns (b)
    and inner dimension ``k``; InputError listing the accepted shapes otherwise."""
    kb, ob = cdiv(k, GROUP), cdiv(outer, GROUP)
    orient = (lambda o, i: (o, i)) if outer_first else (lambda o, i: (i, o))  # noqa: E731
    if shape in ((), (1,), (1, 1)):
        return "tensor"
    for kind, dims in (("row", orient(outer, 1)), ("1x128", orient(outer, kb)), ("128x128", orient(ob, kb))):
        if shape == dims:
            return kind
    which = "M" if outer_first else "N"
    expected = (f"shape () (tensor), {orient(outer, 1)} (row), {orient(outer, kb)} (1x128 along K) or "
                f"{orient(ob, kb)} (128x128) for {which}={outer}, K={k}")
    raise InputError(name, expected, f"shape {shape}")


def check(a: Any, b: Any, a_scale: Any, b_scale: Any, bias: Any = None, activation: str | None = None,
          out_dtype: Any = None) -> ScaledGemmProblem:
    ai, bi = require("a", a), require("b", b)
    if bi.framework != ai.framework:
        raise InputError("b", f"a {ai.framework} array like a", f"a {bi.framework} array")
    if len(ai.shape) != 2:
        raise InputError("a", "a 2-D (M, K) array", f"shape {ai.shape}")
    if len(bi.shape) != 2:
        raise InputError("b", "a 2-D (K, N) array", f"shape {bi.shape}")
    if ai.dtype not in FP8_DTYPES:
        raise InputError("a", f"an FP8 dtype in {FP8_DTYPES}", ai.dtype)
    family = FNUZ if ai.dtype in FNUZ else OCP
    if bi.dtype not in family:
        raise InputError("b", f"an FP8 dtype of a's family {family}", bi.dtype)
    m, k = ai.shape
    kb, n = bi.shape
    if kb != k:
        raise InputError("b", f"inner dimension {k} (a is {ai.shape})", f"shape {bi.shape}")
    if ai.device != bi.device:
        raise InputError("b", f"device {ai.device} like a", bi.device)
    for name, info in (("a", ai), ("b", bi)):
        if info.strides is not None and min(info.shape) > 1 and 1 not in info.strides:
            raise InputError(name, "unit stride in one of its dimensions (row- or column-major)", f"strides {info.strides}")
    for name, x in (("a", a), ("b", b)):
        if getattr(x, "requires_grad", False):
            raise InputError(name, "an FP8 tensor that does not require grad (train through kernels.fp8_gemm, "
                             "which quantizes inside and differentiates its high-precision inputs)", "requires_grad=True")
    kinds = []
    for name, scale, outer, outer_first in (("a_scale", a_scale, m, True), ("b_scale", b_scale, n, False)):
        si = require(name, scale)
        if si.framework != ai.framework:
            raise InputError(name, f"a {ai.framework} array like a", f"a {si.framework} array")
        if si.dtype != "float32":
            raise InputError(name, "dtype float32", si.dtype)
        if si.device != ai.device:
            raise InputError(name, f"device {ai.device} like a", si.device)
        if getattr(scale, "requires_grad", False):
            raise InputError(name, "a scale that does not require grad", "requires_grad=True")
        kinds.append(scale_kind(name, si.shape, outer, k, outer_first))
    bias_dtype = check_epilogue(bias, activation, ai, n)
    out = _dtype_name(out_dtype) or "bfloat16"
    if out not in OUT_DTYPES:
        raise InputError("out_dtype", f"one of {OUT_DTYPES}", out)
    return ScaledGemmProblem(ai.framework, m, n, k, ai.dtype, bi.dtype, kinds[0], kinds[1], out, bias_dtype,
                             activation, ai.device)


def scales_key(a_kind: str, b_kind: str) -> str:
    """The scaling of a problem as the tables and the search space name it: ``"1x128/128x128"``."""
    return f"{a_kind}/{b_kind}"


_OUT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def config_context(m: int | None, n: int | None, k: int | None, a_kind: str, b_kind: str, out_dtype: str,
                   config: Any = None) -> dict[str, Any]:
    """The problem's names the FP8 GEMM's search space reads (``kernels/spaces/gemm_fp8.json``): the
    shape where known, the operand and output sizes, the scaling (``SCALES``). A ``config`` that
    names ``SCALES`` must name the call's: an InputError otherwise."""
    scales = scales_key(a_kind, b_kind)
    if isinstance(config, dict) and "SCALES" in config and config["SCALES"] != scales:
        from kernels.spaces import ConfigError

        raise ConfigError("SCALES", config["SCALES"], f"the call's scaling {scales!r}",
                          "a config serves the scale kinds it is called with")
    context: dict[str, Any] = {"dtype_bytes": 1, "out_dtype_bytes": _OUT_BYTES[out_dtype], "SCALES": scales}
    context.update({name: v for name, v in (("M", m), ("N", n), ("K", k)) if v is not None})
    return context


def kinds(a_shape, b_shape, a_scale_shape, b_scale_shape) -> tuple[str, str]:
    """The scale kinds of already checked operands, from shapes alone (what backends call)."""
    (m, k), n = tuple(a_shape), tuple(b_shape)[1]
    return (scale_kind("a_scale", tuple(a_scale_shape), m, k, True),
            scale_kind("b_scale", tuple(b_scale_shape), n, k, False))

