"""The triangle kernels compile for the real targets with tensor-core instructions and no spills.

sm_90a (Hopper) and gfx942 (CDNA3), cross-compiled on the CPU through
``ceiling.isa``, at the shipped configs for AlphaFold 3's widths (head dim 32;
c_z = c = 128), bf16. One representative per op runs in CI; every kernel of
both ops runs under ``-m slow``.
"""

from __future__ import annotations

import pytest

from ceiling.triton import triangle_attention_specs as attention_specs
from ceiling.triton import triangle_multiplication_specs as trimul_specs

SM90_SMEM = 227 * 1024
GFX942_LDS = 64 * 1024


def _sm90(spec):
    from ceiling.isa import profile

    p = profile(spec, "sm_90a")
    assert p.tensor_core_instructions > 0, f"{spec.name}: no HGMMA/HMMA"
    assert p.spill_bytes == 0 and p.extra["ldl_stl"] == 0, f"{spec.name}: spills {p.spill_bytes} B"
    assert 0 < p.shared_bytes <= SM90_SMEM and p.registers <= 255
    return p


def _gfx942(spec):
    from ceiling.isa import profile

    p = profile(spec, "gfx942")
    assert p.tensor_core_instructions > 0, f"{spec.name}: no v_mfma"
    assert p.spill_bytes == 0 and p.extra["vgpr_spill"] == 0, f"{spec.name}: scratch {p.spill_bytes} B"
    assert p.shared_bytes <= GFX942_LDS
    return p


def _by_name(specs, part):
    return [s for s in specs if f"_{part}_" in s.name][0]


def test_sm90a_attention_forward_and_dbias_use_wgmma():
    specs = attention_specs.compile_specs("bfloat16", "sm_90a")
    for part in ("fwd", "bwd_dbias"):
        p = _sm90(_by_name(specs, part))
        assert p.instruction_mix.get("HGMMA", 0) > 0, f"{part}: expected wgmma"


def test_sm90a_trimul_contraction_uses_wgmma():
    p = _sm90(_by_name(trimul_specs.compile_specs("bfloat16", target="sm_90a"), "contract"))
    assert p.instruction_mix.get("HGMMA", 0) > 0


def test_gfx942_attention_forward_uses_mfma():
    _gfx942(_by_name(attention_specs.compile_specs("bfloat16", "gfx942"), "fwd"))


@pytest.mark.slow
@pytest.mark.parametrize("spec", attention_specs.compile_specs("bfloat16", "sm_90a")
                         + trimul_specs.compile_specs("bfloat16", target="sm_90a"),
                         ids=lambda s: s.name)
def test_sm90a_every_kernel(spec):
    _sm90(spec)


@pytest.mark.slow
@pytest.mark.parametrize("spec", attention_specs.compile_specs("bfloat16", "gfx942")
                         + trimul_specs.compile_specs("bfloat16", target="gfx942"),
                         ids=lambda s: s.name)
def test_gfx942_every_kernel(spec):
    _gfx942(spec)


def _trimul_candidates():
    from ceiling.tuning import trimul as tune_trimul

    table = trimul_specs.shipped_config("sm_90a", "bfloat16").as_dict()
    for stage, options in tune_trimul.candidates().items():
        for option in options:
            if isinstance(option, dict):
                yield pytest.param(stage, {**table, stage: {**table[stage], **option}},
                                   id=f"{stage}-" + "-".join(f"{k}{v}" for k, v in option.items()))


@pytest.mark.slow
@pytest.mark.parametrize("stage, cfgs", list(_trimul_candidates()))
def test_sm90a_every_trimul_tuning_candidate(stage, cfgs):
    """The tuning sweep spends device time only on configs that compile without spills."""
    from ceiling.tuning.trimul import compile_spec_for

    _sm90(compile_spec_for(stage, cfgs))
