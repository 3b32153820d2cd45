"""Compile specs of the shipped CDNA3 attention configs for ``ceiling.isa`` (``ceiling inspect
attention --target gfx942``, the static tests): the configs an MI300X resolves through the op."""

from __future__ import annotations

from ceiling.triton.attention_specs import kernel_specs, tuned_head_dims

MI300X = {"gpu": "AMD Instinct MI300X", "arch": "gfx942"}


def compile_specs(dtype: str = "bfloat16", target: str = "gfx942") -> list:
    """Every tuned head dim causal with V pre-loaded, the padded head dim 80, and non-causal with a
    full bias and mask (the ``narrow`` tiles)."""
    from ceiling.attention.op import ATTENTION
    from ceiling.attention.spec import shipped_problem
    from ceiling.op import resolve_config

    from ceiling.triangle.spec import SHIPPED_GPUS

    gpu = dict(zip(("gpu", "arch"), SHIPPED_GPUS[target]))  # the MI300X on gfx942, an MI355X on gfx950
    impl = ATTENTION.implementation("amd")
    pads = tuned_head_dims("amd", "gfx942")
    specs = []
    for pad in pads:
        cfg = resolve_config(shipped_problem(pad, dtype, causal=True, **gpu), impl, None)
        specs += kernel_specs(pad, cfg, dtype=dtype, use_tma=False, pre_load_v=True, prefix="amd_")
        if pad == 128:
            specs += kernel_specs(80, cfg, dtype=dtype, use_tma=False, pre_load_v=True, prefix="amd_")
        cfg = resolve_config(shipped_problem(pad, dtype, causal=False, biased=True, **gpu), impl, None)
        specs += kernel_specs(pad, cfg, dtype=dtype, causal=False, bias=True, mask=True, use_tma=False,
                              pre_load_v=True, prefix="amd_")
    return specs
