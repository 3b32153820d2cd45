"""The GPU suites' host-side code, end to end, on a CPU.

The device is replaced by a recording double of the few CuPy calls the suites
make (``tests/cuda_standins.py``): launches check their argument count and
types against the kernel signatures in the CUDA sources and write
deterministic values into the output buffers. What this proves is the
plumbing (argument order, buffer sizes, record construction, the self-check's
reading of the records); the numbers themselves come only from the H200 run.
"""

import pytest

from ceiling.microbench import selfcheck
from ceiling.microbench.suites import SuiteContext, get

from .cuda_standins import SIGS, install_cupy


@pytest.fixture
def fake_gpu(monkeypatch):
    return install_cupy(monkeypatch).launches


@pytest.mark.parametrize("suite", ["bank-conflicts", "occupancy", "clocks", "ceilings"])
def test_gpu_suite_plumbing(fake_gpu, suite):
    records = get(suite).run(SuiteContext(quick=True))
    assert records and fake_gpu
    assert not [r for r in records if r.op == "suite-error"], [r.extra for r in records if r.op == "suite-error"]
    for r in records:
        assert r.kind == "microbench" and r.provenance.device.startswith("NVIDIA H200")
        assert r.provenance.runtime.startswith("cupy ")
    if suite == "ceilings":
        assert {r.op for r in records} >= {"hbm-bandwidth", "l2-bandwidth", "smem-bandwidth", "fp32-fma",
                                           "tensor-core", "latency"}
    names = [name for name, _, _, _ in fake_gpu]
    assert set(names) <= set(SIGS)
    results = selfcheck.checks(records)
    assert results and all(isinstance(ok, bool) for _, ok, _ in results)
