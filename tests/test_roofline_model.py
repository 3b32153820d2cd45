"""The performance model: its terms, the fit, the held-out judgement and the analytic fallback."""

from __future__ import annotations

import math
import random

import pytest

from ceiling.microbench.records import Provenance, Record
from ceiling.roofline import model
from ceiling.roofline.machine import published
from tests.synthetic_records import LAW, SHAPES, gemm_records

H200 = published("h200")
CFG = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 3, "num_warps": 8}


def test_fit_recovers_a_known_law_and_meets_the_targets_on_held_out_shapes():
    recs = gemm_records(per_shape=150, noise=0.01, seed=random.randrange(10_000))
    fitted, evaluations = model.fit_and_evaluate(recs)
    e = evaluations["h200|gemm"]
    assert e.mode == "fitted" and "each shape held out once" in e.split and e.n_test == len(recs)
    assert e.mape <= 0.10 and e.spearman >= 0.9 and e.regret <= 0.05, e
    assert fitted.mode("h200", "gemm") == "fitted"
    coefs = fitted.coefs("h200", "gemm")
    assert coefs["roof"] == pytest.approx(LAW["roof"], rel=0.15)


def test_cross_validation_never_predicts_a_shape_it_was_fit_on():
    recs = gemm_records(per_shape=20, noise=0.01, seed=random.randrange(10_000))
    rows = model.samples(recs)
    seen = []
    original = model.fit

    def spy(train, min_samples=12, **kw):
        seen.append({s.group for s in train})
        return original(train, min_samples, **kw)

    model.fit = spy
    try:
        e = model.cross_validate(rows, folds=4)
    finally:
        model.fit = original
    assert len(seen) == 4 and e.n_test == len(rows) and e.groups == 8
    assert all(len(groups) == 6 for groups in seen)  # two of the eight shapes out of each fit


def test_a_model_that_ranks_badly_is_judged_badly():
    recs = gemm_records(shapes=[{"M": 4096, "N": 4096, "K": 4096}], per_shape=100, noise=0.01)
    samples = model.samples(recs)
    wrong = model.PerfModel({"h200|gemm": {"launch": 1.0, "tiles": 50.0}})  # only counts tiles
    e = model.evaluate_on(wrong, samples)
    assert e.mape > 0.5 and e.spearman < 0.9


def test_devices_without_measurements_use_the_analytic_terms_and_say_so():
    fitted, _ = model.fit_and_evaluate(gemm_records(per_shape=40))
    mi300x = published("mi300x")
    p = fitted.predict("gemm", {"M": 8192, "N": 8192, "K": 8192}, CFG | {"waves_per_eu": 2}, mi300x, "bfloat16")
    assert p.mode == "analytic"
    flops = 2 * 8192**3
    assert p.seconds >= flops / mi300x.peak("bfloat16")  # never faster than the roofline
    assert p.seconds == pytest.approx(sum(model.ANALYTIC.get(k, 0) * v for k, v in p.terms.items()))


def test_wave_quantization_costs_a_whole_wave():
    # 132 tiles fill the H200 once; one more tile needs a second wave of the same length
    full = model.terms("gemm", {"M": 128 * 12, "N": 256 * 11, "K": 4096}, CFG, H200, "bfloat16")
    over = model.terms("gemm", {"M": 128 * 12 + 1, "N": 256 * 11, "K": 4096}, CFG, H200, "bfloat16")
    assert over["compute"] == pytest.approx(2 * full["compute"])


def test_static_facts_enter_the_terms():
    shape = {"M": 4096, "N": 4096, "K": 4096}
    plain = model.terms("gemm", shape, CFG, H200, "bfloat16", model.StaticFacts(registers=168))
    no_tc = model.terms("gemm", shape, CFG, H200, "bfloat16", model.StaticFacts(registers=168, tensor_core_instructions=0))
    spills = model.terms("gemm", shape, CFG, H200, "bfloat16", model.StaticFacts(registers=255, spill_bytes=64))
    assert no_tc["compute"] > 10 * plain["compute"]
    assert plain["spill"] == 0 and spills["spill"] > 0
    assert model.occupancy(H200, CFG, 2, model.StaticFacts(registers=255)) == 1
    assert model.occupancy(H200, {**CFG, "num_warps": 4, "BLOCK_N": 64, "num_stages": 2}, 2, model.StaticFacts(registers=64)) >= 2


def test_static_records_are_indexed_by_target_and_config():
    prov = Provenance(device="target sm_90a")
    recs = [Record(kind="static", op="gemm", name="nvidia", metric=m, value=v, unit="count", config=CFG, provenance=prov)
            for m, v in (("registers", 168), ("spill_bytes", 0), ("tensor_core_instructions", 4))]
    idx = model.static_index(recs)
    facts = idx[("gemm", "sm_90a", model._config_key({**CFG, "dtype": "bfloat16"}))]
    assert facts.registers == 168 and facts.tensor_core_instructions == 4


