"""Templates for every kernel family and target (from kernels/spaces): the export matrix, a sample of
valid points checked by each target's own rules (compiled for sm_90a and gfx942, the TPU config
rules and one Mosaic export, the NKI emulator for trn2), searches over the sectioned attention
template (Kernel Tuner's simulation mode, Optuna), and a found point imported into a vendor table
that the kernels then select."""

from __future__ import annotations

import json
import random

import pytest

from kernels import spaces
from kernels.errors import InputError
from roofline.machine import published
from roofline.templates import adapters, export, families, importing
from roofline.templates.schema import Template
from tests.synthetic_records import ATTENTION_SHAPE, attention_records, attention_seconds

MATRIX = [(f, t) for f in export.families() for t in export.targets(f)]


@pytest.fixture(scope="module")
def bare():
    """Every template as shipped: no records, the analytic model."""
    return {(f, t): export.build(f, t, []) for f, t in MATRIX}


def test_a_template_per_family_and_target(bare):
    from kernels.backends import MISSING

    portable = {"gemm", "attention", "triangle_attention", "triangle_multiplication"}
    assert set(export.families()) == portable | {"gemm_fp8", "attention_gluon"}
    for family in portable:
        assert len(export.targets(family)) >= 4, family
        assert {"sm_90a", "gfx942", "tpu-v5e"} <= set(export.targets(family)), family
    assert export.targets("attention_gluon") == ["sm_90a"]  # Hopper's Gluon kernels
    assert export.targets("gemm_fp8") == ["sm_90a", "gfx942"]  # no FP8 kernel on TPU or Trainium, and why:
    assert ("scaled_gemm", "tpu") in MISSING and ("scaled_gemm", "trainium") in MISSING
    for (family, target), t in bare.items():
        assert t.parameters and t.best_points, (family, target)
        space = spaces.get(family, target)
        for b in t.best_points:
            # every shipped config is one the kernel takes; one shipped for the template's problems
            # (or for any) is a valid point of the template
            space.check_constraints(t.nest(b.config), {**t.context(b.shape), **(b.shape or {})})
            if b.shape is None or any(all(w.get(k) == v for k, v in b.shape.items()) for w in t.workloads):
                full = b.shape if b.shape and set(t.axes) <= set(b.shape) else None
                assert t.is_valid(b.config, full), (family, target, b, t.violations(b.config, full))
        counts = [e["valid_points"] for e in t.cost_model.predictions]
        assert counts and all(n > 0 for n in counts), (family, target)


def _sample(template: Template, shape: dict | None, k: int, seed: int) -> list[dict]:
    """``k`` valid points drawn per section (a whole config: each section's draw merged)."""
    rng = random.Random(seed)
    units = template.sections or [None]
    draws = [rng.sample(template.valid_points(shape, u), k) for u in units]
    top = template.valid_points(shape, "") if template.sections else [{}]
    return [template.nest({**rng.choice(top), **{n: v for d in per for n, v in d.items()}}) for per in zip(*draws)]


# The Gluon attention's point compiles in -m slow only: its shipped configs are compiled and held to
# the design in CI by tests/test_attention_gluon_static.py.
GPU = [(f, t) if f != "attention_gluon" else pytest.param(f, t, marks=pytest.mark.slow)
       for f, t in MATRIX if t in ("sm_90a", "gfx942")]


@pytest.mark.parametrize("family,target", GPU, ids=[f"{f}-{t}" for f, t in MATRIX if t in ("sm_90a", "gfx942")])
def test_a_valid_point_compiles_for_its_gpu_target(family, target, bare):
    """One random valid point per family and GPU target compiles with tensor-core instructions: for
    a sectioned family, one random kernel of it (the others at the table's entry), to keep CI short."""
    t = bare[(family, target)]
    shape = t.workloads[0]
    rng = random.Random()
    section = rng.choice(t.sections) if t.sections else None
    point = rng.choice(t.valid_points(shape, section))
    facts = families.check_point(family, target, t.nest(point), shape, only=section)
    assert facts and (len(facts) == 1 or section is None), (point, facts)
    assert all(f["tensor_core_instructions"] > 0 for f in facts), (point, facts)


@pytest.mark.parametrize("target", ["tpu-v5e", "tpu-v5p", "tpu-v6e"])
def test_tpu_valid_points_pass_the_rules(target, bare):
    for family in ("gemm", "attention", "triangle_attention", "triangle_multiplication"):
        t = bare[(family, target)]
        for shape in t.workloads[:2]:
            for config in _sample(t, shape, 5, seed=random.randrange(10_000)):
                families.check_point(family, target, config, shape)  # the kernels' rules raise on a break


