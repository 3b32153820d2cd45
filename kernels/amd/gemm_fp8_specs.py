"""The CDNA3 FP8 GEMM's compile specs (``ceiling inspect scaled_gemm --target gfx942``, the static
tests, the search templates): a config of the gfx942 space as a launch specializes
:func:`ceiling.amd.gemm_fp8.gemm_fp8_kernel`, and one per shape class the gfx942 table ships."""

from __future__ import annotations

from ceiling import spaces
from ceiling.amd import cdna4
from ceiling.amd.gemm import ACTIVATION_CODES, COMPILE_KEYS
from ceiling.amd.gemm_fp8 import gemm_fp8_kernel
from ceiling.fp8.formats import TO_FNUZ, format_of
from ceiling.scaled_gemm.spec import ScaledGemmProblem, check_config_scales

FAMILY, TARGET = "gemm_fp8", "gfx942"
_TRITON_FNUZ = {"float8_e4m3fnuz": "fp8e4b8", "float8_e5m2fnuz": "fp8e5b16"}
_TRITON_OCP = {"float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5"}


def compile_spec(config: dict, a_kind: str = "1x128", b_kind: str = "128x128", dtype: str = "float8_e4m3fnuz",
                 out_dtype: str = "bfloat16", target: str = TARGET):
    """The ``ceiling.isa.CompileSpec`` of one config (a whole point of the gfx942 space, checked
    against it for these scale kinds): a row-major A, B as ``w.mT`` (K unit-stride, as the
    quantizers lay out both), bias + gelu, as a launch specializes the unit strides."""
    from ceiling.isa import CompileSpec

    shape = ScaledGemmProblem("torch", "cpu", m=0, n=0, k=0, a_dtype=dtype, b_dtype=dtype, a_scale=a_kind,
                              b_scale=b_kind, out_dtype=out_dtype)
    check_config_scales(shape, config)
    spaces.check(FAMILY, TARGET, config, {k: v for k, v in shape.features().items() if k not in ("M", "N", "K")})
    config = {key: v for key, v in config.items() if key != "SCALES"}
    # OCP operands reach a CDNA4 kernel as they are; CDNA3 takes them as FNUZ (ceiling.amd.gemm_fp8.forward)
    t = _TRITON_OCP[dtype] if target in cdna4.OCP_FP8 and dtype in _TRITON_OCP else _TRITON_FNUZ[TO_FNUZ.get(dtype, dtype)]
    out = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[out_dtype]
    signature = {"a_ptr": f"*{t}", "b_ptr": f"*{t}", "a_scale_ptr": "*fp32", "b_scale_ptr": "*fp32",
                 "bias_ptr": f"*{out}", "c_ptr": f"*{out}", "M": "i32", "N": "i32", "K": "i32"}
    unit = {"stride_ak", "stride_bk", "stride_cn"}
    unit |= {"1x128": {"stride_sam"}, "128x128": {"stride_sam"}, "row": {"stride_sam"}}.get(a_kind, set())
    unit |= {"128x128": {"stride_sbk"}, "row": {"stride_sbn"}, "1x128": {"stride_sbn"}}.get(b_kind, set())
    for name in ("stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn",
                 "stride_sam", "stride_sak", "stride_sbk", "stride_sbn"):
        signature[name] = "constexpr" if name in unit else "i32"
    constexprs = {name: 1 for name in unit}
    constexprs.update(A_SCALE=a_kind, B_SCALE=b_kind, BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"],
                      BLOCK_K=config["BLOCK_K"], GROUP_M=config["GROUP_M"], NUM_XCDS=8,
                      PROMOTE_STEPS=config["PROMOTE_STEPS"], EVEN_K=True, HAS_BIAS=True,
                      ACTIVATION=ACTIVATION_CODES["gelu"])
    for name in constexprs:
        signature[name] = "constexpr"
    aligned = tuple(n for n, ty in signature.items() if ty.startswith("*") or (ty == "i32" and n != "M"))
    name = "amd_gemm_fp8_{}x{}x{}_g{}_s{}_w{}_wpe{}_mi{}_kp{}_p{}_{}".format(
        config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], config["GROUP_M"], config["num_stages"],
        config["num_warps"], config["waves_per_eu"], config["matrix_instr_nonkdim"], config["kpack"],
        config["PROMOTE_STEPS"], f"{a_kind}/{b_kind}")
    return CompileSpec(name, gemm_fp8_kernel, signature, constexprs, {key: config[key] for key in COMPILE_KEYS},
                       config={**config, "scales": f"{a_kind}/{b_kind}"}, divisible_by_16=aligned)


# A problem of each shape class of the table with the scalings the class serves: skinny (decode M)
# on tensor and block scales, blockwise, large on tensor and row scales.
SHIPPED = ((16, ("tensor", "tensor")), (16, ("1x128", "128x128")), (8192, ("1x128", "128x128")),
           (8192, ("tensor", "tensor")), (8192, ("row", "row")))


def compile_specs(dtype: str = "float8_e4m3fnuz", target: str = TARGET) -> list:
    """A spec per shipped shape class of the gfx942 table, with the scale kinds it serves, as
    ``target``'s GPU resolves it (an MI355X on gfx950: OCP operands, the classes fitted to it)."""
    from ceiling.op import get, resolve_config
    from ceiling.triangle.spec import SHIPPED_GPUS

    default = "float8_e4m3fn" if target in cdna4.OCP_FP8 else "float8_e4m3fnuz"
    fp8, out = (dtype, "bfloat16") if format_of(dtype) is not None else (default, dtype)
    if target in cdna4.OCP_FP8:
        fp8 = {v: k for k, v in TO_FNUZ.items()}.get(fp8, fp8)
    gpu = dict(zip(("gpu", "arch"), SHIPPED_GPUS[target]))
    impl = get("scaled_gemm").implementation("amd")
    specs = []
    for m, (a_kind, b_kind) in SHIPPED:
        p = ScaledGemmProblem("torch", "cuda:0", **gpu, m=m, n=4096, k=4096, a_dtype=fp8, b_dtype=fp8, a_scale=a_kind,
                              b_scale=b_kind, out_dtype=out)
        specs.append(compile_spec(resolve_config(p, impl, None).as_dict(), a_kind, b_kind, dtype=fp8, out_dtype=out,
                                  target=target))
    return specs
