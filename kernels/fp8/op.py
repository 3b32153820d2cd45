"""The quantizer op ``fp8_quantize``: one Triton source for NVIDIA and AMD, the float32 oracle as the
reference; not differentiable (codes carry no gradient)."""

from __future__ import annotations

from ceiling.fp8 import spec
from ceiling.frontends import Signature
from ceiling.op import Implementation, Op, register


def _outputs(p: spec.QuantizeProblem):
    return ((p.codes_shape, p.fp8), (p.scales_stored, "float32"))


FP8_QUANTIZE = register(Op(
    "fp8_quantize",
    Signature(inputs=("x",), outputs=("codes", "scales"), output_specs=_outputs,
              constant_outputs=frozenset({"codes", "scales"})),
    implementations=(
        Implementation("fp8_quantize", "reference", "reference", "ceiling.fp8.reference"),
        Implementation("fp8_quantize", "triton", "nvidia", "ceiling.triton.fp8_quantize"),
        Implementation("fp8_quantize", "triton", "amd", "ceiling.triton.fp8_quantize"),
    ),
    missing={
        "tpu": "the quantizers are Triton kernels; JAX callers get the jnp oracle (ceiling.fp8.reference)",
        "trainium": "the quantizers are Triton kernels; backend='reference' runs the float32 oracle",
    },
    check=spec.check_arrays,
    differentiable=False,
))
