"""Search templates: export, schema, constraints, and the adapters (Triton, Kernel Tuner, Optuna, import)."""

from __future__ import annotations

import json
import random

import pytest

from ceiling.errors import InputError
from ceiling.roofline import model
from ceiling.roofline.templates import adapters, export
from ceiling.roofline.templates.schema import SCHEMA_VERSION, Template
from tests.synthetic_records import SHAPES, gemm_records

SHAPE = {"M": 4096, "N": 4096, "K": 4096}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The sm_90a GEMM template exported from records of other shapes (synthetic law), and every
    valid point of a new shape measured, as a Kernel Tuner cache for the searches to replay."""
    out = tmp_path_factory.mktemp("templates")
    seed = random.randrange(10_000)
    others = [s for s in SHAPES if s != SHAPE]
    train = gemm_records(shapes=others, per_shape=60, noise=0.02, seed=seed)
    perf, _ = model.fit_and_evaluate(train)
    (folder,) = export.export(out, train, ["gemm"], ["sm_90a"], perf)
    template = Template.load(folder)
    records = gemm_records(shapes=[SHAPE], noise=0.02, seed=seed + 1)
    cache = adapters.kernel_tuner_cache(template, SHAPE, records, out / "new-shape.json")
    ranked = sorted(records, key=lambda r: r.median)
    return template, folder, train, records, ranked, cache


@pytest.fixture(scope="module")
def bare():
    """The templates as shipped: no records, analytic model."""
    return {target: export.build("gemm", target, []) for target in export.targets("gemm")}


def _among_the_best(ranked, config, within=0.10):
    """The records rate ``config`` within 10% of the fastest measured point."""
    return ranked[_rank(ranked, config)].median <= (1 + within) * ranked[0].median


def _rank(ranked, config):
    for i, r in enumerate(ranked):
        if all(r.config[k] == v for k, v in config.items()):
            return i
    raise AssertionError(f"{config} was never measured")


def test_export_writes_template_records_and_kernel_tuner_cache(exported):
    template, folder, records, _, _, _ = exported
    doc = json.loads((folder / "template.json").read_text())
    assert doc["schema_version"] == SCHEMA_VERSION
    assert {p["name"]: p["values"] for p in doc["parameters"]}["BLOCK_M"] == [64, 128, 256]
    lines = (folder / "records.jsonl").read_text().splitlines()
    assert len(lines) == len(records) and json.loads(lines[0])["op"] == "gemm"
    caches = sorted((folder / "kernel_tuner").glob("*.json"))
    assert len(caches) == len(SHAPES) - 1
    cache = json.loads(caches[0].read_text())
    assert cache["tune_params_keys"] == template.names and len(cache["cache"]) == 60
    assert template.cost_model.mode == "fitted" and template.cost_model.accuracy is None
    # priors sum to one, and the measured fastest config is a best point with its measurement
    for p in template.parameters:
        assert sum(p.prior.values()) == pytest.approx(1.0, abs=1e-3)
    measured = [b for b in template.best_points if b.measured is not None]
    assert measured and measured[0].measured.provenance["device"] == "NVIDIA H200"


def test_shipped_configs_are_valid_best_points(bare):
    for target, template in bare.items():
        shipped = [b for b in template.best_points if b.source.startswith("shipped")]
        for b in shipped:
            assert template.violations(b.config, b.shape) == [] or set(b.config) != set(template.names), (target, b)
    assert any(b.shape == {"M": 8192, "N": 8192, "K": 8192} for b in bare["sm_90a"].best_points)
    assert all(t.cost_model.mode == "analytic" for t in bare.values())


def test_constraints_reject_what_the_hardware_cannot_hold(bare):
    nvidia = bare["sm_90a"]
    big = {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8, "num_stages": 5, "num_warps": 8,
           "EPILOGUE_SUBTILE": False, "WARP_SPECIALIZE": False, "SPLIT_K": 1, "STREAM_K": False}
    why = nvidia.violations(big)
    assert any("shared-memory" in w for w in why) and any("accumulator-registers" in w for w in why)
    assert nvidia.violations({**big, "BLOCK_M": 96})[0].startswith("BLOCK_M=96 is outside")
    # shape constraints decide only once the shape is known
    split = {**big, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_stages": 3, "SPLIT_K": 4}
    assert nvidia.violations(split) == [] and nvidia.violations(split, {"M": 64, "N": 64, "K": 4096}) == []
    assert any("split-k-depth" in w for w in nvidia.violations(split, {"M": 64, "N": 64, "K": 256}))
    amd = bare["gfx942"]
    ok = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 2, "num_warps": 4,
          "matrix_instr_nonkdim": 16, "waves_per_eu": 2, "kpack": 2}
    assert amd.violations(ok) == []
    assert any("lds" in w for w in amd.violations({**ok, "BLOCK_K": 128, "BLOCK_M": 256, "BLOCK_N": 256}))
    assert 0 < len(amd.valid_points()) < len(amd.points())


def test_kernel_tuner_simulation_search_finds_a_top_point(exported):
    template, folder, _, records, ranked, cache = exported
    space = adapters.kernel_tuner_space(template, SHAPE)
    assert all("smem_per_block" not in r and "dtype_bytes" not in r for r in space.restrictions)
    best, ms = adapters.kernel_tuner_search(template, SHAPE, cache,
                                            strategy="diff_evo", max_fevals=100, seed=random.randrange(1000))
    assert template.is_valid(best, SHAPE)
    assert _among_the_best(ranked, best)
    assert ms == pytest.approx(1e3 * ranked[_rank(ranked, best)].median)


def test_optuna_search_from_the_template_finds_a_top_point(exported):
    template, _, _, records, ranked, _ = exported
    times = {json.dumps(r.config, sort_keys=True): r.median for r in records}
    objective = lambda c: times[json.dumps(c, sort_keys=True)]  # noqa: E731
    study = adapters.optuna_search(template, SHAPE, objective, n_trials=60, seed=random.randrange(1000))
    assert template.is_valid(study.best_params, SHAPE)
    assert _among_the_best(ranked, study.best_params)
    assert set(adapters.optuna_space(template)) == set(template.names)
    # without the template's warm start the search still returns valid points only
    cold = adapters.optuna_search(template, SHAPE, objective, n_trials=30, seed=random.randrange(1000), warm_start=False)
    assert all(template.is_valid(t.params, SHAPE) for t in cold.trials if t.value is not None)


def test_triton_configs_carry_launch_options_and_prune(exported):
    template = exported[0]
    configs = adapters.triton_configs(template, SHAPE)
    assert len(configs) == len(template.valid_points(SHAPE))
    first = configs[0]
    assert "num_warps" not in first.kwargs and first.num_warps in (4, 8)
    assert template.is_valid(adapters.config_of(first), SHAPE)
    # the model's pick comes first
    (entry,) = [e for e in template.cost_model.predictions if e["shape"] == SHAPE]
    assert adapters.config_of(first) == entry["top"][0]["config"]
    import triton

    bad = triton.Config({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8, "EPILOGUE_SUBTILE": False,
                         "WARP_SPECIALIZE": False, "SPLIT_K": 1}, num_warps=8, num_stages=5)
    kept = adapters.early_config_prune(template)([first, bad], {"M": 4096, "N": 4096, "K": 4096})
    assert kept == [first]


def test_imported_config_is_validated_and_runs_in_the_kernel(exported):
    torch = pytest.importorskip("torch")
    template = exported[0]
    with pytest.raises(InputError, match="config") as err:
        adapters.validate_config(template, {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8,
                                            "num_stages": 5, "num_warps": 8, "EPILOGUE_SUBTILE": False,
                                            "WARP_SPECIALIZE": False, "SPLIT_K": 1})
    assert "shared-memory" in str(err.value)
    # an optimizer's pick (floats from JSON) becomes the kernel's config and runs (Triton interpreter on the CPU)
    chosen = {"BLOCK_M": 64.0, "BLOCK_N": 64.0, "BLOCK_K": 32.0, "GROUP_M": 4.0, "num_stages": 2.0, "num_warps": 4.0,
              "EPILOGUE_SUBTILE": False, "WARP_SPECIALIZE": False, "SPLIT_K": 1.0}
    config = adapters.validate_config(template, chosen, {"M": 70, "N": 50, "K": 40})
    assert config["SPLIT_K"] == 1 and isinstance(config["BLOCK_M"], int)
    assert set(adapters.validate_config(template, {k: v for k, v in chosen.items() if k != "GROUP_M"})) == set(config)
    from ceiling.gemm import gemm

    a = torch.randn(70, 40, dtype=torch.bfloat16)
    b = torch.randn(40, 50, dtype=torch.bfloat16)
    out = gemm(a, b, backend="nvidia", config=config)
    ref = a.double() @ b.double()
    assert out.shape == (70, 50) and torch.isfinite(out).all()
    err_ours = (out.double() - ref).abs().max().item()
    err_torch = ((a @ b).double() - ref).abs().max().item()
    assert err_ours <= 2 * err_torch + 1e-2


def test_export_cites_only_the_timings_the_model_is_fit_by(tmp_path):
    """A shape timed only around eager launches (host overhead inside the number) is never cited as a
    measured best point, nor replayed from a cache; the shipped point says why it has no measurement."""
    from ceiling.roofline import selection

    skinny = {"M": 16, "N": 4096, "K": 4096}
    seed = random.randrange(10_000)
    clean = gemm_records(shapes=SHAPES[:3], per_shape=20, noise=0.02, seed=seed)
    # host-polluted: event-timed eager launches of a kernel far shorter than the rule's threshold
    polluted = [r.model_copy(update={"method": "triton.testing.do_bench"})
                for r in gemm_records(shapes=[skinny], per_shape=20, noise=0.02, seed=seed + 1)]
    shipped = [b.config for b in export.build("gemm", "sm_90a", []).best_points if b.shape == skinny]
    polluted += [polluted[0].model_copy(update={"config": config}) for config in shipped]  # the shipped point too
    assert shipped and all(r.median < selection.EVENT_MIN_SECONDS for r in polluted)
    (folder,) = export.export(tmp_path, clean + polluted, ["gemm"], ["sm_90a"])
    t = Template.load(folder)
    at_skinny = [b for b in t.best_points if b.shape == skinny]
    assert at_skinny and all(b.measured is None and b.unmeasured == "host-overhead" for b in at_skinny)
    assert not any(b.source.startswith("records") for b in at_skinny)
    measured = [b for b in t.best_points if b.measured is not None]
    assert measured and all(b.measured.timing == "synthetic" and b.measured.method == "synthetic" for b in measured)
    assert t.measurements["left_out"] == {"host-overhead": len(polluted)}
    assert t.measurements["cited"] == len(clean) and t.measurements["timing"] == {"synthetic": len(clean)}
    assert not (folder / "kernel_tuner" / "16x4096x4096.json").exists()
    assert len((folder / "records.jsonl").read_text().splitlines()) == len(clean) + len(polluted)  # the data stays


def test_fp8_template_carries_promotion_scales_and_stream_k():
    """The FP8 GEMM's space (family gemm_fp8): its knobs are parameters, the shipped FP8 configs are
    valid points with their scaling, and a block-scaled point that never promotes is rejected."""
    for target in export.targets("gemm_fp8"):
        template = export.build("gemm_fp8", target, [])
        assert {"PROMOTE_STEPS", "SCALES", "BLOCK_K", "num_stages"} <= set(template.names)
        shipped = [b for b in template.best_points if b.source.startswith("shipped")]
        assert shipped and all(template.violations(b.config, b.shape) == [] for b in shipped)
        assert {b.config["SCALES"] for b in shipped} >= {"tensor/tensor", "1x128/128x128"}
        point = dict(shipped[0].config, SCALES="1x128/128x128", PROMOTE_STEPS=0)
        assert any("block-scale-promotion" in w for w in template.violations(point))
    assert "STREAM_K" in export.build("gemm_fp8", "sm_90a", []).names
