"""The Gluon attention kernels compiled for sm_90a on the CPU, under the device's Triton 3.6 and
under this environment's Triton: their SASS must be FlashAttention-3's design, and the check
must catch planted regressions of it.

Triton 3.6 is installed once into ``$CEILING_CACHE_DIR`` (``~/.cache/ceiling``) by
``ceiling.nvidia.gluon.pinned_triton`` (pip, no dependencies) and run in a subprocess; when it
cannot be installed the test fails with the command to run, it does not skip. The subprocess's
report is cached there per hash of the sources it compiles, so parallel workers and re-runs
compile once.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ceiling import tables
from ceiling.nvidia.gluon import SUPPORTED_TRITON, pinned_triton, sass_facts, static_check, triton_release

REPO = Path(__file__).resolve().parents[1]
SOURCES = sorted((REPO / "kernels" / "nvidia" / "gluon").glob("*.py")) + [
    REPO / "kernels" / "constants.py", tables.path("nvidia", "sm_90a", "attention_gluon"),
    Path(__file__).with_name("gluon_static_cases.py")]
SHIPPED = static_check.shipped_names()


def _pinned_report(version: str) -> dict:
    from filelock import FileLock

    digest = hashlib.sha256(b"".join(p.read_bytes() for p in SOURCES)).hexdigest()[:16]
    cached = pinned_triton.cache_dir() / f"gluon-static-{version}-{digest}.json"
    cached.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cached) + ".lock"):
        if not cached.exists():
            report = pinned_triton.run_json(version, ["-m", "tests.gluon_static_cases"])
            cached.write_text(json.dumps(report))
    return json.loads(cached.read_text())


@pytest.fixture(scope="module")
def device_triton() -> dict:
    return _pinned_report(pinned_triton.DEVICE_TRITON)


def test_the_check_ran_under_the_device_triton(device_triton):
    assert device_triton["triton"] == pinned_triton.DEVICE_TRITON
    assert [r["name"] for r in device_triton["shipped"]] == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_config_is_the_design_under_triton_36(device_triton, name):
    result = next(r for r in device_triton["shipped"] if r["name"] == name)
    assert result["violations"] == [], result["summary"]
    parts = result["facts"]["partitions"]
    consumers = [p for p in parts if p["role"] == "mma"]
    producer = next(p for p in parts if p["role"] == "load")
    # Both consumer warpgroups issue the same products: the same HGMMA shapes and counts.
    assert consumers[0]["hgmma_shapes"] == consumers[1]["hgmma_shapes"]
    assert producer["hgmma"] == 0 and producer["utmaldg"] >= 2


def test_planted_regressions_fail_the_check(device_triton):
    planted = {r["name"]: r["violations"] for r in device_triton["planted"]}
    assert planted["designed"] == []  # the same shape done right passes, so the failures below are the plants
    assert any("HGMMA in 1 partitions" in v for v in planted["one_consumer"])
    assert any("expected 1 producer" in v for v in planted["no_producer"])
    assert any("pointer loads" in v for v in planted["no_producer"])
    assert any("expected >= 232" in v for v in planted["no_reallocation"])


# Under this Triton, CI compiles the configs at the register limit (the head-dim-128 backward, with
# its known spill bound under 3.9, and the head-dim-256 forward); the others are compiled under 3.6
# above in CI and under this Triton with -m slow.
UNDER_THIS_TRITON_IN_CI = ("gluon_attn_bwd_d128_causal", "gluon_attn_fwd_d256_causal")


@pytest.mark.skipif(triton_release(__import__("triton").__version__) not in SUPPORTED_TRITON,
                    reason="this environment's Triton is not one the Gluon kernels support; the 3.6 check above ran")
@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in UNDER_THIS_TRITON_IN_CI else pytest.mark.slow)
                                  for n in SHIPPED])
def test_compiles_to_the_design_under_this_triton(name):
    s = next(s for s in static_check.shipped() if s.name == name)
    result = static_check.check(s)
    assert result["violations"] == [], result["summary"]


def test_attribution_of_a_sass_listing():
    """A hand-written listing in the warp-specialize shape: the split sends the default warps to
    0x40; the dispatch jumps through a table to 0x70 (consumer) and 0xa0 (producer), which return
    to the loop at 0x20 (shared, so in neither)."""
    listing = "\n".join(f"        /*{a:04x}*/ {op} ;" for a, op in [
        (0x00, "S2R R0, SR_TID.X"), (0x10, "@!P0 BRA 0x40"),
        (0x20, "USETMAXREG.DEALLOC.CTAPOOL 0x78"), (0x30, "BRX R2 -0x40"),
        (0x40, "USETMAXREG.DEALLOC.CTAPOOL 0xf0"), (0x50, "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24"),
        (0x60, "EXIT"),
        (0x70, "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xf0"), (0x80, "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24"),
        (0x90, "BRA 0x20"),
        (0xa0, "USETMAXREG.DEALLOC.CTAPOOL 0x18"), (0xb0, "UTMALDG.3D [UR8], [UR6]"), (0xc0, "BRA 0x20"),
    ])
    parts = sass_facts.partitions(listing, [0x70, 0xa0])
    assert [(p.kind, p.entry, p.role, p.budget) for p in parts] == [
        ("default", 0x40, "mma", 240), ("worker", 0x70, "mma", 240), ("worker", 0xa0, "load", 24)]
    assert parts[0].max_register == 24 + 64  # the 64 x 128 float32 accumulator spans R24..R87
