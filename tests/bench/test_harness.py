"""The timing harness, the case runner, the records converter and the bench commands, on the CPU."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from ceiling.microbench.benchmarks import cases_for
from ceiling.microbench.benchmarks.cases import Case, Impl, error_ratio, skipped
from ceiling.microbench.benchmarks.pytest_json import convert
from ceiling.microbench.benchmarks.runner import clock_summary, records, rows, run_case
from ceiling.microbench.peaks import Ceiling, datasheet
from ceiling.microbench.records import Record, load
from ceiling.microbench.timing import HostTimer, TimingProtocol, measure, quantiles, rotation_sets
from ceiling.roofline.cli import app

REPO = Path(__file__).resolve().parents[2]


class FakeCall:
    """A call whose 'device time' is scripted; it logs when it runs."""

    def __init__(self, name: str, durations: list[float], log: list[str]):
        self.name, self.durations, self.log = name, list(durations), log

    def __call__(self):
        self.log.append(self.name)


class FakeTimer:
    method = "fake"

    def __init__(self):
        self.units: list[str] = []

    def synchronize(self):
        pass

    def prepare(self, calls):
        def launch():
            self.units.append(calls[0].name)
            for c in calls:
                c()
            return lambda: [c.durations.pop(0) for c in calls]

        return launch


class FailingTimer(FakeTimer):
    method = "broken"

    def prepare(self, calls):
        raise RuntimeError("capture not allowed")


def test_quantiles_match_numpy_linear_interpolation():
    times = np.random.default_rng(0).lognormal(size=101)
    med, p20, p80 = quantiles(times)
    assert med == pytest.approx(np.median(times))
    assert p20 == pytest.approx(np.sort(times)[20])
    assert p80 == pytest.approx(np.sort(times)[80])
    with pytest.raises(ValueError):
        quantiles([])


def test_measure_statistics_interleaving_and_fallback():
    # Two implementations, 2 rotated sets each, 5 rounds after 2 warm-up units each
    # (warm-up units are run but their times are never collected).
    rounds, warm = 5, 2
    log: list[str] = []
    ours_times = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    base_times = [float(20 + i) for i in range(10)]
    calls = {
        "ours": [FakeCall("ours", ours_times[0::2], log), FakeCall("ours", ours_times[1::2], log)],
        "base": [FakeCall("base", base_times[0::2], log), FakeCall("base", base_times[1::2], log)],
    }
    timer = FakeTimer()
    proto = TimingProtocol(warmup_s=0.0, target_s=0.0, min_reps=rounds, max_reps=rounds)
    stats = measure(calls, timers=[FailingTimer(), timer], protocol=proto)
    ours, base = stats["ours"], stats["base"]
    assert ours.method == base.method == "fake"
    assert any("broken failed" in n and "capture not allowed" in n for n in ours.notes)
    assert ours.repetitions == base.repetitions == 2 * rounds
    assert sorted(ours.times) == [float(i) for i in range(1, 11)]
    assert ours.median == pytest.approx(5.5) and base.median == pytest.approx(24.5)
    assert ours.p20 == pytest.approx(np.percentile(range(1, 11), 20))
    assert base.p80 == pytest.approx(np.percentile(range(20, 30), 80))
    # Warm-up first, then rounds alternate which implementation goes first.
    assert timer.units[: 2 * warm] == ["ours"] * warm + ["base"] * warm
    timed = timer.units[2 * warm:]
    assert timed == ["ours", "base", "base", "ours", "ours", "base", "base", "ours", "ours", "base"]


def test_measure_stops_at_the_deadline_but_keeps_three_rounds():
    log: list[str] = []
    calls = {"only": [FakeCall("only", [1.0] * 100, log)]}
    proto = TimingProtocol(warmup_s=0.0, target_s=0.0, min_reps=50, max_reps=50)
    stats = measure(calls, timers=[FakeTimer()], protocol=proto, deadline=0.0)
    assert stats["only"].repetitions == 3
    assert any("time budget" in n for n in stats["only"].notes)


def test_rotation_sets_exceed_twice_l2():
    l2 = 60 * 2**20
    n = rotation_sets(32 * 2**20, l2)
    assert n == 4 and n * 32 * 2**20 >= 2 * l2 and (n - 1) * 32 * 2**20 < 2 * l2
    assert rotation_sets(400 * 2**20, l2) == 1  # one set is already larger than 2 x L2
    assert rotation_sets(1000, l2, max_sets=16) == 16
    assert rotation_sets(32 * 2**20, l2, memory_budget=64 * 2**20) == 2
    assert rotation_sets(32 * 2**20, 0) == 1  # the CPU: nothing to defeat
    with pytest.raises(ValueError):
        rotation_sets(0, l2)


def test_host_timer_measures_sleep():
    import time

    launch = HostTimer().prepare([lambda: time.sleep(0.002)] * 2)
    times = launch()()
    assert len(times) == 2 and all(0.0015 < t < 0.2 for t in times)


def test_error_ratio_rule():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g)
    ref = a.double() @ b.double()
    framework = (a.half() @ b.half()).float()
    good = (a @ b).half()
    assert error_ratio("ours", good, framework, ref, "float16").passed
    wrong = good.clone()
    wrong[3, 5] += 1.0
    assert not error_ratio("ours", wrong, framework, ref, "float16").passed
    nan = good.clone()
    nan[0, 0] = float("nan")
    check = error_ratio("ours", nan, framework, ref, "float16")
    assert not check.passed and math.isinf(check.error)
    assert error_ratio("ours", good, None, ref, "float16").passed
    assert not error_ratio("ours", good + 0.05 * ref.abs().max().item(), None, ref, "float16").passed  # per-dtype tolerance path


def _toy_case(ours_make) -> Case:
    def make_inputs(seed, device):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(33, 17, generator=g), torch.randn(17, 9, generator=g)

    return Case(
        op="gemm",
        suite="toy",
        label="33x9x17",
        shape={"m": 33, "n": 9, "k": 17},
        dtype="float32",
        make_inputs=make_inputs,
        impls=(
            Impl("ours", "ours", ours_make),
            Impl("torch.matmul", "baseline", lambda x: (lambda: torch.matmul(*x))),
            skipped("missing", "baseline", "not installed here"),
        ),
        reference=lambda x: x[0].double() @ x[1].double(),
        flops=2.0 * 33 * 9 * 17,
        bytes=4.0 * (33 * 17 + 17 * 9 + 33 * 9),
    )


QUICK = TimingProtocol(warmup_s=0.0, target_s=0.0, min_reps=3, max_reps=3)


def test_run_case_times_correct_impls_and_makes_records():
    case = _toy_case(lambda x: (lambda: (x[0].double() @ x[1].double()).float()))
    result = run_case(case, "cpu", protocol=QUICK)
    assert result.impls["ours"].status == "measured"
    assert result.impls["torch.matmul"].status == "measured"
    assert result.impls["missing"].status == "skipped"
    recs = records(result)
    kernel = {r.name: r for r in recs if r.kind == "kernel"}
    assert set(kernel) == {"ours", "torch.matmul"}
    r = kernel["ours"]
    assert r.method == "host-timer" and r.repetitions == 3 and r.p20 <= r.median <= r.p80
    assert r.extra["tflops"] == pytest.approx(case.flops / r.median / 1e12)
    assert r.extra["gbps"] == pytest.approx(case.bytes / r.median / 1e9)
    assert "torch.matmul" in r.extra["speedup_vs"]
    assert "roofline_fraction_note" in r.extra  # a CPU has no published ceiling
    assert {x.name for x in recs if x.kind == "correctness"} == {"ours", "torch.matmul"}
    (row,) = rows(result)
    assert row.ours == "ours" and row.baseline == "torch.matmul" and row.speedup > 0


def test_run_case_keeps_going_when_ours_is_wrong_or_crashes():
    wrong = run_case(_toy_case(lambda x: (lambda: torch.matmul(*x) + 1e-2)), "cpu", protocol=QUICK)
    assert wrong.impls["ours"].status == "wrong" and wrong.impls["ours"].stats is None
    assert wrong.impls["torch.matmul"].status == "measured"

    def crash(x):
        def call():
            raise RuntimeError("illegal instruction")

        return call

    crashed = run_case(_toy_case(crash), "cpu", protocol=QUICK)
    assert crashed.impls["ours"].status == "failed" and "illegal instruction" in crashed.impls["ours"].why
    assert crashed.impls["torch.matmul"].status == "measured"


def test_cases_carry_the_documented_counts():
    from ceiling.gemm import shapes

    assert [(c.shape["m"], c.shape["n"], c.shape["k"]) for c in cases_for("gemm", "default", "cpu")] == shapes.SUITES["gemm-llm"]
    gemm = {c.label: c for c in cases_for("gemm", "gemm-llm-wide", "cpu")}
    assert gemm["8192x8192x8192"].flops == 2 * 8192**3
    assert {"16x4096x4096", "128x8192x8192", "4096x11008x4096", "8192x4096x14336", "8192x12288x4096"} <= set(gemm)
    a, b = cases_for("gemm", "tiny", "cpu")[0].make_inputs(0, "cpu")
    assert b.stride(0) == 1  # NT: an nn.Linear weight seen transposed
    att = cases_for("attention", "attention", "cpu")
    seqs = {c.shape["seq"] for c in att}
    assert min(seqs) == 512 and max(seqs) == 16384 and {c.shape["head_dim"] for c in att} == {64, 128}
    by = {(c.shape["seq"], c.shape["head_dim"], c.config["causal"], c.config["direction"]): c for c in att}
    b, h = 16384 // 4096, 2048 // 128
    fwd = by[(4096, 128, False, "fwd")]
    assert fwd.flops == 4 * b * h * 4096**2 * 128
    assert by[(4096, 128, True, "fwd")].flops == fwd.flops / 2
    assert by[(4096, 128, False, "bwd")].flops == 2.5 * fwd.flops
    assert all(c.graphable == (c.config["direction"] == "fwd") for c in att)


def test_attention_reference_matches_sdpa_in_float64():
    case = cases_for("attention", "check", "cpu")[1]  # bwd, odd length
    inputs = case.make_inputs(3, "cpu")
    grads = case.reference(inputs)
    q, k, v, do = (t.detach().double()[:1, :, :2].transpose(1, 2).requires_grad_() for t in inputs)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=case.config["causal"])
    expect = torch.autograd.grad(out, (q, k, v), do.detach())
    for g, e in zip(grads, expect):
        torch.testing.assert_close(g, e.transpose(1, 2))


def test_clock_summary_is_plain_data_with_or_without_nvml():
    from ceiling.microbench.clocks import ClockSampler

    with ClockSampler() as sampler:
        pass
    summary = clock_summary(sampler)
    json.dumps(summary)  # goes into records' extra as is
    if summary["available"]:  # a GPU machine with NVML
        assert summary["clocks_mhz"]["sm"] > 0
    else:
        assert summary["error"] and summary["clocks_mhz"] == {} and summary["throttle_reasons"] == []


def test_datasheet_ceiling_and_roofline_fraction():
    h200 = datasheet("NVIDIA H200", "bfloat16")
    assert h200.flops == 989.4e12 and h200.bandwidth == 4.8e12 and h200.source == "datasheet"
    assert datasheet("NVIDIA H100 PCIe", "bfloat16").bandwidth == 2.0e12
    assert datasheet("cpu: x86_64", "bfloat16") is None
    c = Ceiling(flops=100.0, bandwidth=10.0, source="measured", device="toy")
    assert c.fraction(flops=1000.0, bytes_moved=10.0, seconds=20.0) == pytest.approx(0.5)  # compute-bound
    assert c.fraction(flops=10.0, bytes_moved=1000.0, seconds=200.0) == pytest.approx(0.5)  # memory-bound


def test_converter_takes_our_records_and_refuses_others():
    case = _toy_case(lambda x: (lambda: torch.matmul(*x)))
    rec = next(r for r in records(run_case(case, "cpu", protocol=QUICK)) if r.kind == "kernel")
    doc = {
        "commit_info": {"id": "abc123"},
        "benchmarks": [
            {"fullname": "t[ours]", "group": "g", "stats": {"median": rec.median, "rounds": 3},
             "extra_info": {"record": rec.model_dump(mode="json")}},
            {"fullname": "t[other]", "stats": {"median": 1.0}, "extra_info": {}},
            {"fullname": "t[edited]", "stats": {"median": rec.median * 2}, "extra_info": {"record": rec.model_dump(mode="json")}},
        ],
    }
    got, refused = convert(doc)
    assert len(got) == 1 and got[0].median == rec.median and got[0].extra["pytest"]["group"] == "g"
    assert [name for name, _ in refused] == ["t[other]", "t[edited]"]


def test_pytest_benchmark_json_round_trip(tmp_path):
    """The benchmark file, timed (on the CPU), to --benchmark-json, to records."""
    out = tmp_path / "pb.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/bench/test_bench_attention.py", "-q", "-p", "no:cacheprovider",
         "--benchmark-enable", f"--benchmark-json={out}"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        # A clean pytest, not an xdist worker's child (a worker leaves writing the JSON to its controller).
        env={k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    got, refused = convert(doc)
    assert not refused and got
    for bench in doc["benchmarks"]:
        info = bench["extra_info"]
        assert {"tflops", "gbps", "p20", "p80", "median", "method"} <= set(info)
        assert bench["group"].startswith("attention-") and bench["stats"]["median"] == pytest.approx(info["median"])
    assert all(isinstance(r, Record) and r.kind == "kernel" for r in got)


def test_ceiling_bench_tiny_on_cpu(tmp_path):
    result = CliRunner().invoke(app, ["bench", "gemm", "--shapes", "tiny", "--device", "cpu", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    outcome = json.loads(result.stdout[result.stdout.index("{"):])
    assert outcome["cases_run"] == 2 and outcome["rows"]
    assert all(r["baseline"] == "torch.matmul" and r["baseline_s"] > 0 for r in outcome["rows"])
    stored = load(tmp_path / "records")
    assert {r.kind for r in stored} == {"kernel", "correctness"}
    assert len((tmp_path / "bench.jsonl").read_text().splitlines()) == len(stored)
    assert (tmp_path / "bench-rows.json").exists()


def test_ceiling_bench_rejects_unknown_op():
    result = CliRunner().invoke(app, ["bench", "conv3d"])
    assert result.exit_code == 2 and "conv3d" in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the refusal cannot be seen here")
def test_device_check_refuses_without_a_gpu(tmp_path):
    result = CliRunner().invoke(app, ["device-check", "--out", str(tmp_path / "dc")])
    assert result.exit_code == 2
    assert "refuses to run" in result.output and "no GPU" in result.output
    assert not (tmp_path / "dc").exists()


MICROBENCH_STANDIN = """
import sys
from ceiling.microbench.records import Record, append, host_provenance
append(sys.argv[1], [Record(kind="microbench", op="hbm-bandwidth", name="copy", metric="bandwidth", value=1.0e12,
                            unit="B/s", provenance=host_provenance())])
