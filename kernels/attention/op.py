"""The attention op: the arrays it carries and its implementations, in the order a backend tries
them (an opt-in implementation first: it runs only where asked for or proven)."""

from __future__ import annotations

from functools import partial

from ceiling.attention import spec
from ceiling.frontends import Signature
from ceiling.op import Implementation, Op, register


def _output_specs(problem: spec.AttentionProblem):
    p = problem
    return (((p.batch, p.q_len, p.heads, p.head_dim), p.dtype), ((p.batch, p.heads, p.q_len), "float32"))


SIGNATURE = Signature(
    inputs=("q", "k", "v", "bias", "mask"),
    outputs=("out", "lse"),
    output_specs=_output_specs,
    optional=frozenset({"bias", "mask"}),
    grads=("q", "k", "v", "bias"),
    saved=("q", "k", "v", "bias", "mask", "out", "lse"),
    constant_outputs=frozenset({"lse"}),
)


_impl = partial(Implementation, "attention")


ATTENTION = register(Op(
    "attention",
    SIGNATURE,
    implementations=(
        _impl("reference", "reference", "ceiling.attention.reference"),
        _impl("gluon", "nvidia", "ceiling.nvidia.gluon.attention", family="attention_gluon", target="sm_90a",
              opt_in=True),
        _impl("triton", "nvidia", "ceiling.nvidia.attention", family="attention", target="sm_90a"),
        _impl("triton", "amd", "ceiling.amd.attention", family="attention", target="gfx942"),
        _impl("pallas", "tpu", "ceiling.tpu.attention", family="attention"),
        _impl("nki", "trainium", "ceiling.trainium.attention", family="attention"),
    ),
    check=spec.check_arrays,
))
