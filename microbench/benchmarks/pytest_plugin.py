"""pytest integration of the benchmark cases: ``pytest --benchmark`` on a GPU, smoke tests elsewhere.

A benchmark file declares its op and one test::

    OP = "gemm"

    def test_gemm(benchmark, bench_case, bench_impl, bench_run):
        bench_run(benchmark, bench_case, bench_impl)

and is parametrized here with one test per (shape, implementation), all the
implementations of a shape in one pytest-benchmark group.

* ``pytest --benchmark`` (on a GPU): the op's full shape suite (or
  ``--benchmark-shapes``). The first test of a group checks and times every
  implementation of that shape together (interleaved, rotated inputs, device
  timing, see :mod:`ceiling.microbench.timing`); each test then hands its own per-call
  times to pytest-benchmark, so ``--benchmark-json`` holds the device times,
  with TFLOP/s, GB/s, the roofline fractions, p20/p80 and the full record in
  ``extra_info`` (:mod:`ceiling.microbench.benchmarks.pytest_json` turns that file into records).
* Without ``--benchmark`` (CI): the same files on the ``tiny`` suite on the CPU,
  our Triton kernels under the interpreter, pytest-benchmark's timing disabled.
  Outputs are still checked against the oracle and the harness still runs, so
  the files cannot rot.
"""

from __future__ import annotations

from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ceiling benchmarks")
    group.addoption(
        "--benchmark",
        action="store_true",
        default=False,
        help="Run the benchmark files at full size on the GPU (without it they are CPU smoke tests).",
    )
    group.addoption(
        "--benchmark-shapes",
        default=None,
        help="Shape suite for --benchmark: default, device, check, or an op's own (gemm-llm, attention...).",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Before pytest-benchmark reads its options: smoke runs must not time anything.
    if not config.getoption("benchmark", default=False) and hasattr(config.option, "benchmark_disable"):
        config.option.benchmark_disable = True


def _gpu_reason() -> str | None:
    try:
        import torch
    except ImportError as exc:
        return f"PyTorch is not installed ({exc})"
    if not torch.cuda.is_available():
        return f"--benchmark needs a GPU; PyTorch {torch.__version__} sees none"
    return None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "bench_case" not in metafunc.fixturenames:
        return
    from ceiling.microbench.benchmarks import cases_for

    op = getattr(metafunc.module, "OP")
    full = metafunc.config.getoption("benchmark")
    if full and (why := _gpu_reason()):
        metafunc.parametrize(("bench_case", "bench_impl"), [pytest.param(None, None, marks=pytest.mark.skip(reason=why))])
        return
    suite = (metafunc.config.getoption("benchmark_shapes") or "default") if full else "tiny"
    device = "cuda" if full else "cpu"
    from ceiling.microbench.benchmarks import has_suite, unavailable

    why = unavailable(op) or (None if has_suite(op, suite) else f"{op} has no shape suite {suite!r}")
    if why:
        metafunc.parametrize(("bench_case", "bench_impl"), [pytest.param(None, None, marks=pytest.mark.skip(reason=why))])
        return
    params = [
        pytest.param(case, impl.name, id=f"{case.group}-{impl.name}")
        for case in cases_for(op, suite, device)
        for impl in case.impls
    ]
    metafunc.parametrize(("bench_case", "bench_impl"), params)


class _Session:
    """Per-session state: results by group (measured once for all its tests), ceilings."""

    def __init__(self, full: bool):
        from ceiling.microbench.timing import TimingProtocol

        self.full = full
        self.device = "cuda" if full else "cpu"
        self.protocol = TimingProtocol() if full else TimingProtocol(warmup_s=0.001, target_s=0.005, min_reps=3, max_reps=5)
        self.results: dict[str, Any] = {}
        self._measured: dict | None = None

    def measured(self) -> dict:
        if self._measured is None:
            self._measured = {}
            if self.full:
                from ceiling.microbench.benchmarks.runner import measure_ceilings

                try:
                    self._measured, _ = measure_ceilings(self.device)
                except Exception as exc:  # noqa: BLE001 - the datasheet fractions remain
                    import warnings

                    warnings.warn(f"measuring the ceilings failed ({exc}); roofline fractions use the datasheet only")
        return self._measured

    def result(self, case):
        if case.group not in self.results:
            from ceiling.microbench.benchmarks.runner import run_case

            self.results[case.group] = run_case(case, self.device, protocol=self.protocol)
        return self.results[case.group]


def replay_times(benchmark, times) -> None:
    """Hand per-call times measured by our harness to pytest-benchmark as its rounds.

    pytest-benchmark times ``target`` with its timer; here the timer is a clock
    that only the target advances, by one measured time per round, so its
    statistics are exactly those of the device measurement.
    """
    now = [0.0]
    pending = iter(times)

    def device_clock() -> float:
        return now[0]

    def one_call() -> None:
        now[0] += next(pending)

    benchmark._timer = device_clock  # the fixture's timer; pedantic() binds it when each round starts
    benchmark.pedantic(one_call, rounds=len(times), iterations=1, warmup_rounds=0)


@pytest.fixture(scope="session")
def _bench_session(request: pytest.FixtureRequest) -> _Session:
    return _Session(bool(request.config.getoption("benchmark")))


@pytest.fixture
def bench_run(_bench_session: _Session):
    """``bench_run(benchmark, case, impl_name)``: check, time (once per group) and report one implementation."""

    def run(benchmark, case, impl_name: str) -> None:
        from ceiling.microbench.benchmarks.runner import records

        session = _bench_session
        result = session.result(case)
        r = result.impls[impl_name]
        if r.impl.skip:
            pytest.skip(f"{impl_name}: {r.impl.skip}")
        if r.error:
            pytest.fail(f"{impl_name} failed on {case.group}: {r.error}")
        if r.check is not None and not r.check.passed and r.impl.role == "ours":
            pytest.fail(f"{impl_name} is wrong on {case.group}: {r.why}")
        assert r.stats is not None and r.stats.repetitions > 0, f"{impl_name} was not timed on {case.group}"
        benchmark.group = case.group
        mine = [x for x in records(result, measured=session.measured()) if x.name == impl_name and x.kind == "kernel"]
        if mine:
            rec = mine[0]
            info = {
                k: rec.extra.get(k)
                for k in ("tflops", "gbps", "roofline_fraction_datasheet", "roofline_fraction_measured", "role", "library")
                if rec.extra.get(k) is not None
            }
            info.update(op=case.op, impl=impl_name, method=rec.method, p20=rec.p20, p80=rec.p80, median=rec.median)
            info["record"] = rec.model_dump(mode="json")
            benchmark.extra_info.update(info)
        # Disabled (smoke) runs call the target once and keep no statistics.
        replay_times(benchmark, r.stats.times)

    return run


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    try:
        import torch

        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            machine_info["gpu"] = {
                "name": p.name,
                "capability": f"{p.major}.{p.minor}",
                "multiprocessors": p.multi_processor_count,
                "memory_bytes": p.total_memory,
                "cuda": torch.version.cuda,
                "hip": getattr(torch.version, "hip", None),
                "torch": torch.__version__,
            }
    except Exception:  # noqa: BLE001 - machine info is a courtesy
        pass
