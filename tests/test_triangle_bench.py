"""pytest-benchmark runs of the triangle ops against their baselines.

On an NVIDIA GPU: AlphaFold 3 widths (N = 384 and 768, c_z = 128, 4 heads of 32,
B = 1, bf16), ours against PyTorch eager, torch.compile and cuEquivariance (when
installed), forward and backward, with the peak memory above the inputs in
``extra_info``. On a CPU: the tiny suite, once each under the interpreter (with
``--benchmark-disable``, as CI runs it), a smoke test and never a timing.

    pytest tests/test_triangle_bench.py --benchmark-only --benchmark-group-by=param:case
"""

from __future__ import annotations

import pytest
import torch

from kernels.triangle.bench import bench_cases

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
CASES = bench_cases("device" if ON_GPU else "tiny", DEVICE)
PARAMS = [
    pytest.param(case, impl, id=f"{case.op}-{case.label}-{case.direction}-{impl.name}")
    for case in CASES
    for impl in case.impls
]


@pytest.mark.parametrize("case,impl", PARAMS)
def test_triangle_benchmark(benchmark, case, impl):
    if impl.make is None:
        pytest.skip(impl.skip)
    inputs = case.make_inputs(0, DEVICE)
    thunk = impl.make(inputs)
    benchmark.group = f"{case.op}-{case.label}-{case.direction}"
    benchmark.extra_info.update({"op": case.op, "impl": impl.name, "direction": case.direction, **case.shape,
                                 "dtype": case.dtype, "flops": case.flops})
    if ON_GPU:
        thunk()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        thunk()
        torch.cuda.synchronize()
        benchmark.extra_info["peak_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20

        def run():
            thunk()
            torch.cuda.synchronize()

        benchmark.pedantic(run, rounds=20, iterations=3, warmup_rounds=2)
    else:
        benchmark.pedantic(thunk, rounds=1, iterations=1)
