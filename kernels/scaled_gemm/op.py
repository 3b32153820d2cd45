"""The scaled GEMM ops: ``scaled_gemm`` on FP8 operands (its implementations: the reference, the
Hopper and CDNA3 Triton kernels) and ``fp8_gemm``, the trainable form, which quantizes and runs
``scaled_gemm`` on the same backend and whose backward is more GEMMs through the forward ops."""

from __future__ import annotations

from ceiling.fp8.reference import scale_shape
from ceiling.frontends import Signature
from ceiling.op import Implementation, Op, register
from ceiling.scaled_gemm import spec, trainable

# Why there is no FP8 GEMM on TPU and Trainium (fp8_gemm runs scaled_gemm on its backend: the same)
MISSING = {
    "tpu": ("no FP8 kernel: the MXUs of the TPU generations targeted here (v5e, v5p, v6e) multiply FP8 only as "
            "e5m2 or e4m3b11fnuz (Mosaic's is_matmul_supported), and OCP e4m3fn, the operand format, only on "
            "TPU7x; backend='reference' runs the dequantized product through XLA"),
    "trainium": ("no FP8 kernel yet: trn2's TensorE multiplies e4m3/e5m2 (and the NKI emulator accepts them), but "
                 "the fine-grained scales need a PSUM tile per 128-deep K step rescaled on VectorE, which is not "
                 "written; backend='reference' runs the dequantized product"),
}


def _scaled_outputs(p: spec.ScaledGemmProblem):
    return (((p.m, p.n), p.out_dtype),)


SCALED_GEMM = register(Op(
    "scaled_gemm",
    Signature(
        inputs=("a", "b", "a_scale", "b_scale", "bias"),
        outputs=("out",),
        output_specs=_scaled_outputs,
        optional=frozenset({"bias"}),
        grads=("bias",),  # FP8 operands and their scales carry no gradient (the spec refuses ones that ask)
        saved=("a", "b", "a_scale", "b_scale", "bias", "out"),
    ),
    implementations=(
        Implementation("scaled_gemm", "reference", "reference", "ceiling.scaled_gemm.reference"),
        Implementation("scaled_gemm", "triton", "nvidia", "ceiling.nvidia.gemm_fp8", family="gemm_fp8",
                       target="sm_90a"),
        Implementation("scaled_gemm", "triton", "amd", "ceiling.amd.gemm_fp8", family="gemm_fp8", target="gfx942"),
    ),
    missing=MISSING,
    check=spec.check_arrays,
))


def _fp8_outputs(p: spec.Fp8GemmProblem):
    ka, kb = p.kinds
    fp8 = p.formats[0]
    return (((p.m, p.n), p.out_dtype), ((p.m, p.k), fp8), (scale_shape(ka, p.m, p.k), "float32"),
            ((p.n, p.k), fp8), (scale_shape(kb, p.n, p.k), "float32"))


FP8_CODES = ("a_codes", "a_scales", "bt_codes", "bt_scales")  # the quantized operands, saved for the backward

FP8_GEMM = register(Op(
    "fp8_gemm",
    Signature(
        inputs=("a", "b", "bias"),
        outputs=("out", *FP8_CODES),
        output_specs=_fp8_outputs,
        optional=frozenset({"bias"}),
        grads=("a", "b", "bias"),
        saved=(*FP8_CODES, "bias", "out"),
        constant_outputs=frozenset(FP8_CODES),
    ),
    implementations=tuple(
        Implementation("fp8_gemm", "quantize+scaled_gemm", backend, "ceiling.scaled_gemm.trainable")
        for backend in ("reference", "nvidia", "amd")),
    missing=MISSING,
    check=spec.check_fp8_gemm_arrays,
    torch_backward=trainable.fp8_gemm_backward,
))
