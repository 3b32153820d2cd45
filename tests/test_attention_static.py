"""The attention kernels cross-compiled for the real targets, on the CPU: Hopper (sm_90a) gets
wgmma (HGMMA) and no local-memory spills; CDNA3 (gfx942) gets MFMA and no scratch.

CI compiles the head-dim-128 kernels (the ones benchmarks and models use most) with and
without bias/mask; ``-m slow`` compiles every shipped config."""

from __future__ import annotations

import pytest

from ceiling.amd import attention_specs as amd
from ceiling.isa import compile_for, profile
from ceiling.nvidia import attention_specs as nvidia

# Head dim 256's dK/dV kernel on Hopper keeps two 64 x 256 float32 accumulators and both K and
# V as wgmma operands: it still spills a few registers with every tile we tried.
KNOWN_SPILLS = {"attn_dkdv_d256_causal_tma", "attn_dkdv_d256_bias_tma"}


def _ids(specs):
    return [s.name for s in specs]


NV = nvidia.compile_specs()
AMD = amd.compile_specs()
NV_CI = [s for s in NV if "_d128_" in s.name]
AMD_CI = [s for s in AMD if "_d128_causal" in s.name]


def _check_sm90(spec):
    p = profile(spec, "sm_90a")
    assert p.extra["hgmma"] > 0, f"{spec.name}: no HGMMA in the SASS"
    assert p.shared_bytes <= 227 * 1024, f"{spec.name}: {p.shared_bytes} B of shared memory"
    if spec.name not in KNOWN_SPILLS:
        assert p.spill_bytes == 0 and p.extra["ldl_stl"] == 0, f"{spec.name}: spills ({p.spill_bytes} B, {p.extra})"


def _check_gfx942(spec):
    p = profile(spec, "gfx942")
    assert p.tensor_core_instructions > 0, f"{spec.name}: no v_mfma in the AMDGCN"
    assert p.spill_bytes == 0 and p.extra["vgpr_spill"] == 0, f"{spec.name}: scratch ({p.spill_bytes} B, {p.extra})"
    assert p.shared_bytes <= 64 * 1024, f"{spec.name}: {p.shared_bytes} B of LDS"


@pytest.mark.parametrize("spec", NV_CI, ids=_ids(NV_CI))
def test_sm90a_hgmma_no_spills(spec):
    _check_sm90(spec)


@pytest.mark.parametrize("spec", AMD_CI, ids=_ids(AMD_CI))
def test_gfx942_mfma_no_scratch(spec):
    _check_gfx942(spec)


def test_tma_path_uses_tma():
    import re

    spec = next(s for s in NV_CI if s.name == "attn_fwd_d128_causal_tma")
    kernel = compile_for(spec, "sm_90a")
    assert re.search(r"cp\.async\.bulk\.tensor", kernel.asm["ptx"]), "no TMA loads in the PTX"


@pytest.mark.slow
@pytest.mark.parametrize("spec", [s for s in NV if s not in NV_CI], ids=_ids([s for s in NV if s not in NV_CI]))
def test_sm90a_all_shipped_configs(spec):
    _check_sm90(spec)


@pytest.mark.slow
@pytest.mark.parametrize("spec", [s for s in AMD if s not in AMD_CI], ids=_ids([s for s in AMD if s not in AMD_CI]))
def test_gfx942_all_shipped_configs(spec):
    _check_gfx942(spec)