"""


@pytest.mark.slow  # about 60 s of interpreted benchmarks (CI's budget); scripts/h200_check.sh is checked in test_h200_check.py
def test_device_check_end_to_end_with_the_gpu_gate_lifted(tmp_path, monkeypatch):
    """The command's orchestration on tiny CPU parts: processes, merge, table, notes, exit code.

    Each part's time budget is far beyond what its work takes even on a loaded machine, so no
    part stops starting cases and the output cannot depend on how fast the machine is; the
    budget arithmetic itself is checked on a fake clock below.
    """
    from ceiling.roofline.commands import device_check as dc

    cli = ("-m", "ceiling.roofline.cli", "bench", "--shapes", "tiny", "--device", "cpu", "attention")
    hour = 3600.0
    parts = [
        dc.Part("correctness", hour, (*cli, "--check-only")),
        dc.Part("attention", hour, cli),
        dc.Part("broken", hour, ("-c", "raise SystemExit(7)"), bench=False),
        dc.Part("microbench", hour, ("-c", MICROBENCH_STANDIN, str(tmp_path / "out" / "microbench")), bench=False),
    ]
    monkeypatch.setattr(dc, "gpu_refusal", lambda: None)
    monkeypatch.setattr(dc, "_environment", lambda out: {"gpu": "CPU stand-in", "capability": "-", "backends": []})
    monkeypatch.setattr(dc, "plan", lambda out, ops, microbench=True: parts)
    result = CliRunner().invoke(app, ["device-check", "--out", str(tmp_path / "out"), "--budget-s", str(5 * hour)])
    assert result.exit_code == 1, result.output  # the broken part makes the check fail, after everything ran
    out = tmp_path / "out"
    text = result.output
    assert "correctness: ok" in text and "attention: ok" in text and "broken: exit 7" in text
    assert "not run (time budget spent)" not in text
    lines = text.rstrip().splitlines()
    table_end = max(i for i, line in enumerate(lines) if line.startswith("└"))
    assert table_end > max(i for i, line in enumerate(lines) if "broken: exit 7" in line)  # statuses, then the table
    notes = lines[table_end + 1:]  # the table's notes come last: one line per skipped baseline
    assert notes and all(line.startswith(("correctness:", "skipped")) for line in notes), notes
    assert notes[-1].startswith("skipped")
    assert "sdpa (speedup)" in text
    stored = load(out / "records")
    assert {r.kind for r in stored} == {"kernel", "correctness", "microbench"}
    assert len((out / "records.jsonl").read_text().splitlines()) == len(stored)
    assert "done in" in (out / "device-check.log").read_text()


def test_device_check_budget_slices_carry_over_and_run_out(tmp_path, monkeypatch):
    """``run_parts`` on a fake clock: each part gets its share plus what the ones before left, a bench
    part is told to stop 25 s early, and a part with under 15 s left is not started."""
    from ceiling.roofline.commands import device_check as dc

    clock = [1000.0]
    took = {"a": 20.0, "b": 150.0, "c": 0.0, "d": 0.0}  # seconds each part's process runs
    started = []

    def fake_run(argv, **kw):
        name = Path(kw["stdout"].name).stem
        started.append((name, argv))
        clock[0] += took[name]
        return subprocess.CompletedProcess(argv, 7 if name == "b" else 0)

    monkeypatch.setattr(dc.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(dc.subprocess, "run", fake_run)
    parts = [dc.Part("a", 60, ("x",)), dc.Part("b", 60, ("x",)), dc.Part("c", 60, ("x",), bench=False),
             dc.Part("d", 60, ("x",))]
    merged, statuses, clean = dc.run_parts(parts, tmp_path, 180.0, lambda msg: None)
    budgets = {name: float(argv[argv.index("--budget-s") + 1]) for name, argv in started if "--budget-s" in argv}
    assert budgets == {"a": 35.0, "b": 75.0}  # a: 60 - 25; b: its 60 + a's unused 40, less 25
    assert [name for name, _ in started] == ["a", "b"]  # 180 - 20 - 150 leaves 10 s: too little for c or d
    assert statuses[0] == "a: ok (20s)" and statuses[1].startswith("b: exit 7")
    assert statuses[2:] == ["c: not run (time budget spent)", "d: not run (time budget spent)"]
    assert not clean


class _FakeEvent:
    clock = [0.0]

    def __init__(self, enable_timing=False):
        self.t = None

    def record(self, stream=None):
        _FakeEvent.clock[0] += 1e-3  # each recorded event is 1 ms after the previous one
        self.t = _FakeEvent.clock[0]

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3  # milliseconds, like CUDA events


class _FakeGraph:
    def __init__(self):
        self.calls = None

    def replay(self):
        for call in self.calls:
            call()


class _FakeCapture:
    """Records the calls made while 'capturing' so the graph can replay them."""

    active: list = []

    def __init__(self, graph, **kw):
        self.graph = graph

    def __enter__(self):
        _FakeCapture.active.append([])
        return self

    def __exit__(self, *exc):
        self.graph.calls = _FakeCapture.active.pop()


@pytest.fixture
def fake_cuda(monkeypatch):
    """Enough of torch.cuda's API to drive the GPU code paths' control flow on a CPU."""
    import contextlib
    from types import SimpleNamespace

    cuda = torch.cuda
    monkeypatch.setattr(cuda, "Event", _FakeEvent)
    monkeypatch.setattr(cuda, "CUDAGraph", _FakeGraph)
    monkeypatch.setattr(cuda, "graph", _FakeCapture)
    monkeypatch.setattr(cuda, "Stream", lambda *a, **k: SimpleNamespace(wait_stream=lambda s: None))
    monkeypatch.setattr(cuda, "current_stream", lambda *a: SimpleNamespace(wait_stream=lambda s: None))
    monkeypatch.setattr(cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(cuda, "_sleep", lambda cycles: None)
    monkeypatch.setattr(cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(cuda, "mem_get_info", lambda *a: (100 * 2**30, 141 * 2**30))
    monkeypatch.setattr(cuda, "get_device_properties", lambda *a: SimpleNamespace(L2_cache_size=60 * 2**20))
    monkeypatch.setattr(cuda, "get_device_name", lambda *a: "NVIDIA H200")
    monkeypatch.setattr(cuda, "device_count", lambda: 1)
    return cuda


def test_gpu_timers_control_flow_on_a_fake_cuda(fake_cuda):
    from ceiling.microbench.timing import EventTimer, GraphTimer

    ran: list[str] = []

    def call(name):
        def run():
            if _FakeCapture.active:
                _FakeCapture.active[-1].append(run)
            ran.append(name)

        return run

    proto = TimingProtocol(warmup_s=0.0, target_s=0.0, min_reps=4, max_reps=4)
    stats = measure({"a": [call("a"), call("a")], "b": [call("b"), call("b")]}, timers=[GraphTimer(), EventTimer()], protocol=proto)
    assert stats["a"].method == "cuda-graph" and stats["a"].calls_per_sample == 8
    assert stats["a"].repetitions == 4 and stats["a"].median == pytest.approx(1e-3 / 8)

    class Uncapturable(Exception):
        pass

    def sync_inside():
        if _FakeCapture.active:
            raise Uncapturable("operation not permitted when stream is capturing")

    stats = measure({"a": [sync_inside], "b": [call("b")]}, timers=[GraphTimer(), EventTimer()], protocol=proto)
    assert {s.method for s in stats.values()} == {"cuda-events"}
    assert "cuda-graph failed (Uncapturable" in stats["a"].notes[0]
    assert stats["a"].median == pytest.approx(1e-3)


def test_run_case_gpu_path_on_a_fake_cuda(fake_cuda):
    # Inputs stay on the CPU; everything else takes the GPU branches (rotation, graphs, records).
    base = _toy_case(lambda x: (lambda: (x[0].double() @ x[1].double()).float()))
    case = Case(**{**base.__dict__, "dtype": "bfloat16", "make_inputs": lambda seed, dev: base.make_inputs(seed, "cpu")})
    result = run_case(case, "cuda", protocol=TimingProtocol(warmup_s=0.0, target_s=0.0, min_reps=3, max_reps=3))
    assert result.impls["ours"].status == "measured", result.impls["ours"].why
    assert result.l2_bytes == 60 * 2**20
    assert result.rotation_sets == 64  # tiny sets: as many as allowed
    assert result.impls["ours"].stats.method == "cuda-graph"
    recs = [r for r in records(result) if r.kind == "kernel"]
    assert recs[0].provenance.device == "NVIDIA H200"
    assert "roofline_fraction_datasheet" in recs[0].extra


def test_triangle_adapter_builds_a_checked_case_from_plain_data():
    """``ceiling.triangle.bench`` cases (plain data) become harness cases with a one-precision-up oracle."""
    from types import SimpleNamespace

    from ceiling.microbench.benchmarks.triangle import adapt

    def make_inputs(seed, device):
        g = torch.Generator().manual_seed(seed)
        return {"x": torch.randn(2, 5, 5, 8, generator=g), "mask": torch.rand(2, 5, 5, generator=g) > 0.2}

    def eager(i):
        return lambda: torch.einsum("bikc,bjkc->bijc", i["x"] * i["mask"][..., None], i["x"])

    def ours(i):
        return lambda: torch.einsum("bikc,bjkc->bijc", i["x"] * i["mask"][..., None], i["x"]).to(i["x"].dtype)

    tc = SimpleNamespace(
        op="triangle_multiplicative_update", label="b2-n5-c8-outgoing", shape={"batch": 2, "n": 5, "c_z": 8, "c": 8},
        dtype="float32", direction="fwd", make_inputs=make_inputs, flops=2.0 * 2 * 5**3 * 8, config={"triangle": "outgoing"},
        impls=(SimpleNamespace(name="ceiling:nvidia", role="ours", make=ours, skip=None),
               SimpleNamespace(name="torch-eager", role="baseline", make=eager, skip=None),
               SimpleNamespace(name="cuequivariance", role="baseline", make=None, skip="not installed")),
    )
    case = adapt(tc, "tiny")
    assert case.group == "triangle_multiplicative_update-b2-n5-c8-outgoing-float32-fwd"
    assert case.reference(case.make_inputs(0, "cpu")).dtype == torch.float64
    assert case.bytes == 2 * 2 * 5 * 5 * 8 * 4 and case.graphable
    result = run_case(case, "cpu", protocol=QUICK)
    assert result.impls["ceiling:nvidia"].status == "measured" and result.impls["ceiling:nvidia"].check.passed
    assert result.impls["ceiling:nvidia"].impl.backend == "nvidia"
    assert result.impls["cuequivariance"].status == "skipped"
