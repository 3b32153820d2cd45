"""The two pair ops: the arrays each carries and its implementations, one per backend (the Triton
ones, on NVIDIA and AMD, run the same launcher at their target's tables and launch options)."""

from __future__ import annotations

from functools import partial

from ceiling.frontends import Signature
from ceiling.op import Implementation, Op, register
from ceiling.triangle import spec


def _attention_outputs(p):
    lse = "float64" if p.dtype == "float64" else "float32"  # the reference keeps float64 whole
    return (((p.batch, p.n, p.heads, p.n, p.head_dim), p.dtype), ((p.batch, p.n, p.heads, p.n), lse))


def saves_residuals(call) -> bool:
    """Whether the forward keeps [a; b] and y for the backward (a config's ``save_for_backward``)."""
    config = call.forward.config
    return bool(config is not None and config.get("save_for_backward"))


def _trimul_outputs(p):
    return (((p.batch, p.n, p.n, p.c_z), p.dtype), ((p.batch, 2 * p.c, p.n, p.n), p.dtype),
            ((p.batch, p.c, p.n, p.n), p.dtype))


ATTENTION_SIGNATURE = Signature(
    inputs=("q", "k", "v", "bias", "mask"),
    outputs=("out", "lse"),
    output_specs=_attention_outputs,
    optional=frozenset({"mask"}),
    grads=("q", "k", "v", "bias"),
    saved=("q", "k", "v", "bias", "mask", "out", "lse"),
    constant_outputs=frozenset({"lse"}),
)

# "ab" ([a; b], (B, 2c, N, N)) and "y" (the contraction, (B, c, N, N)) are what the forward keeps
# for the backward where the config says save_for_backward; empty otherwise (the backward then
# recomputes them, and between the passes a layer holds only its input).
TRIMUL_SIGNATURE = Signature(
    inputs=("x", "mask", *spec.TRIMUL_WEIGHTS),
    outputs=("out", "ab", "y"),
    output_specs=_trimul_outputs,
    optional=frozenset({"mask"}),
    grads=("x", *spec.TRIMUL_WEIGHTS),
    saved=("x", "mask", *spec.TRIMUL_WEIGHTS, "ab", "y"),
    constant_outputs=frozenset({"ab", "y"}),
    kept=frozenset({"ab", "y"}),
    keeps=saves_residuals,
)


_attention = partial(Implementation, "triangle_attention")
_trimul = partial(Implementation, "triangle_multiplicative_update")

TRIANGLE_ATTENTION = register(Op(
    "triangle_attention",
    ATTENTION_SIGNATURE,
    implementations=(
        _attention("reference", "reference", "ceiling.triangle.attention_reference"),
        _attention("triton", "nvidia", "ceiling.triton.triangle_attention_impl",
                family="triangle_attention", target="sm_90a"),
        _attention("triton", "amd", "ceiling.triton.triangle_attention_impl",
                family="triangle_attention", target="gfx942"),
        _attention("pallas", "tpu", "ceiling.tpu.triangle_attention", family="triangle_attention"),
        _attention("nki", "trainium", "ceiling.trainium.triangle_attention", family="triangle_attention"),
    ),
    check=spec.check_attention_arrays,
))

TRIANGLE_MULTIPLICATIVE_UPDATE = register(Op(
    "triangle_multiplicative_update",
    TRIMUL_SIGNATURE,
    implementations=(
        _trimul("reference", "reference", "ceiling.triangle.trimul_reference"),
        _trimul("triton", "nvidia", "ceiling.triton.triangle_multiplication_impl",
                family="triangle_multiplication", target="sm_90a"),
        _trimul("triton", "amd", "ceiling.triton.triangle_multiplication_impl",
                family="triangle_multiplication", target="gfx942"),
        _trimul("pallas", "tpu", "ceiling.tpu.triangle_multiplication", family="triangle_multiplication"),
        _trimul("nki", "trainium", "ceiling.trainium.triangle_multiplication", family="triangle_multiplication"),
    ),
    check=spec.check_trimul_arrays,
))