def test_one_tpu_valid_point_lowers_through_mosaic(bare):
    from kernels.tpu import gemm as tpu_gemm

    t = bare[("gemm", "tpu-v5e")]
    (config,) = _sample(t, {"M": 512, "N": 512, "K": 512}, 1, seed=random.randrange(10_000))
    report = tpu_gemm.export_for_tpu("tpu-v5e", "bfloat16", config, m=2 * config["bm"], n=2 * config["bn"],
                                     k=2 * config["bk"])
    assert not report.get("export_error"), report


@pytest.mark.parametrize("family", ["gemm", "attention"])
def test_trn2_valid_points_pass_the_emulator_rules(family, bare):
    t = bare[(family, "trn2")]
    shape = {"M": 1024, "N": 1024, "K": 1024} if family == "gemm" else {"seq": 512, "head_dim": 128}
    for config in _sample(t, shape, 3, seed=random.randrange(10_000)):
        facts = families.check_point(family, "trn2", config, shape)  # a HardwareRuleError is a failure
        assert all(f["sbuf_peak"] > 0 for f in facts)


# ------------------------------------------------------------------------------ searches (attention)


@pytest.fixture(scope="module")
def attention(tmp_path_factory):
    """The sm_90a attention template exported from synthetic timings of its fwd kernel at one shape
    (every valid fwd point), and the Kernel Tuner cache written beside it."""
    out = tmp_path_factory.mktemp("templates")
    records = attention_records(ATTENTION_SHAPE, "fwd", noise=0.02, seed=random.randrange(10_000))
    (folder,) = export.export(out, records, ["attention"], ["sm_90a"])
    template = Template.load(folder)
    ranked = sorted(records, key=lambda r: r.median)
    return template, folder, records, ranked


def _rank(template, ranked, point):
    for i, r in enumerate(ranked):
        if all(template.flat(r.config).get(k) == v for k, v in point.items()):
            return i
    raise AssertionError(f"{point} was never measured")


def test_attention_export_writes_a_kernel_tuner_cache_per_kernel(attention):
    template, folder, records, ranked = attention
    cache = folder / "kernel_tuner" / "4x32x4096x128.fwd.json"
    doc = json.loads(cache.read_text())
    assert doc["tune_params_keys"] == [adapters.kt_name(n) for n in template.section_names("fwd")]
    assert len(doc["cache"]) == len(records)
    fastest = [b for b in template.best_points if b.source.startswith("records")]
    assert fastest and fastest[0].section == "fwd" and fastest[0].measured.timing == "synthetic"
    assert template.sections == ["fwd", "dkdv", "dq"] and "fwd.block_m" in template.names


def test_kernel_tuner_simulated_search_over_the_attention_template(attention):
    template, folder, records, ranked = attention
    space = adapters.kernel_tuner_space(template, ATTENTION_SHAPE, "fwd")
    assert all("." not in name for name in space.tune_params)
    assert all("smem_per_block" not in r for r in space.restrictions)
    cache = folder / "kernel_tuner" / "4x32x4096x128.fwd.json"
    best, ms = adapters.kernel_tuner_search(template, ATTENTION_SHAPE, cache, strategy="diff_evo", max_fevals=80,
                                            seed=random.randrange(1000), section="fwd")
    assert template.is_valid(best, ATTENTION_SHAPE, "fwd")
    i = _rank(template, ranked, best)
    assert ranked[i].median <= 1.10 * ranked[0].median and ms == pytest.approx(1e3 * ranked[i].median)


def test_optuna_search_over_the_whole_attention_template():
    """All three kernels at once (15 parameters): the objective is the sum of their times, so the
    optimum is the sum of each kernel's best; the search gets within 15% of it."""
    template = export.build("attention", "sm_90a", [])
    machine = published("h200")
    best = sum(min(attention_seconds(template, ATTENTION_SHAPE, s, p, machine)
                   for p in template.valid_points(ATTENTION_SHAPE, s)) for s in template.sections)

    def objective(config: dict) -> float:
        flat = template.flat(config)
        return sum(attention_seconds(template, ATTENTION_SHAPE, s,
                                     {n: flat[n] for n in template.section_names(s)}, machine)
                   for s in template.sections)

    study = adapters.optuna_search(template, ATTENTION_SHAPE, objective, n_trials=120, seed=random.randrange(1000))
    assert template.is_valid(study.best_params, ATTENTION_SHAPE)
    assert study.best_value <= 1.15 * best
    assert set(adapters.optuna_space(template)) == set(template.names)
    config = adapters.validate_config(template, study.best_params, ATTENTION_SHAPE)
    assert set(config) == {"fwd", "dkdv", "dq"}
    spaces.check("attention", "sm_90a", config, {"head_dim": 128, "dtype_bytes": 2}, partial=True)


