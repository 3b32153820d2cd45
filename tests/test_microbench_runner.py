"""Suites, runner, CLI and the pure helpers of the GPU suites (which run on the device only)."""

import math

import numpy as np
import pytest
from typer.testing import CliRunner

from ceiling.microbench import clocks, records, runner, summary
from ceiling.microbench.suites import ORDER, SuiteContext, bank_conflicts, ceilings
from ceiling.microbench.suites import occupancy as occ_suite
from ceiling.roofline.cli import app


@pytest.fixture(scope="module")
def host_run(tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    progress = []
    outcomes = runner.run(["host", "clocks", "bank-conflicts", "occupancy", "ceilings"], store, device="cpu",
                          quick=True, isolate="all", progress=progress.append)  # the host suite in a child process
    assert any("host" in m for m in progress)  # progress messages cross the process boundary
    return store, outcomes


def test_host_suite_writes_records_and_gpu_suites_say_why_not(host_run):
    store, outcomes = host_run
    by_name = {o.suite: o for o in outcomes}
    assert by_name["host"].status == "ok"
    for name in ("clocks", "bank-conflicts", "occupancy", "ceilings"):
        assert by_name[name].status == "unavailable" and by_name[name].reason
    stored = records.load(store)
    assert len(stored) == len(by_name["host"].records) >= 8
    assert not list(store.glob(".*.tmp"))  # atomic: no temporary left behind
    ops = {(r.op, r.name) for r in stored}
    for case in ("read", "write", "copy"):
        assert ("host-memory-bandwidth", case) in ops
    assert ("host-blas", "matmul-float32-peak") in ops and ("host-blas", "matmul-float64-peak") in ops
    for r in stored:
        assert r.kind == "host" and r.value > 0 and math.isfinite(r.value)
        assert r.provenance.device.startswith("cpu: ")
        assert r.p20 <= r.median <= r.p80


def test_cli_runs_and_reports(tmp_path):
    result = CliRunner().invoke(app, ["microbench", "clocks", "occupancy", "--device", "cpu", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "unavailable" in result.output and "clocks" in result.output
    bad = CliRunner().invoke(app, ["microbench", "nonsense", "--out", str(tmp_path)])
    assert bad.exit_code != 0


def test_isolated_suite_timeout_is_reported():
    status, reason, recs = runner._run_isolated("host", SuiteContext(quick=True), timeout_s=0.2)
    assert status == "failed" and "timed out" in reason and recs == []


def test_device_argument():
    assert runner.parse_device(None) == 0
    assert runner.parse_device("cpu") is None
    assert runner.parse_device("cuda:1") == 1
    with pytest.raises(ValueError, match="device"):
        runner.parse_device("tpu")
    with pytest.raises(ValueError, match="suite"):
        runner.run(["warp-drive"], None)
    assert ORDER == ("host", "clocks", "bank-conflicts", "occupancy", "ceilings")


def test_bank_cases_fit_the_kernel_buffer_and_carry_the_model():
    cases = bank_conflicts.cases()
    names = {c.name for c in cases}
    assert len(names) == len(cases) >= 6 * 64 + 10
    by = {c.name: c for c in cases}
    assert by["lds_b32-stride-33"].model.wavefronts == 1
    assert by["lds_b32-stride-32"].model.wavefronts == 32
    assert by["lds_b128-column-sw128-cute"].model.conflict_free
    assert by["ldsm_x4-pitch-128B"].model.wavefronts == 32
    assert all(len(c.offsets) == 32 and all(o % c.width == 0 for o in c.offsets) for c in cases)


def test_max_overlap_counts_concurrent_blocks_per_sm():
    starts = [0, 1, 2, 10, 0, 5]
    ends = [5, 6, 7, 12, 10, 10]
    sms = [0, 0, 0, 0, 1, 1]
    assert occ_suite.max_overlap(starts, ends, sms) == {0: 3, 1: 2}
    assert occ_suite.max_overlap([0, 5], [5, 9], [3, 3]) == {3: 1}  # touching intervals do not overlap
    configs = occ_suite.random_configs(1000, 227 * 1024, seed=1)
    assert len(configs) == 1000 and all(1 <= t <= 1024 and 0 <= d <= 227 * 1024 for _, t, d in configs)


def test_latency_chain_is_one_cycle():
    nxt = ceilings.cyclic_chain(4096, np.random.default_rng())
    seen, node = set(), 0
    for _ in range(4096):
        seen.add(node)
        node = nxt[node]
    assert node == 0 and len(seen) == 4096


def test_clock_reasons_and_sampler_without_a_gpu():
    assert clocks.decode_reasons(0x4 | 0x1 | 0x1000) == ["gpu_idle", "sw_power_cap", "other_0x1000"]
    s = clocks.ClockSummary(samples=3, sm_mhz={"min": 1500.0, "median": 1980.0, "max": 1980.0},
                            reasons=["sw_power_cap"], max_sm_mhz=1980.0)
    assert s.throttled
    fields = s.provenance_fields()
    assert fields["clocks_mhz"]["sm"] == 1980.0 and fields["clocks_mhz"]["sm_min"] == 1500.0
    assert fields["throttle_reasons"] == ["sw_power_cap"]
    assert not clocks.ClockSummary(samples=1, reasons=["sync_boost"]).throttled
    result, summary_ = clocks.sampled(lambda: 7)
    assert result == 7
    if summary_.error is None:  # a machine with a GPU and NVML
        assert summary_.samples >= 1 and summary_.sm_mhz["min"] > 0
    else:
        assert summary_.samples == 0 and "NVML" in summary_.error


def test_summary_folds_model_checks(host_run):
    prov = records.host_provenance(device="test")
    recs = [
        records.Record(kind="microbench", op="bank-conflicts", name=f"c{i}", metric="cycles-per-access", value=v,
                       unit="cycles", config={"family": "stride"}, extra={"model_wavefronts": m}, provenance=prov)
        for i, (v, m) in enumerate([(1.05, 1), (2.0, 2), (9.0, 32)])
    ]
    rows = summary.rows(recs + host_run[1][0].records)
    assert ("bank-conflicts", "stride: cycles/access within 25% of model wavefronts", "2/3") in rows
    assert any(r[0] == "host-blas" and r[2].endswith("FLOP/s") for r in rows)
    assert summary.human(3.9e12, "B/s") == "3.9 TB/s"


def test_selfcheck_passes_agreement_and_fails_disagreement():
    from ceiling.microbench import selfcheck

    prov = records.host_provenance(device="test")

    def bank(values):
        models = [1, 2, 4, 8, 16, 32]
        return [records.Record(kind="microbench", op="bank-conflicts", name=f"c{m}", metric="cycles-per-access",
                               value=v, unit="cycles", config={"kernel": "lds_b32"},
                               extra={"model_wavefronts": m, "model_ideal": 1}, provenance=prov)
                for v, m in zip(values, models)]

    def lat(values):
        sizes = [16 << 10, 1 << 20, 16 << 20, 256 << 20]
        return [records.Record(kind="microbench", op="latency", name=f"l{s}", metric="latency", value=v,
                               unit="cycles", shape={"bytes": s}, provenance=prov) for v, s in zip(values, sizes)]

    good = {n: ok for n, ok, _ in selfcheck.checks(bank([1.1, 2.1, 4.2, 8.1, 16.5, 32.9]) + lat([34, 260, 480, 700]))}
    assert good and all(good.values()), good
    bad = {n: ok for n, ok, _ in selfcheck.checks(bank([32.0, 16.0, 8.0, 4.0, 2.0, 1.0]) + lat([700, 260, 480, 34]))}
    assert not bad["bank-conflicts: rank correlation of cycles/access with model wavefronts >= 0.9"]
    assert not bad["latency: L1 < L2 < HBM by pointer chase"]


def test_cpu_peak_bytes_follows_allocations_and_frees():
    import torch

    from ceiling.microbench.benchmarks.runner import cpu_peak_bytes

    with cpu_peak_bytes() as peak:
        a = torch.empty(1000, dtype=torch.float32)  # 4000 B
        b = torch.empty(500, dtype=torch.float32)  # 6000 B live
        del a  # 2000 B live
        c = torch.empty(2000, dtype=torch.float32)  # 10000 B live: the peak
        del b, c
    if "bytes" not in peak:
        pytest.skip("this PyTorch's profiler exposes no memory events")
    assert peak["bytes"] == 10000


def test_quick_host_arrays_stay_under_1_gb_on_any_cache(monkeypatch):
    """`ceiling run` measures the host in quick mode everywhere: its two bandwidth arrays stay under 1 GB
    even on a CPU reporting a 480 MiB last-level cache (4x that was 1920 MiB per array)."""
    from ceiling.microbench.suites import host

    monkeypatch.setattr(host, "available_memory_bytes", lambda: 512 * 2**30)
    for llc in (8 * 2**20, 32 * 2**20, 105 * 2**20, 480 * 2**20, 2**31):
        monkeypatch.setattr(host, "last_level_cache_bytes", lambda llc=llc: llc)
        quick, full = host.working_set_bytes(True), host.working_set_bytes(False)
        assert 2 * quick < 1e9, (llc, quick)
        assert quick == min(4 * llc, host.QUICK_ARRAYS_BYTES // 2)  # 4x the cache where that fits
        assert full >= 4 * llc  # the full run still sizes to the cache


def test_the_quick_host_suite_allocates_what_it_says(monkeypatch):
    """The arrays the suite allocates are the sizes above (traced by NumPy's allocator hooks), at a small
    stand-in cache so the test stays fast."""
    import tracemalloc

    from ceiling.microbench.suites import host
    from ceiling.microbench.suites.base import SuiteContext

    monkeypatch.setattr(host, "last_level_cache_bytes", lambda: 2 * 2**20)
    host.host_provenance()  # its imports (the library versions) before the tracing starts
    tracemalloc.start()
    try:
        records = host._run(SuiteContext(quick=True))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    arrays = 2 * host.working_set_bytes(True)
    bandwidth = [r for r in records if r.op == "host-memory-bandwidth"]
    assert {r.shape["bytes"] for r in bandwidth} == {arrays // 2} and bandwidth[0].extra["llc_multiple"] == 4.0
    assert arrays <= peak < arrays + 16 * 2**20, (peak, arrays)  # the two arrays and the small matmuls
