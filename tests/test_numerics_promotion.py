"""The FP8 promotion error table (modelled) and the FP8 template's use of it."""

from __future__ import annotations

import numpy as np
import pytest

from ceiling import InputError
from ceiling.numerics import promotion


@pytest.fixture(scope="module")
def table():
    return promotion.load()


def test_the_table_covers_every_interval_and_k_and_names_how_it_was_made(table):
    got = {(r["interval"], r["K"]) for r in table["rows"]}
    assert got == {(i, k) for i in ("never", *promotion.INTERVALS) for k in promotion.KS}
    assert max(promotion.KS) == 16384
    assert table["model"]["target"] == "h100" and table["model"]["provenance"]["file"] == "models/H100TC.m"
    assert "python -m ceiling.numerics.promotion" in table["how"]
    assert table["max_unpromoted_k"] == promotion.max_unpromoted_k(table["rows"])


def test_a_remeasured_prefix_reproduces_the_committed_rows(table):
    """Deterministic: the same seed's operands through the model give the committed numbers."""
    a, b = promotion.operands(max(promotion.KS), 0)
    rows = {(r["interval"], r["K"]): r["normwise"] for r in table["rows"]}
    for interval in (None, 128):
        got = promotion.accumulate(a, b, interval, "h100", (256, 512))
        for k, d in got.items():
            exact = a[:, :k] @ b[:k]
            err = float(np.linalg.norm(d.astype(np.float64) - exact) / np.linalg.norm(exact))
            assert err == rows[(interval or "never", k)]


def test_promotion_bounds_the_error_and_never_promoting_grows_with_k(table):
    err = {(r["interval"], r["K"]): r["normwise"] for r in table["rows"]}
    never = [err[("never", k)] for k in promotion.KS]
    assert never == sorted(never) and never[-1] > promotion.TOLERANCE
    assert max(err[(128, k)] for k in promotion.KS) < err[("never", 2048)] / 4
    assert table["max_unpromoted_k"] >= 128  # DeepSeek-V3's interval passes at every K measured


def test_the_tolerance_rule_picks_the_longest_safe_run():
    rows = [{"interval": "never", "K": 256, "normwise": 1e-4}, {"interval": "never", "K": 512, "normwise": 2e-3},
            {"interval": 256, "K": 512, "normwise": 5e-4}]
    assert promotion.max_unpromoted_k(rows) == 256
    assert promotion.max_unpromoted_k([{**rows[0], "normwise": 1.0}]) == 0


@pytest.fixture(scope="module")
def template():
    from ceiling.roofline.templates import export

    return export.build("gemm_fp8", "sm_90a", [])


POINT = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_stages": 4, "num_warps": 8,
         "PROMOTE_STEPS": 0, "STREAM_K": False, "EPILOGUE_SUBTILE": False, "SCALES": "tensor/tensor"}


def test_the_fp8_template_carries_the_modelled_error_per_promotion_setting(template, table):
    carried = template.numerics["promotion_error"]
    assert carried["max_unpromoted_k"] == table["max_unpromoted_k"]
    assert carried["errors"]["never"]["16384"] == next(r["normwise"] for r in table["rows"]
                                                        if r["interval"] == "never" and r["K"] == 16384)
    assert set(carried["errors"]) == {"never", *map(str, promotion.INTERVALS)}


def test_the_fp8_template_refuses_a_promotion_too_rare_for_its_k(template, table):
    limit = table["max_unpromoted_k"]
    assert any("promotion-accuracy" in v for v in template.violations(POINT, {"M": 4096, "N": 4096, "K": 2 * limit}))
    assert template.violations(POINT, {"M": 4096, "N": 4096, "K": limit}) == []
    every_128 = {**POINT, "PROMOTE_STEPS": 1}
    assert template.violations(every_128, {"M": 4096, "N": 4096, "K": 16384}) == []
    valid = template.valid_points({"M": 4096, "N": 4096, "K": 16384})
    assert valid and all(p["PROMOTE_STEPS"] > 0 for p in valid)
    assert any(p["PROMOTE_STEPS"] == 0 for p in template.valid_points({"M": 4096, "N": 4096, "K": 1024}))


def test_an_imported_point_is_held_to_it(tmp_path, template):
    from ceiling.roofline.templates import importing

    folder = tmp_path / "gemm_fp8" / "sm_90a"
    template.save(folder)
    with pytest.raises(InputError, match="promotion-accuracy"):
        importing.import_point(folder, POINT, {"M": 4096, "N": 4096, "K": 16384})


def test_cdna3_says_its_fp8_arithmetic_is_unpublished():
    from ceiling.roofline.templates import numerics

    entry, defaults, constraints = numerics.fp8_promotion("gfx942")
    assert entry["status"] == "unpublished" and "MI300MC.m" in entry["why"] and not constraints