def test_triton_configs_of_one_attention_kernel(attention):
    template = attention[0]
    configs = adapters.triton_configs(template, ATTENTION_SHAPE, section="dq")
    assert len(configs) == len(template.valid_points(ATTENTION_SHAPE, "dq"))
    first = configs[0]
    assert set(first.kwargs) == {"block_m", "block_n"} and first.num_warps in (4, 8)
    assert template.is_valid(adapters.config_of(first, "dq"), ATTENTION_SHAPE, "dq")
    with pytest.raises(ValueError, match="section"):
        adapters.triton_configs(template, ATTENTION_SHAPE)


# --------------------------------------------------------------------------------------------- import


def _exported(tmp_path, family, target):
    (folder,) = export.export(tmp_path / "templates", [], [family], [target])
    return folder


def test_import_a_gemm_point_into_the_hopper_table(tmp_path):
    from kernels.nvidia import gemm as G

    folder = _exported(tmp_path, "gemm", "sm_90a")
    table = tmp_path / "gemm.json"
    table.write_text(G.CONFIG_FILE.read_text())
    point = {"BLOCK_M": 128.0, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 4, "num_warps": 8,
             "EPILOGUE_SUBTILE": False, "WARP_SPECIALIZE": False, "SPLIT_K": 1, "STREAM_K": False}
    shape = {"M": 3072, "N": 5120, "K": 2048}
    result = importing.import_point(folder, point, shape, "optuna, 60 trials", "NVIDIA H200", table)
    result.write()
    entry = [e for e in json.loads(table.read_text())["devices"]["H200"] if e["shape"] == [3072, 5120, 2048]]
    assert len(entry) == 1 and entry[0]["config"]["BLOCK_M"] == 128 and "optuna, 60 trials" in entry[0]["provenance"]
    G._config_table.cache_clear()
    G.select_config.cache_clear()
    old = G.CONFIG_FILE
    try:
        G.CONFIG_FILE = table
        cfg, where = G.select_config(3072, 5120, 2048, "bfloat16", "NVIDIA H200")
        assert where == "tuned:H200" and cfg.as_dict() == point | {"BLOCK_M": 128}
    finally:
        G.CONFIG_FILE = old
        G._config_table.cache_clear()
        G.select_config.cache_clear()
    with pytest.raises(InputError, match="shared-memory"):
        importing.import_point(folder, {**point, "BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "num_stages": 5},
                               shape, table=table)


def test_import_an_attention_point_and_the_kernels_select_it(tmp_path, monkeypatch):
    from kernels.nvidia import attention as A

    folder = _exported(tmp_path, "attention", "sm_90a")
    table = tmp_path / "attention.json"
    table.write_text(A.CONFIG_FILE.read_text())
    template = Template.load(folder)
    fwd = {"fwd.block_m": 64, "fwd.block_n": 64, "fwd.num_warps": 4, "fwd.num_stages": 3, "fwd.pre_load_v": True,
           "fwd.exp2_split": True}
    result = importing.import_point(folder, fwd, {"head_dim": 128}, "synthetic", table=table, section="fwd")
    assert result.config == {"fwd": {k.split(".")[1]: v for k, v in fwd.items()}}
    result.write()
    monkeypatch.setattr(A, "CONFIG_FILE", table)
    A._tuned.cache_clear()
    try:
        cfg = A.select_config(128, "sm90")
        assert cfg["fwd"] == {k.split(".")[1]: v for k, v in fwd.items()}
        assert cfg["dkdv"] == A.select_config(128, "sm90", None)["dkdv"]
        assert json.loads(table.read_text())["_provenance"]["sm90/128"].endswith("synthetic")
    finally:
        A._tuned.cache_clear()
    assert template.is_valid(fwd, {"head_dim": 128, **ATTENTION_SHAPE}, "fwd")


def test_import_an_fp8_point_into_each_fp8_table(tmp_path, monkeypatch):
    """A found FP8 point is filed for its shape and scaling: the Hopper kernel selects it for that
    problem; on CDNA3 it becomes the shape class's entry of that device."""
    from kernels.amd import gemm_fp8 as amd
    from kernels.nvidia import gemm_fp8 as nvidia

    point = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 5, "num_warps": 4,
             "PROMOTE_STEPS": 2, "STREAM_K": True, "EPILOGUE_SUBTILE": False, "SCALES": "1x128/128x128"}
    shape = {"M": 48, "N": 6144, "K": 4096}
    table = tmp_path / "gemm_fp8.json"
    table.write_text(nvidia.CONFIG_FILE.read_text())
    importing.import_point(_exported(tmp_path, "gemm_fp8", "sm_90a"), point, shape, "test", "NVIDIA H200",
                           table).write()
    monkeypatch.setattr(nvidia, "CONFIG_FILE", table)
    nvidia._config_table.cache_clear()
    nvidia.select_config.cache_clear()
    try:
        cfg, where = nvidia.select_config(48, 6144, 4096, "float8_e4m3fn", "1x128", "128x128", "NVIDIA H200")
        assert where == "tuned:H200" and cfg.as_dict() == {k: v for k, v in point.items() if k != "SCALES"}
        assert nvidia.select_config(48, 6144, 4096, "float8_e4m3fn", "tensor", "tensor", "NVIDIA H200")[1] == "heuristic"
    finally:
        nvidia._config_table.cache_clear()
        nvidia.select_config.cache_clear()
    with pytest.raises(InputError, match="block-scale-promotion"):
        importing.import_point(_exported(tmp_path, "gemm_fp8", "sm_90a"), {**point, "PROMOTE_STEPS": 0}, shape,
                               table=table)
    amd_point = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 4, "num_stages": 2, "num_warps": 4,
                 "matrix_instr_nonkdim": 16, "waves_per_eu": 2, "kpack": 1, "PROMOTE_STEPS": 1,
                 "SCALES": "1x128/128x128"}
    copy = tmp_path / "amd_gemm_fp8.json"
    copy.write_text(amd.CONFIG_PATH.read_text())
    result = importing.import_point(_exported(tmp_path, "gemm_fp8", "gfx942"), amd_point, shape, "test", "AMD MI325X",
                                    copy)
    entry = result.table["devices"]["MI325X"]
    assert entry["configs"]["skinny"] == amd_point and set(entry["configs"]) == {"skinny", "blockwise", "large"}


