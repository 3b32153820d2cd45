"""Attention fwd and bwd against SDPA and FlashAttention: ``pytest tests/bench --benchmark`` on a GPU.

Without ``--benchmark`` this file is a smoke test on tiny shapes on the CPU.
The cases live in ``ceiling.microbench.benchmarks.attention``.
"""

OP = "attention"


def test_attention(benchmark, bench_case, bench_impl, bench_run):
    bench_run(benchmark, bench_case, bench_impl)
