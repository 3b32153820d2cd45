"""The attention and triangle-attention tuning sweeps, on the CPU: the shipped candidate lists are
what the static filter says (a sample compiled here for sm_90a with tensor cores and no spills,
the rest accounted for), the error check rejects what it must, and applying winners writes the
config tables the kernels then select. The timing itself needs the GPU (`ceiling tune`)."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from ceiling import tables
from ceiling.attention.op import ATTENTION
from ceiling.attention.spec import shipped_problem
from ceiling.nvidia.attention_specs import H200, compile_specs
from ceiling.op import resolve_config
from ceiling.triton import attention as flash
from ceiling.triton.attention_specs import tuned_head_dims
from ceiling.tuning import space
from ceiling.tuning.attention import checks, problems, results
from ceiling.tuning.attention import sweep as attention_sweep


def _sample(op: str, per_kernel: int = 1) -> list[tuple]:
    """A fixed sample of shipped candidates: per (key, sweep kernel), a seeded pick (and the first)."""
    rng = random.Random(0)
    picks = []
    for key in space.keys(op):
        for kernel in space.kernels(op):
            cands = space.candidates(op, key, kernel)
            if not cands:  # every grid point spilled: the sweep times the shipped config alone
                continue
            chosen = {0, rng.randrange(len(cands))} if per_kernel > 1 else {rng.randrange(len(cands))}
            picks += [(op, key, kernel, cands[i]) for i in sorted(chosen)]
    return picks


SAMPLE = _sample("attention") + _sample("triangle_attention")


@pytest.mark.parametrize("op,key,kernel,cand", SAMPLE, ids=[f"{o}-{k}-{n}-{i}" for i, (o, k, n, _) in enumerate(SAMPLE)])
def test_shipped_candidates_compile_without_spills(op, key, kernel, cand):
    cfg = {k: v for k, v in cand.items() if k != "static"}
    facts = space.static_check(space.compile_spec(op, kernel, key, cfg))
    assert facts["hgmma"] + facts["hmma"] > 0, f"{op} {key} {kernel} {cfg}: no tensor-core instructions"
    assert facts["spill_bytes"] == 0, f"{op} {key} {kernel} {cfg}: spills {facts['spill_bytes']} B"
    assert facts["shared_bytes"] <= space.SMEM_LIMIT


@pytest.mark.parametrize("family", space.FAMILIES)
def test_every_grid_point_is_a_candidate_or_dropped_with_a_reason(family):
    """The lists are the space's: made from today's grid (the digests match), every grid point kept or
    dropped with a reason, every kept point within the space's constraints."""
    table = space.load(family)
    assert table["checked_with"], "the candidate list was never checked"
    assert space.stale(family) == [], f"the {family} space changed since its candidates were made: rerun the filter"
    for key in space.keys(family):
        for section in space.sections(family):
            kept = [{k: v for k, v in c.items() if k != "static"} for c in table["candidates"][key][section]]
            dropped = table["dropped"][key][section]
            assert all(d["why"] for d in dropped)
            seen = kept + [d["config"] for d in dropped]
            for point in space.grid(family, section):
                assert point in seen, f"{family} {key} {section}: {point} is neither kept nor dropped"
            for point in kept:
                assert space.rule_drop(family, section, key, point) is None


def test_shipped_configs_are_timed_first():
    for g in problems.attention_groups()[:1]:
        for kernel in g.kernels:
            plan = problems.candidate_list(g, kernel)
            assert plan[0]["shipped"] and not any(c.get("shipped") for c in plan[1:])


def test_error_check_rejects_nan_and_large_errors():
    ref = torch.randn(64, 32)
    framework = ref + 1e-2 * torch.randn(64, 32)
    assert checks.error_check((ref + 1e-3,), (ref,), (framework,))["ok"]
    assert not checks.error_check((ref + 1.0,), (ref,), (framework,))["ok"]
    bad = ref.clone()
    bad[3, 4] = float("nan")
    assert not checks.error_check((bad,), (ref,), (framework,))["ok"]