@pytest.mark.parametrize("family,target,point,shape", [
    ("gemm", "tpu-v6e", {"bm": 512, "bn": 1024, "bk": 512}, {"M": 2048, "N": 2048, "K": 2048}),
    ("attention", "trn2", {"fwd_block_k": 256, "bwd_block_k": 256, "q_in_flight": 2}, {"head_dim": 128}),
    ("triangle_multiplication", "sm_90a", None, None),
    ("attention_gluon", "sm_90a", {"fwd.block_n": 64, "fwd.num_stages": 3, "fwd.exp2_split": True,
                                   "fwd.pingpong": False, "bwd.block_m": 64, "bwd.num_stages": 1}, {"head_dim": 128}),
])
def test_import_writes_every_backends_table(tmp_path, family, target, point, shape):
    folder = _exported(tmp_path, family, target)
    template = Template.load(folder)
    if point is None:  # the shipped H200 entry with one kernel changed
        point = {k: v for k, v in template.best_points[0].config.items() if k in template.names}
        point["ln_out_gate.BLOCK_N"] = 64
    copy = tmp_path / "table.json"
    copy.write_text(families.table_path(family, target).read_text())
    result = importing.import_point(folder, point, shape, "test", table=copy)
    result.write()
    assert "test" in copy.read_text() and json.loads(copy.read_text())


def test_export_and_import_from_the_command_line(tmp_path):
    from typer.testing import CliRunner

    from roofline.cli import app

    runner = CliRunner()
    out = tmp_path / "templates"
    done = runner.invoke(app, ["export-templates", "--op", "triangle_multiplication", "--target", "tpu-v5e",
                               "--no-embedded", "--out", str(out)])
    assert done.exit_code == 0, done.output
    folder = out / "triangle_multiplication" / "tpu-v5e"
    assert (folder / "template.json").exists() and "2 parameters" in done.output
    copy = tmp_path / "trimul.json"
    copy.write_text(families.table_path("triangle_multiplication", "tpu-v5e").read_text())
    args = ["import-point", str(folder), "--config", '{"block_rows": 2048, "block_rows_bwd": 512}',
            "--shape", "1x768x128x128", "--table", str(copy), "--provenance", "made up"]
    dry = runner.invoke(app, args)
    assert dry.exit_code == 0 and "would write" in dry.output and "made up" not in copy.read_text()
    applied = runner.invoke(app, [*args, "--apply"])
    assert applied.exit_code == 0, applied.output
    assert json.loads(copy.read_text())["tpu-v5e"]["bfloat16"]["block_rows"] == 2048
    bad = runner.invoke(app, ["import-point", str(folder), "--config", '{"block_rows": 96}', "--table", str(copy)])
    assert bad.exit_code != 0 and "block_rows" in bad.output