def test_model_round_trips_through_json(tmp_path):
    fitted, _ = model.fit_and_evaluate(gemm_records(per_shape=30))
    fitted.save(tmp_path / "m.json")
    again = model.PerfModel.load(tmp_path / "m.json")
    t = model.terms("gemm", {"M": 1000, "N": 3000, "K": 700}, CFG, H200, "bfloat16")
    assert again.predict_terms("h200", "gemm", t).seconds == fitted.predict_terms("h200", "gemm", t).seconds
    assert math.isfinite(again.predict_terms("h200", "gemm", t).seconds)


def _timing(name: str, seconds: float, method: str | None, config: dict | None = None, role: str | None = None,
            backend: str | None = "nvidia", status: str = "ok") -> Record:
    extra = {"status": status} | ({"role": role} if role else {})
    return Record(kind="kernel", op="gemm", name=name, backend=backend, metric="time", value=seconds, unit="s",
                  shape={"M": 16, "N": 4096, "K": 4096, "dtype": "bfloat16"}, config=CFG if config is None else config,
                  method=method, median=seconds, extra=extra, provenance=Provenance(device="NVIDIA H200"))


def test_selection_keeps_only_our_device_time_and_says_why_the_rest_is_out():
    from ceiling.roofline import selection

    kept = _timing("ceiling.nvidia", 20e-6, "cuda-graph")
    polluted = _timing("ceiling.nvidia", 60e-6, "triton.testing.do_bench")  # eager launches: host time inside
    long_events = _timing("ceiling.nvidia", 900e-6, "cuda-events")  # device time, but another method than the graph
    cublas = _timing("torch.matmul", 15e-6, "cuda-graph", config={}, backend="cublas")
    sdpa_like = _timing("library", 15e-6, "cuda-graph", role="baseline", backend=None)
    failed = _timing("ceiling.nvidia", 20e-6, "cuda-graph", status="runtime-failed")
    untimed = _timing("ceiling.nvidia", 20e-6, None)
    dispatched = _timing("ceiling:nvidia", 20e-6, "cuda-graph", config={"dtype": "bfloat16"}, role="ours")
    chosen = selection.select([kept, polluted, long_events, cublas, sdpa_like, failed, untimed, dispatched])
    assert chosen.used == [kept] and chosen.methods == {"h200|gemm": "cuda-graph"}
    why = {id(e.record): e.reason for e in chosen.excluded}
    assert why == {id(polluted): "host-overhead", id(long_events): "other-method", id(cublas): "baseline",
                   id(sdpa_like): "baseline", id(failed): "failed", id(untimed): "no-method", id(dispatched): "no-config"}
    assert chosen.counts()["h200|gemm"] == {"method": "cuda-graph", "used": 1, "excluded": {
        "host-overhead": 1, "other-method": 1, "baseline": 2, "failed": 1, "no-method": 1, "no-config": 1}}
    # without graph-timed records, event timings of long kernels are device time and are used
    alone = selection.select([polluted, long_events])
    assert alone.used == [long_events] and alone.methods == {"h200|gemm": "cuda-events"}


def test_polluted_and_baseline_records_change_nothing_in_the_fit():
    clean = [r.model_copy(update={"method": "cuda-graph"})
             for r in gemm_records(shapes=SHAPES[:4], per_shape=12, noise=0.01, seed=random.randrange(10_000))]
    # the same configs timed around eager launches (tens of microseconds of host time added), and cuBLAS
    polluted = [r.model_copy(update={"method": "triton.testing.do_bench", "median": r.median + 50e-6})
                for r in clean if r.median < 150e-6]
    baseline = [r.model_copy(update={"name": "torch.matmul", "backend": "cublas", "config": {}}) for r in clean[:3]]
    assert polluted  # the synthetic shapes include kernels short enough to be polluted
    _, alone = model.fit_and_evaluate(clean)
    fitted, mixed = model.fit_and_evaluate(clean + polluted + baseline)
    e, ref = mixed["h200|gemm"], alone["h200|gemm"]
    assert e.n_test == len(clean) and e.mape == pytest.approx(ref.mape) and e.method == "cuda-graph"
    assert e.excluded == {"host-overhead": len(polluted), "baseline": 3}


def test_tile_orientation_and_split_k_enter_the_terms():
    shape = {"M": 8192, "N": 8192, "K": 8192}
    wide = model.terms("gemm", shape, CFG, H200, "bfloat16")
    tall = model.terms("gemm", shape, {**CFG, "BLOCK_M": 256, "BLOCK_N": 128}, H200, "bfloat16")
    assert wide["compute"] == tall["compute"] and tall["smem"] > wide["smem"]  # four 64-row wgmmas re-read B
    skinny = {"M": 16, "N": 4096, "K": 4096}
    one = model.terms("gemm", skinny, {**CFG, "BLOCK_M": 64, "BLOCK_N": 128, "SPLIT_K": 1}, H200, "bfloat16")
    four = model.terms("gemm", skinny, {**CFG, "BLOCK_M": 64, "BLOCK_N": 128, "SPLIT_K": 4}, H200, "bfloat16")
    assert one["splitk"] == 0 and four["splitk"] >= model.REDUCE_LAUNCH_S
    assert four["pipe"] < one["pipe"]  # four times the SMs share the K loop