def test_derived_groups_time_the_base_groups_fastest():
    sweep = attention_sweep.Sweep("attention", budget_s=1.0, refine_top=2)
    base, derived = problems.attention_groups()[0], problems.attention_groups()[2]
    cands = [{"block_m": 64, "block_n": n, "num_warps": 4, "num_stages": s} for n in (32, 64) for s in (2, 3)]
    sweep.plans = {(base.name, "fwd"): [{**cands[0], "shipped": True}] + cands[1:],
                   (derived.name, "fwd"): [{**cands[1], "shipped": True}] + [cands[0]] + cands[2:]}
    sweep.ranking = {(base.name, "fwd"): [3, 2, 0, 1]}
    order = sweep._order(derived, "fwd")
    plan = sweep.plans[(derived.name, "fwd")]
    assert order[0] == 0 and len(order) == 3
    assert [plan[i] for i in order[1:]] == [cands[3], cands[2]]


MEASURED = {"device": "NVIDIA H200", "date": "2026-12-01", "git_commit": "0000000"}


@pytest.fixture
def table_root(tmp_path, monkeypatch):
    """A copy of the NVIDIA tables for a sweep to apply its winners to, in place of the shipped ones."""
    import shutil

    shutil.copytree(tables.ROOT / "nvidia" / "tables", tmp_path / "nvidia" / "tables")
    monkeypatch.setattr(tables, "ROOT", tmp_path)
    return tmp_path


def _hopper(head_dim: int, causal: bool = False, biased: bool = False):
    """The config the nvidia backend resolves on an H200 (a bias and mask: the narrow tiles)."""
    problem = shipped_problem(head_dim, "bfloat16", causal=causal, biased=biased, **H200)
    return resolve_config(problem, ATTENTION.implementation("nvidia"), None)


def _entry(table: dict, when: str, source: str | None = None) -> dict:
    """The config of the entry of ``table`` with this condition (and source)."""
    (entry,) = [e for e in table["entries"] if e.get("when") == when and source in (None, e.get("source"))]
    return entry["config"]


def _row(group, kernel, cfg, ms):
    return dict(op=group.op, group=group.name, kernel=kernel, impl="ceiling.nvidia", config=cfg, median_ms=ms,
                p20_ms=ms, p80_ms=ms, shape=list(group.shape), causal=group.causal, dtype="bfloat16")


