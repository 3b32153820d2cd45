"""Compile specs of the CDNA3 GEMM for ``ceiling.isa`` (static facts: MFMA, scratch, LDS,
occupancy): one per shape class of the gfx942 table, fitted to the dtype, plus the split-K
partial-product variant and the split-K reduction."""

from __future__ import annotations

from ceiling import tables
from ceiling.amd.gemm import (ACTIVATION_CODES, COMPILE_KEYS, TARGET_ARCH, fit_to_dtype, fp32_precision, gemm_kernel,
                              splitk_reduce_kernel)

_TRITON_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def shape_classes() -> dict[str, dict]:
    """The gfx942 table's shape classes (its labelled entries), by label, in the table's order."""
    entries = tables.read(tables.path("amd", TARGET_ARCH, "gemm"))["entries"]
    return {e["label"]: dict(e["config"]) for e in entries if "label" in e}


def kernel_signature(dtype: str, config: dict, *, activation: str | None = "gelu", bias: bool = True,
                     transposed_a: bool = False, transposed_b: bool = False, out_dtype: str | None = None,
                     even_k: bool = True):
    """(signature, constexprs, divisible_by_16) for compiling ``gemm_kernel`` as a
    launch with these operands would specialize it: the unit strides become constants
    (that is what makes the loads wide), pointers are 16-byte aligned, and N, K and
    the leading strides are multiples of 16."""
    t = _TRITON_DTYPES[dtype]
    out = _TRITON_DTYPES[out_dtype or dtype] if config.get("SPLIT_K", 1) == 1 else "fp32"
    unit = {"stride_ak": not transposed_a, "stride_am": transposed_a,
            "stride_bn": not transposed_b, "stride_bk": transposed_b, "stride_cn": True}
    signature = {"a_ptr": f"*{t}", "b_ptr": f"*{t}", "bias_ptr": f"*{t}", "c_ptr": f"*{out}"}
    for name in ("M", "N", "K", "K_PER_SPLIT", "stride_ab", "stride_am", "stride_ak", "stride_bb",
                 "stride_bk", "stride_bn", "stride_cs", "stride_cb", "stride_cm", "stride_cn"):
        signature[name] = "constexpr" if unit.get(name) else "i32"
    constexprs = {name: 1 for name, is_unit in unit.items() if is_unit}
    constexprs.update(
        BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"], BLOCK_K=config["BLOCK_K"],
        GROUP_M=config["GROUP_M"], SPLIT_K=config.get("SPLIT_K", 1), NUM_XCDS=8,
        EVEN_K=even_k, HAS_BIAS=bias, ACTIVATION=ACTIVATION_CODES[activation],
        INPUT_PRECISION=fp32_precision(TARGET_ARCH) if dtype == "float32" else "ieee",
        LARGE_OFFSETS=False,
    )
    for name in constexprs:
        signature[name] = "constexpr"
    aligned = tuple(n for n, ty in signature.items() if ty.startswith("*") or (ty == "i32" and n != "M"))
    return signature, constexprs, aligned


def compile_specs(dtype: str = "bfloat16") -> list:
    """A ``ceiling.isa.CompileSpec`` per shipped shape class (row-major operands, bias + gelu
    epilogue, the heaviest on registers), plus the split-K partial-product variant and the split-K
    reduction."""
    from ceiling.isa import CompileSpec

    classes = shape_classes()
    specs = []
    for name, config in classes.items():
        cfg = fit_to_dtype(config, dtype)
        signature, constexprs, aligned = kernel_signature(dtype, cfg)
        options = {key: cfg[key] for key in COMPILE_KEYS}
        specs.append(CompileSpec(f"amd_gemm_{name}_{dtype}", gemm_kernel, signature, constexprs, options,
                                 config={"class": name, **cfg}, divisible_by_16=aligned))
    # Split-K: the partial-product variant of the skinniest class (fp32 workspace out).
    cfg = {**fit_to_dtype(classes["skinny_m16"], dtype), "SPLIT_K": 4}
    signature, constexprs, aligned = kernel_signature(dtype, cfg)
    specs.append(CompileSpec(f"amd_gemm_skinny_m16_splitk4_{dtype}", gemm_kernel, signature, constexprs,
                             {key: cfg[key] for key in COMPILE_KEYS}, config={"class": "skinny_m16", **cfg},
                             divisible_by_16=aligned))
    t = _TRITON_DTYPES[dtype]
    signature = {"ws_ptr": "*fp32", "bias_ptr": f"*{t}", "c_ptr": f"*{t}", "M": "i32", "N": "i32",
                 "stride_ws": "i32", "stride_wb": "i32", "stride_wm": "i32", "stride_cb": "i32", "stride_cm": "i32",
                 "stride_cn": "constexpr"}
    constexprs = {"stride_cn": 1, "SPLIT_K": 4, "BLOCK_M": 64, "BLOCK_N": 64, "HAS_BIAS": True, "ACTIVATION": 2}
    for name in constexprs:
        signature[name] = "constexpr"
    aligned = tuple(n for n in signature if signature[n] != "constexpr" and n != "M")
    specs.append(CompileSpec(f"amd_gemm_splitk_reduce_{dtype}", splitk_reduce_kernel, signature, constexprs,
                             {"num_warps": 4}, config={"class": "splitk_reduce", "SPLIT_K": 4},
                             divisible_by_16=aligned))
    return specs


def compile_spec(config: dict, dtype: str = "bfloat16"):
    """The ``ceiling.isa.CompileSpec`` of one config (any point of a search space), row-major
    operands with the bias + gelu epilogue like the shipped specs."""
    from ceiling.isa import CompileSpec

    cfg = {"SPLIT_K": 1, **config}
    signature, constexprs, aligned = kernel_signature(dtype, cfg)
    name = "amd_gemm_{}x{}x{}_g{}_s{}_w{}_wpe{}_mi{}_kp{}_sk{}_{}".format(
        cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["GROUP_M"], cfg["num_stages"], cfg["num_warps"],
        cfg["waves_per_eu"], cfg["matrix_instr_nonkdim"], cfg["kpack"], cfg["SPLIT_K"], dtype)
    return CompileSpec(name, gemm_kernel, signature, constexprs, {key: cfg[key] for key in COMPILE_KEYS},
                       config=dict(cfg), divisible_by_16=aligned)