def test_attention_terms_follow_the_tile_schedule():
    fwd = {"batch": 16, "heads": 32, "seq": 1024, "head_dim": 64}
    full = model.terms("attention", fwd, {"direction": "fwd", "causal": False}, H200, "bfloat16")
    causal = model.terms("attention", fwd, {"direction": "fwd", "causal": True}, H200, "bfloat16")
    # 8 query blocks of 128: the diagonal blocks are computed whole, 36 of 64 blocks rather than half
    assert causal["compute"] / full["compute"] == pytest.approx(36 / 64, rel=0.05)
    wide = model.terms("attention", {**fwd, "heads": 16, "head_dim": 128}, {"direction": "fwd"}, H200, "bfloat16")
    # the same FLOPs at twice the head dim: half the score elements, so half the exponentials
    assert wide["compute"] == pytest.approx(full["compute"], rel=0.05) and wide["exp"] == pytest.approx(full["exp"] / 2, rel=0.05)
    assert full["exp"] > 0.5 * full["compute"]  # at head dim 64 the SFUs are nearly as busy as the tensor cores
    bwd = model.terms("attention", fwd, {"direction": "bwd"}, H200, "bfloat16")
    assert bwd["compute"] > 3 * full["compute"] and bwd["launch"] == 3 * full["launch"]
    # one program too many for the SMs costs a whole extra program on the busiest SM
    one = model.terms("attention", {"batch": 1, "heads": 132, "seq": 128, "head_dim": 64}, {}, H200, "bfloat16")
    two = model.terms("attention", {"batch": 1, "heads": 133, "seq": 128, "head_dim": 64}, {}, H200, "bfloat16")
    assert two["compute"] == pytest.approx(2 * one["compute"])


def test_each_direction_is_its_own_fit_unit_with_its_own_timing_method():
    from ceiling.roofline import selection

    def timing(direction, method, seconds):
        return Record(kind="kernel", op="attention", name="ceiling:nvidia", backend="nvidia", metric="time",
                      value=seconds, unit="s", shape={"batch": 4, "heads": 16, "seq": 4096, "head_dim": 128},
                      config={"direction": direction, "causal": False, "dtype": "bfloat16"}, method=method,
                      median=seconds, extra={"role": "ours"}, provenance=Provenance(device="NVIDIA H200"))

    fwd, bwd_long, bwd_short = timing("fwd", "cuda-graph", 1e-3), timing("bwd", "cuda-events", 4e-3), timing("bwd", "cuda-events", 50e-6)
    chosen = selection.select([fwd, bwd_long, bwd_short])
    assert chosen.methods == {"h200|attention|fwd": "cuda-graph", "h200|attention|bwd": "cuda-events"}
    assert chosen.used == [fwd, bwd_long] and [e.reason for e in chosen.excluded] == ["host-overhead"]


@pytest.fixture(scope="module")
def committed():
    from ceiling.roofline import store

    return model.fit_and_evaluate(store.load([]))


# Held-out figures on the committed H200 records (4 folds of shapes, seed 0), as achieved, with a small
# margin: a change to the terms or the fit that makes any of them worse fails here.
ACHIEVED = {  # unit: (MAPE at most, within-shape Spearman at least, top-1 regret at most)
    "h200|gemm": (0.080, 0.910, 0.040),
    "h200|gemm|filled": (0.025, 0.910, 0.015),
    "h200|gemm|underfilled": (0.125, 0.910, 0.070),  # misses the targets: see the README
    "h200|attention|fwd": (0.050, 0.990, None),  # one config per problem: no regret to judge
    "h200|attention|bwd": (0.055, 0.980, None),
}


def test_held_out_figures_on_the_committed_h200_records(committed):
    fitted, evaluations = committed
    for key, (mape, rho, regret) in ACHIEVED.items():
        e = evaluations[key]
        assert e.mode == "fitted" and "each shape held out once" in e.split and not e.note, (key, e)
        assert e.mape <= mape and e.spearman >= rho, (key, e)
        assert (e.regret <= regret) if regret is not None else e.regret != e.regret, (key, e)
    for key in ("h200|gemm", "h200|gemm|filled", "h200|attention|fwd", "h200|attention|bwd"):
        assert evaluations[key].meets(), key


def test_units_with_too_few_problems_stay_analytic_and_say_so(committed):
    fitted, evaluations = committed
    for unit in ("triangle_attention|fwd", "triangle_attention|bwd", "triangle_multiplicative_update|fwd",
                 "triangle_multiplicative_update|fwdbwd"):
        e = evaluations[f"h200|{unit}"]
        assert e.n_test >= 2 and e.mode == "analytic" and e.note.startswith("too few records to fit"), (unit, e)
        assert fitted.mode("h200", unit) == "analytic"