def test_apply_attention_writes_winners_causal_overrides_and_pins_narrow(table_root):
    before = _hopper(128, biased=True)
    g, _, gc, _ = problems.attention_groups()
    fast = {"block_m": 128, "block_n": 64, "num_warps": 8, "num_stages": 3, "pre_load_v": True, "warp_specialize": False}
    slow = {"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 2, "pre_load_v": False, "warp_specialize": False}
    causal = {**fast, "num_stages": 4}
    rows = [_row(g, "fwd", slow, 2.0), _row(g, "fwd", fast, 1.0), _row(gc, "fwd", causal, 0.5),
            _row(g, "dq", {"block_m": 128, "block_n": 32, "num_warps": 8, "num_stages": 3}, 1.0)]
    table = results.apply_attention(rows, "measured here", MEASURED)
    assert table["about"] == "measured here" and table == tables.read(tables.path("nvidia", "sm_90a", "attention"))
    entry = _entry(table, "head_dim_pad == 128", "measured")
    assert entry["fwd"] == fast and _entry(table, "head_dim_pad == 128 and causal")["fwd"] == causal
    assert entry["dq"]["num_stages"] == 3
    assert _hopper(128)["fwd"]["num_stages"] == 3
    assert _hopper(128, causal=True)["fwd"]["num_stages"] == 4
    narrow = _hopper(128, biased=True)
    for kernel in problems.ATTENTION_KERNELS:
        for k, v in before[kernel].items():
            assert narrow[kernel][k] == v, (kernel, k)
    assert flash.fwd_knobs(narrow) == {"PRE_LOAD_V": False, "WARP_SPECIALIZE": False, "EXP2_SPLIT": False}
    assert len(compile_specs()) == len(tuned_head_dims("nvidia", "sm_90a")) * 6


def _h200(dtype: str, gpu: str = "NVIDIA H200") -> dict:
    """The triangle-attention config a head-dim-32 problem of ``dtype`` resolves to on ``gpu``."""
    import dataclasses

    from ceiling.op import get, resolve_config
    from ceiling.triangle.spec import shipped_attention_problem

    problem = dataclasses.replace(shipped_attention_problem(32, dtype, target="sm_90a"), gpu=gpu)
    return resolve_config(problem, get("triangle_attention").implementation("nvidia"), None).as_dict()


def test_apply_triangle_writes_the_faster_forward_and_keeps_float32(table_root):
    old32 = _h200("float32")
    h100 = _h200("bfloat16", "NVIDIA H100 80GB HBM3")
    g = problems.triangle_groups()[0]
    rows_cfg = {"ROWS": 2, "BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}
    rows = [_row(g, "fwd", {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}, 0.3),
            _row(g, "fwd_rows", rows_cfg, 0.2),
            _row(g, "bwd_dq", {"BLOCK_M": 128, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2}, 0.1)]
    measured = {"device": "NVIDIA H200", "date": "2026-12-02", "git_commit": "abc"}
    table = results.apply_triangle(rows, "measured here", measured)
    written = next(e for e in table["entries"] if e.get("when") == "head_dim <= 32")
    assert written["why"] == "measured here" and written["measured"] == measured and written["source"] == "measured"
    bf16 = _h200("bfloat16")
    assert bf16["fwd"] == rows_cfg and bf16["fwd_rows"] == rows_cfg and bf16["bwd_dq"]["BLOCK_M"] == 128
    new32 = _h200("float32")
    assert {k: {n: v for n, v in c.items() if (n, v) != ("ROWS", 1)} for k, c in new32.items()} == old32
    assert _h200("bfloat16", "NVIDIA H100 80GB HBM3") == h100


@pytest.mark.parametrize("atomic_ms, expect_atomic", [(0.25, True), (0.35, False)])
def test_apply_triangle_picks_dq_atomic_only_when_it_beats_the_pair(table_root, atomic_ms, expect_atomic):
    """bwd_dkdv_dq replaces bwd_dkdv + bwd_dq when faster than their sum (0.2 + 0.1 ms), written as
    an explicit DQ_ATOMIC; ROW_SPLIT goes in with its tiles; the float32 entries keep both off; the
    written table is a point of the space."""
    from ceiling import spaces

    g = problems.triangle_groups()[0]
    dkdv = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
    fused = {"BLOCK_M": 32, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
    dbias = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3, "ROW_SPLIT": 2}
    rows = [_row(g, "bwd_dkdv", dkdv, 0.2), _row(g, "bwd_dq", {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4,
                                                                "num_stages": 2}, 0.1),
            _row(g, "bwd_dkdv_dq", fused, atomic_ms), _row(g, "bwd_dbias", dbias, 0.1)]
    table = results.apply_triangle(rows, "measured here", {"device": "d", "date": "t", "git_commit": "c"})
    assert all("bwd_dkdv_dq" not in e["config"] for e in table["entries"])
    bf16 = _h200("bfloat16")
    assert bf16["bwd_dkdv"] == ({**fused, "DQ_ATOMIC": True} if expect_atomic else {**dkdv, "DQ_ATOMIC": False})
    assert bf16["bwd_dbias"] == dbias
    f32 = _h200("float32")
    assert f32["bwd_dkdv"]["DQ_ATOMIC"] is False and f32["bwd_dbias"]["ROW_SPLIT"] == 1
    for dtype, cfg in (("bfloat16", bf16), ("float32", f32)):
        spaces.check("triangle_attention", "sm_90a", cfg, {"head_dim": 32, "dtype_bytes": 4 if dtype == "float32" else 2})


def test_triangle_sweep_times_the_knobs_next_to_what_ships():
    """The sweep kernels pin DQ_ATOMIC (bwd_dkdv without, bwd_dkdv_dq with) and list the candidates
    one step from the shipped config first."""
    g = problems.triangle_groups()[0]
    assert "bwd_dkdv_dq" in g.kernels and "bwd_dkdv_dq" in space.kernels("triangle_attention")
    for kernel in ("bwd_dkdv", "bwd_dkdv_dq"):
        assert all("DQ_ATOMIC" not in c for c in space.candidates("triangle_attention", "32", kernel))
    plan = problems.candidate_list(g, "bwd_dbias")
    shipped = problems.plain(plan[0])
    steps = [sum(problems.plain(c).get(k, False) != shipped.get(k, False) for k in set(problems.plain(c)) | set(shipped))
             for c in plan[1:]]
    assert steps == sorted(steps) and steps[0] == 1
    assert any(c.get("ROW_SPLIT", 1) > 1 for c in plan[1:])
    assert space.candidates("triangle_attention", "32", "fwd_rows"), "no row-sharing forward compiles"


def test_flops_count_the_dots_each_kernel_runs():
    g = problems.attention_groups()[0]
    b, s, h, d = g.shape
    assert problems.flops(g, "fwd") == 4 * b * h * s * s * d
    assert problems.flops(problems.attention_groups()[2], "dkdv") == 8 * b * h * s * s * d / 2
    assert math.isclose(problems.flops(g, "dq") / problems.flops(g, "fwd"), 1.5)


@pytest.mark.parametrize("atomic_ms, expect_atomic", [(1.5, True), (2.5, False)])
def test_apply_attention_picks_dq_in_dkdv_only_when_it_beats_the_pair(table_root, atomic_ms, expect_atomic):
    """dkdv_dq replaces dkdv + dq when it is faster than their sum (here 1.0 + 1.0 ms); the choice
    is written as an explicit dq_atomic, and the narrow (bias, mask) dK/dV config never uses it."""
    g = problems.attention_groups()[0]
    dkdv = {"block_m": 32, "block_n": 128, "num_warps": 8, "num_stages": 2}
    fused = {"block_m": 16, "block_n": 128, "num_warps": 8, "num_stages": 3}
    rows = [_row(g, "dkdv", dkdv, 1.0), _row(g, "dq", {"block_m": 128, "block_n": 32, "num_warps": 8, "num_stages": 3}, 1.0),
            _row(g, "dkdv_dq", fused, atomic_ms)]
    table = results.apply_attention(rows, "measured here", MEASURED)
    entry = _entry(table, "head_dim_pad == 128", "measured")
    assert "dkdv_dq" not in entry
    assert entry["dkdv"] == ({**fused, "dq_atomic": True} if expect_atomic else {**dkdv, "dq_atomic": False})
    assert _entry(table, "head_dim_pad == 128 and narrow")["dkdv"]["dq_atomic"] is False
    assert bool(_hopper(128)["dkdv"].get("dq_atomic")) is expect_atomic
    assert not _hopper(128, biased=True)["dkdv"]["dq_atomic"]


def test_tune_command_turns_sweep_rows_into_records_and_applies(tmp_path, table_root, monkeypatch):
    """The command around the sweep, with the sweep's rows made up (the sweep itself needs the GPU):
    every timed row becomes a valid record, skipped and failed ones do not, and --apply writes."""
    from ceiling.microbench.records import frame
    from ceiling.roofline.commands import tune_attention as command

    g = problems.attention_groups()[0]
    cfg = {"block_m": 128, "block_n": 64, "num_warps": 8, "num_stages": 3, "pre_load_v": False, "exp2_split": True}
    rows = [
        {**_row(g, "fwd", cfg, 1.0), "method": "cuda-graph", "tflops": 500.0, "shipped": False},
        {**_row(g, "dkdv", {"block_m": 32, "block_n": 128, "num_warps": 8, "num_stages": 2}, 1.2), "method": "cuda-graph"},
        {**_row(g, "dq", {"block_m": 128, "block_n": 32, "num_warps": 8, "num_stages": 2}, 0.9), "method": "cuda-graph"},
        {**_row(g, "dkdv_dq", {"block_m": 16, "block_n": 128, "num_warps": 8, "num_stages": 2}, 1.8),
         "method": "cuda-graph"},
        {**{k: v for k, v in _row(g, "fwd", cfg, 1.0).items() if "ms" not in k}, "skipped": "the time budget ran out"},
        dict(op="attention", group=g.name, shape=list(g.shape), causal=False, dtype="bfloat16", config=None,
             kernel="fwd", impl="sdpa", method="cuda-graph", median_ms=0.8, p20_ms=0.79, p80_ms=0.81),
        dict(op="attention", group=g.name, kernel="bwd", impl="ceiling.nvidia-tuned", shape=list(g.shape), causal=False,
             dtype="bfloat16", config={"dkdv": {}, "dq": {}}, method="cuda-events", median_ms=2.5, p20_ms=2.4,
             p80_ms=2.6, tflops=None),
    ]

    class FakeSweep:
        def __init__(self, *args, **kwargs):
            pass

        def run(self):
            return rows

    monkeypatch.setattr(attention_sweep, "Sweep", FakeSweep)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    out = command.tune_attention("attention", budget_s=1.0, rep_ms=1, out=tmp_path, apply=True, workers=1, driver=None)
    assert out is rows
    records = frame(tmp_path / "records")
    assert len(records) == sum("median_ms" in r for r in rows)
    written = _entry(json.loads(tables.path("nvidia", "sm_90a", "attention").read_text()), "head_dim_pad == 128",
                     "measured")
    assert written["fwd"]["exp2_split"] is True
    assert written["dkdv"]["dq_atomic"] is True  # 1.8 ms against 1.2 + 0.9 ms
