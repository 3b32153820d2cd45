"""The scaled (FP8) GEMM spec: what ``ceiling.scaled_gemm`` (FP8 operands of one family, float32 scales
of a kind each) and ``ceiling.fp8_gemm`` (the GEMM's contract on 2-D high-precision operands, a
recipe and a backward precision) accept, as the README's "FP8 GEMM" lists it, the error each
violation gets on shapes and dtypes alone, before any launch, and the frozen problems they become.
Where two scale kinds give the same shape they mean the same scaling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ceiling.arrays import gpu_facts, require
from ceiling.errors import InputError
from ceiling.fp8.formats import FNUZ, OCP
from ceiling.gemm.spec import DTYPES, _dtype_name, check_epilogue
from ceiling.op import Problem

FP8_DTYPES = OCP + FNUZ
OUT_DTYPES = DTYPES
SCALE_KINDS = ("tensor", "row", "1x128", "128x128")
K_VARYING = ("1x128", "128x128")  # scale kinds that change along K
GROUP = 128
# ceiling.fp8_gemm's recipes: name -> (scale kind of a, scale kind of b); b's kind is over b.T,
# the (N, K) weight.
RECIPES = {
    "tensor": ("tensor", "tensor"),  # one scale per operand (torchao's tensorwise)
    "row": ("row", "row"),  # per token of a, per output channel of b (torchao's rowwise)
    "block": ("1x128", "128x128"),  # DeepSeek-V3: 1x128 activation tiles, 128x128 weight blocks
}
GRAD_PRECISIONS = ("bf16", "fp8")
_OUT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def scales_key(a_kind: str, b_kind: str) -> str:
    """The scaling of a problem as the tables and the search space name it: ``"1x128/128x128"``."""
    return f"{a_kind}/{b_kind}"


@dataclass(frozen=True)
class ScaledGemmProblem(Problem):
    m: int
    n: int
    k: int
    a_dtype: str
    b_dtype: str
    a_scale: str  # kind, one of SCALE_KINDS
    b_scale: str
    out_dtype: str
    bias_dtype: str | None = None
    activation: str | None = None

    @property
    def fnuz(self) -> bool:
        return self.a_dtype in FNUZ

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def scales(self) -> str:
        return scales_key(self.a_scale, self.b_scale)

    @property
    def block_scaled(self) -> bool:
        """A scale that changes along K (1x128, 128x128): the kernels apply it per K block."""
        return self.a_scale in K_VARYING or self.b_scale in K_VARYING

    def features(self) -> dict[str, Any]:
        """The names the tables' conditions and the space's constraints read: the space's ``M``,
        ``N``, ``K``, ``SCALES`` and operand sizes, the operand ``dtype`` (a's) the tuned entries
        were measured with, and ``block_scaled``."""
        return {**super().features(), "M": self.m, "N": self.n, "K": self.k, "dtype": self.a_dtype,
                "SCALES": self.scales, "block_scaled": self.block_scaled, "dtype_bytes": 1,
                "out_dtype_bytes": _OUT_BYTES[self.out_dtype]}


@dataclass(frozen=True)
class Fp8GemmProblem(Problem):
    """``ceiling.fp8_gemm``: the high-precision problem, the recipe, and the backend whose
    quantizers and scaled GEMMs it runs (which fixes the FP8 formats: FNUZ on AMD)."""

    m: int
    n: int
    k: int
    dtype: str
    out_dtype: str
    recipe: str
    grad_precision: str
    backend: str
    bias_dtype: str | None = None
    activation: str | None = None

    @property
    def kinds(self) -> tuple[str, str]:
        return RECIPES[self.recipe]

    @property
    def formats(self) -> tuple[str, str]:
        """(operand, gradient) FP8 formats: e4m3 / e5m2, their FNUZ twins on AMD CDNA3."""
        if self.backend == "amd":
            return "float8_e4m3fnuz", "float8_e5m2fnuz"
        return "float8_e4m3fn", "float8_e5m2"

    def forward_gemm(self) -> ScaledGemmProblem:
        """The scaled GEMM of the forward: the quantized operands, the recipe's scale kinds."""
        fp8 = self.formats[0]
        return ScaledGemmProblem(self.framework, self.device, gpu=self.gpu, arch=self.arch, m=self.m, n=self.n,
                                 k=self.k, a_dtype=fp8, b_dtype=fp8, a_scale=self.kinds[0], b_scale=self.kinds[1],
                                 out_dtype=self.out_dtype, bias_dtype=self.bias_dtype, activation=self.activation)


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
            raise InputError(name, "an FP8 tensor that does not require grad (train through ceiling.fp8_gemm, "
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
    gpu, arch = gpu_facts(ai.framework, ai.device)
    return ScaledGemmProblem(ai.framework, ai.device, gpu=gpu, arch=arch, m=m, n=n, k=k, a_dtype=ai.dtype,
                             b_dtype=bi.dtype, a_scale=kinds[0], b_scale=kinds[1], out_dtype=out,
                             bias_dtype=bias_dtype, activation=activation)


def check_arrays(a: Any, b: Any, a_scale: Any, b_scale: Any, bias: Any, **static: Any) -> ScaledGemmProblem:
    """:func:`check` with the arrays in the op's signature order (``ceiling.op.Op.check``)."""
    return check(a, b, a_scale, b_scale, bias, static.get("activation"), static.get("out_dtype"))


def check_fp8_gemm(a: Any, b: Any, bias: Any = None, *, recipe: str, activation: str | None, out_dtype: Any,
                   grad_precision: str, backend: str | None) -> Fp8GemmProblem:
    """``ceiling.fp8_gemm``'s arguments: the GEMM's contract on 2-D high-precision operands, a recipe
    and a backward precision; the backend (None: the device's vendor, the reference off a GPU)."""
    from ceiling.backends import default_for_device
    from ceiling.gemm.spec import check as check_gemm

    problem = check_gemm(a, b, bias, activation, out_dtype)
    if problem.batch is not None:
        raise InputError("a", "a 2-D (M, K) array", f"batch {problem.batch}")
    if recipe not in RECIPES:
        raise InputError("recipe", f"one of {tuple(RECIPES)}", repr(recipe))
    if grad_precision not in GRAD_PRECISIONS:
        raise InputError("grad_precision", f"one of {GRAD_PRECISIONS}", repr(grad_precision))
    gpu, arch = gpu_facts(problem.framework, problem.device)
    return Fp8GemmProblem(problem.framework, problem.device, gpu=gpu, arch=arch, m=problem.m, n=problem.n,
                          k=problem.k, dtype=problem.dtype, out_dtype=problem.out_dtype, recipe=recipe,
                          grad_precision=grad_precision, backend=backend or default_for_device(problem.device),
                          bias_dtype=problem.bias_dtype,
                          activation=activation)


def check_fp8_gemm_arrays(a: Any, b: Any, bias: Any, **static: Any) -> Fp8GemmProblem:
    """:func:`check_fp8_gemm` in the op's signature order (``ceiling.op.Op.check``)."""
    return check_fp8_gemm(a, b, bias, **static)


def check_config_scales(problem: ScaledGemmProblem, config: Any) -> None:
    """A config serves the scale kinds it is called with: one that names ``SCALES`` must name the
    problem's, an InputError naming the key otherwise."""
    if isinstance(config, dict) and "SCALES" in config and config["SCALES"] != problem.scales:
        from ceiling.spaces import ConfigError

        raise ConfigError("SCALES", config["SCALES"], f"the call's scaling {problem.scales!r}",
                          "a config serves the scale kinds it is called with")


def kinds(a_shape, b_shape, a_scale_shape, b_scale_shape) -> tuple[str, str]:
    """The scale kinds of already checked operands, from shapes alone (what backends call)."""
    (m, k), n = tuple(a_shape), tuple(b_shape)[1]
    return (scale_kind("a_scale", tuple(a_scale_shape), m, k, True),
            scale_kind("b_scale", tuple(b_scale_shape), n, k, False))

