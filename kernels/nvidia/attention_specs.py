"""Compile specs of the shipped Hopper attention configs for ``ceiling.isa`` (``ceiling inspect
attention --target sm_90a``, the static tests): the configs an H200 resolves through the op."""

from __future__ import annotations

from ceiling.triton.attention_specs import kernel_specs, tuned_head_dims

H200 = {"gpu": "NVIDIA H200", "arch": "sm_90"}


def compile_specs(dtype: str = "bfloat16", target: str = "sm_90a") -> list:
    """Every tuned head dim causal through TMA, and non-causal with a full bias and mask (the
    ``narrow`` tiles). Other head dims run zero-padded to these on Hopper."""
    from ceiling.attention.op import ATTENTION
    from ceiling.attention.spec import shipped_problem
    from ceiling.op import resolve_config

    from ceiling.triangle.spec import SHIPPED_GPUS

    gpu = dict(zip(("gpu", "arch"), SHIPPED_GPUS[target]))  # the H200 on sm_90a, a B200 on sm_100a
    impl = ATTENTION.implementation("nvidia")
    pads = sorted(tuned_head_dims("nvidia", "sm_90a"))
    specs = []
    for biased in (False, True):
        for pad in pads:
            problem = shipped_problem(pad, dtype, causal=not biased, biased=biased, **gpu)
            cfg = resolve_config(problem, impl, None)
            specs += kernel_specs(pad, cfg, dtype=dtype, causal=not biased, bias=biased, mask=biased)
    return specs
