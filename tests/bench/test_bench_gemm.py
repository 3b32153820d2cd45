"""GEMM against torch.matmul (cuBLAS / hipBLASLt): ``pytest tests/bench --benchmark`` on a GPU.

Without ``--benchmark`` this file is a smoke test: the tiny shapes on the CPU,
our kernels interpreted, outputs checked, pytest-benchmark's timing disabled.
The cases live in ``ceiling.microbench.benchmarks.gemm``.
"""

OP = "gemm"


def test_gemm(benchmark, bench_case, bench_impl, bench_run):
    bench_run(benchmark, bench_case, bench_impl)
