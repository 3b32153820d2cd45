"""AlphaFold-3 triangle attention against its eager PyTorch model code, torch.compile and cuEquivariance.

``pytest tests/bench --benchmark`` on a GPU; without ``--benchmark`` a smoke test on
the tiny suite on the CPU. The cases come from ``ceiling.triangle.bench`` through
``ceiling.microbench.benchmarks.triangle``; the file is skipped, with the reason, where
that does not exist.
"""

OP = "triangle_attention"


def test_attention(benchmark, bench_case, bench_impl, bench_run):
    bench_run(benchmark, bench_case, bench_impl)
