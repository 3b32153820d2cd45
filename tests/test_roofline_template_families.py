"""Templates for every kernel family and target (from kernels/spaces): the export matrix, a sample of
valid points checked by each target's own rules (compiled for sm_90a and gfx942, the TPU config
rules and one Mosaic export, the NKI emulator for trn2), searches over the sectioned attention
template (Kernel Tuner's simulation mode, Optuna), and a found point imported into a vendor table
that the kernels then select."""

from __future__ import annotations

import json
import random

import pytest

from ceiling import spaces
from ceiling.errors import InputError
from ceiling.roofline.machine import published
from ceiling.roofline.templates import adapters, export, families, importing
from ceiling.roofline.templates.schema import Template
from tests.synthetic_records import ATTENTION_SHAPE, attention_records, attention_seconds

MATRIX = [(f, t) for f in export.families() for t in export.targets(f)]


@pytest.fixture(scope="module")
def bare():
    """Every template as shipped: no records, the analytic model."""
    return {(f, t): export.build(f, t, []) for f, t in MATRIX}


def test_a_template_per_family_and_target(bare):
    from ceiling.op import get

    portable = {"gemm", "attention", "triangle_attention", "triangle_multiplication"}
    assert set(export.families()) == portable | {"gemm_fp8", "attention_gluon"}
    for family in portable:
        assert len(export.targets(family)) >= 4, family
        assert {"sm_90a", "gfx942", "tpu-v5e"} <= set(export.targets(family)), family
    assert export.targets("attention_gluon") == ["sm_90a"]  # Hopper's Gluon kernels
    # no FP8 kernel on TPU or Trainium, and why:
    assert export.targets("gemm_fp8") == ["sm_90a", "sm_100a", "sm_103a", "gfx942", "gfx950"]
    assert {"tpu", "trainium"} <= set(get("scaled_gemm").missing)
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
    from ceiling.tpu import gemm_export

    t = bare[("gemm", "tpu-v5e")]
    (config,) = _sample(t, {"M": 512, "N": 512, "K": 512}, 1, seed=random.randrange(10_000))
    report = gemm_export.export_for_tpu("tpu-v5e", "bfloat16", config, m=2 * config["bm"], n=2 * config["bn"],
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


def _serving(monkeypatch, backend, device, copy):
    """The tables with ``copy`` in place of ``device``'s GEMM table."""
    from ceiling import tables

    real = tables.path
    monkeypatch.setattr(tables, "path", lambda b, d, f: copy if (b, d, f) == (backend, device, "gemm") else real(b, d, f))
    monkeypatch.setattr(tables, "devices", lambda b, real_devices=tables.devices: sorted(
        {*real_devices(b), *([device] if b == backend else [])}))


def test_import_a_gemm_point_into_the_hopper_table(tmp_path, monkeypatch):
    from ceiling import tables
    from ceiling.gemm.op import GEMM
    from ceiling.gemm.spec import shipped_problem
    from ceiling.op import resolve_config

    folder = _exported(tmp_path, "gemm", "sm_90a")
    table = tmp_path / "gemm.json"
    table.write_text(tables.path("nvidia", "H200", "gemm").read_text())
    point = {"BLOCK_M": 128.0, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 4, "num_warps": 8,
             "EPILOGUE_SUBTILE": False, "WARP_SPECIALIZE": False, "SPLIT_K": 1, "STREAM_K": False}
    shape = {"M": 3072, "N": 5120, "K": 2048}
    result = importing.import_point(folder, point, shape, "optuna, 60 trials", "NVIDIA H200", table)
    assert result.path == table
    result.write()
    written = tables.read(table)
    entry = [e for e in written["entries"] if tables.pinned(e) == {"dtype": "bfloat16", **shape}]
    assert len(entry) == 1 and entry[0]["config"]["BLOCK_M"] == 128 and "optuna, 60 trials" in entry[0]["why"]
    assert len(written["entries"]) == len(tables.read(tables.path("nvidia", "H200", "gemm"))["entries"]) + 1
    _serving(monkeypatch, "nvidia", "H200", table)
    cfg = resolve_config(shipped_problem(3072, 5120, 2048, gpu="NVIDIA H200", arch="sm_90"),
                         GEMM.implementation("nvidia"), None)
    assert "H200#" in cfg.source and cfg.as_dict() == point | {"BLOCK_M": 128}
    with pytest.raises(InputError, match="shared-memory"):
        importing.import_point(folder, {**point, "BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "num_stages": 5},
                               shape, table=table)


def test_import_a_gemm_point_as_a_cdna3_device_refinement(tmp_path, monkeypatch):
    """On CDNA3 a point refines its shape class, for its dtype's width, on its device only."""
    from ceiling.gemm.op import GEMM
    from ceiling.gemm.spec import shipped_problem
    from ceiling.op import resolve_config

    point = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 4, "num_stages": 2, "num_warps": 4,
             "waves_per_eu": 2, "matrix_instr_nonkdim": 16, "kpack": 2}
    table = tmp_path / "MI325X.json"
    importing.import_point(_exported(tmp_path, "gemm", "gfx942"), point, {"M": 512, "N": 1024, "K": 1024}, "test",
                           "AMD Instinct MI325X", table).write()
    _serving(monkeypatch, "amd", "MI325X", table)

    def resolved(gpu, dtype="bfloat16"):
        problem = shipped_problem(600, 1024, 1024, dtype, gpu=gpu, arch="gfx942")
        return resolve_config(problem, GEMM.implementation("amd"), None)

    assert {k: resolved("AMD Instinct MI325X")[k] for k in point} == point  # the class "small", refined
    assert resolved("AMD Instinct MI300X")["BLOCK_M"] == 64 and resolved("AMD Instinct MI300X")["BLOCK_N"] == 64
    assert resolved("AMD Instinct MI325X", "float32")["BLOCK_N"] == 64  # float32 keeps the class's float32 form


def test_import_an_attention_point_and_the_kernels_select_it(tmp_path, monkeypatch):
    import shutil

    from ceiling import tables
    from ceiling.attention.op import ATTENTION
    from ceiling.attention.spec import shipped_problem
    from ceiling.nvidia.attention_specs import H200
    from ceiling.op import resolve_config

    def hopper():  # what the nvidia backend resolves for a head-dim-128 problem on an H200
        return resolve_config(shipped_problem(128, "bfloat16", causal=False, **H200),
                              ATTENTION.implementation("nvidia"), None)

    folder = _exported(tmp_path, "attention", "sm_90a")
    shutil.copytree(tables.ROOT / "nvidia" / "tables", tmp_path / "root" / "nvidia" / "tables")
    monkeypatch.setattr(tables, "ROOT", tmp_path / "root")
    table = tables.path("nvidia", "sm_90a", "attention")
    before = hopper()
    template = Template.load(folder)
    fwd = {"fwd.block_m": 64, "fwd.block_n": 64, "fwd.num_warps": 4, "fwd.num_stages": 3, "fwd.pre_load_v": True,
           "fwd.exp2_split": True}
    result = importing.import_point(folder, fwd, {"head_dim": 128}, "synthetic", table=table, section="fwd")
    assert result.config == {"fwd": {k.split(".")[1]: v for k, v in fwd.items()}}
    result.write()
    cfg = hopper()
    assert cfg["fwd"] == {k.split(".")[1]: v for k, v in fwd.items()}
    assert cfg["dkdv"] == before["dkdv"]
    imported = [e for e in tables.read(table)["entries"] if e["when"] == "head_dim_pad == 128" and e["source"] == "derived"]
    assert imported[-1]["why"].endswith("synthetic")
    assert template.is_valid(fwd, {"head_dim": 128, **ATTENTION_SHAPE}, "fwd")


def test_import_an_fp8_point_into_each_fp8_table(tmp_path, monkeypatch):
    """A found FP8 point is filed for its shape and scaling: the Hopper op resolves it for that
    problem on that device; on CDNA3 it becomes that device's entry for the problem's shape class."""
    import shutil

    from ceiling import tables
    from ceiling.nvidia.gemm_fp8_specs import problem
    from ceiling.op import get, resolve_config

    for backend in ("nvidia", "amd"):
        shutil.copytree(tables.ROOT / backend / "tables", tmp_path / "root" / backend / "tables")
    monkeypatch.setattr(tables, "ROOT", tmp_path / "root")
    op = get("scaled_gemm")
    point = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 5, "num_warps": 4,
             "PROMOTE_STEPS": 2, "STREAM_K": True, "EPILOGUE_SUBTILE": False, "SCALES": "1x128/128x128"}
    shape = {"M": 48, "N": 6144, "K": 4096}
    result = importing.import_point(_exported(tmp_path, "gemm_fp8", "sm_90a"), point, shape, "test", "NVIDIA H200")
    assert result.path == tables.path("nvidia", "H200", "gemm_fp8")
    result.write()
    cfg = resolve_config(problem(48, 6144, 4096, "1x128", "128x128"), op.implementation("nvidia"), None)
    assert "H200#" in cfg.source and cfg.as_dict() == {k: v for k, v in point.items() if k != "SCALES"}
    other = resolve_config(problem(48, 6144, 4096, "tensor", "tensor"), op.implementation("nvidia"), None)
    assert other.source == "heuristic"
    with pytest.raises(InputError, match="block-scale-promotion"):
        importing.import_point(_exported(tmp_path, "gemm_fp8", "sm_90a"), {**point, "PROMOTE_STEPS": 0}, shape)
    amd_point = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 4, "num_stages": 2, "num_warps": 4,
                 "matrix_instr_nonkdim": 16, "waves_per_eu": 2, "kpack": 1, "PROMOTE_STEPS": 1,
                 "SCALES": "1x128/128x128"}
    result = importing.import_point(_exported(tmp_path, "gemm_fp8", "gfx942"), amd_point, shape, "test", "AMD MI325X")
    assert result.path == tables.path("amd", "MI325X", "gemm_fp8")
    (entry,) = result.table["entries"]
    assert entry["when"] == "M <= 64" and entry["source"] == "derived" and entry["why"].endswith("test")
    result.write()
    fnuz = ("float8_e4m3fnuz", "float8_e4m3fnuz")
    skinny = problem(48, 6144, 4096, "1x128", "128x128", *fnuz, gpu={"gpu": "AMD Instinct MI325X", "arch": "gfx942"})
    got = resolve_config(skinny, op.implementation("amd"), None).as_dict()
    assert got == {k: v for k, v in amd_point.items() if k != "SCALES"}
    mi300x = problem(48, 6144, 4096, "1x128", "128x128", *fnuz, gpu={"gpu": "AMD Instinct MI300X", "arch": "gfx942"})
    assert resolve_config(mi300x, op.implementation("amd"), None).as_dict() != got  # the MI325X's alone


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

    from ceiling.roofline.cli import app

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
    entry = next(e for e in json.loads(copy.read_text())["entries"] if e["when"] == "kernel_dtype == 'bfloat16'")
    assert entry["config"]["block_rows"] == 2048 and entry["why"].endswith("made up")
    bad = runner.invoke(app, ["import-point", str(folder), "--config", '{"block_rows": 96}', "--table", str(copy)])
    assert bad.exit_code != 0 and "block_rows" in bad.output
