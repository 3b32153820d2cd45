"""The FP8 GEMM against torch._scaled_mm (cuBLASLt) and dequantize-then-bf16-cuBLAS: ``pytest tests/bench
--benchmark`` on a GPU. Without ``--benchmark`` a smoke test: the tiny shape on the CPU, every scaling,
our kernels interpreted against the float64 oracle. The cases live in ``ceiling.microbench.benchmarks.scaled_gemm``.
"""

OP = "scaled_gemm"


def test_scaled_gemm(benchmark, bench_case, bench_impl, bench_run):
    bench_run(benchmark, bench_case, bench_impl)
