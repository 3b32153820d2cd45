"""The quantizers' compile specs for ``ceiling inspect fp8_quantize`` and the static tests: each kernel of
:mod:`ceiling.triton.fp8_quantize` as a launch on 16-byte aligned tensors specializes it."""

from __future__ import annotations

from ceiling.fp8.formats import FORMATS
from ceiling.fp8.reference import GROUP
from ceiling.triton.fp8_quantize import (AMAX_BLOCK, AMAX_PROGRAMS_GPU, BLOCK_ROWS, next_pow2, amax_partials_kernel,
                                         format_constants, quantize_groups_kernel, quantize_rows_kernel,
                                         quantize_tensor_kernel)


def compile_specs(dtype: str = "bfloat16", fp8: str = "float8_e4m3fn") -> list:
    """A ``ceiling.isa.CompileSpec`` per quantizer, for a ``dtype`` source (K unit-stride) and ``fp8`` codes,
    as a launch on 16-byte aligned tensors specializes them; the row quantizer reads the source
    transposed (what ``transpose=True`` compiles to)."""
    from ceiling.isa import CompileSpec

    src = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[dtype]
    consts = dict(format_constants(FORMATS[fp8]), POW2=False)
    base = {"x_ptr": f"*{src}", "q_ptr": "*u8", "s_ptr": "*fp32", "R": "i32", "C": "i32"}
    aligned = ("x_ptr", "q_ptr", "s_ptr", "partial_ptr", "C", "stride_xr", "stride_xc", "stride_qr", "stride_sc")

    def spec(name, fn, strides, constexprs, warps, **extra_sig):
        signature = {**base, **extra_sig}
        values = {**consts, **constexprs} if "FP8" in fn.arg_names else dict(constexprs)
        for arg, unit in strides.items():
            signature[arg] = "constexpr" if unit else "i32"
            if unit:
                values[arg] = 1
        signature = {a: signature.get(a, "constexpr") for a in fn.arg_names}
        return CompileSpec(f"fp8_quantize_{name}_{dtype}_{fp8}", fn, signature, values, {"num_warps": warps},
                           {"kernel": name}, divisible_by_16=tuple(a for a in aligned if signature.get(a) not in (None, "constexpr")))

    tile_strides = {"stride_xr": False, "stride_xc": True, "stride_qr": False, "stride_qc": True,
                    "stride_sr": True, "stride_sc": False}
    return [
        spec("1x128", quantize_groups_kernel, tile_strides, dict(BLOCK_R=BLOCK_ROWS, ONE_SCALE_PER_TILE=False), 4),
        spec("128x128", quantize_groups_kernel, dict(tile_strides, stride_sr=False, stride_sc=True),
             dict(BLOCK_R=GROUP, ONE_SCALE_PER_TILE=True), 8),
        spec("row_transposed", quantize_rows_kernel, {"stride_xr": True, "stride_xc": False, "stride_qr": False,
                                                      "stride_qc": True, "stride_sr": True},
             dict(BLOCK_R=BLOCK_ROWS, BLOCK_C=128), 4),
        spec("tensor_amax", amax_partials_kernel, {"stride_xr": False, "stride_xc": True},
             dict(NUM_PROGRAMS=AMAX_PROGRAMS_GPU, BLOCK_R=AMAX_BLOCK[0], BLOCK_C=AMAX_BLOCK[1]), 4, partial_ptr="*fp32"),
        spec("tensor", quantize_tensor_kernel, {"stride_xr": False, "stride_xc": True, "stride_qr": False, "stride_qc": True},
             dict(NUM_PARTIALS=next_pow2(AMAX_PROGRAMS_GPU), BLOCK_R=AMAX_BLOCK[0], BLOCK_C=AMAX_BLOCK[1]), 4,
             partial_ptr="*fp32"),
    ]


def compile_specs_fnuz(dtype: str = "bfloat16") -> list:
    """The quantizers as CDNA3 runs them: FNUZ codes."""
    return compile_specs(dtype, "float8_e4m3fnuz")

