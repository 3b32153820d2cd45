"""The GPU suites' host-side code, end to end, on a CPU.

The device is replaced by a recording double of the few CuPy calls the suites
make: launches check their argument count and types against the kernel
signatures in the CUDA sources and write deterministic values into the
output buffers. What this proves is the plumbing (argument order, buffer
sizes, record construction, the self-check's reading of the records); the
numbers themselves come only from the H200 run.
"""

import re
import sys
import types

import numpy as np
import pytest

from microbench import build, gpu, selfcheck
from microbench.suites import SuiteContext, get


class FakeArray(np.ndarray):
    def get(self):
        return np.asarray(self).copy()

    def set(self, host):
        self[...] = host

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)


def _arr(a):
    return np.asarray(a).view(FakeArray)


def _signatures():
    """kernel name -> list of C parameter types, read from the sources."""
    sigs = {}
    for src in build.cuda_sources():
        text = src.read_text()
        for m in re.finditer(r"__global__\s+void\s+(?:__launch_bounds__\(\d+\)\s+)?(\w+)\s*\(([^)]*)\)", text):
            params = [p.strip().rsplit(" ", 1)[0] for p in m.group(2).split(",")]
            sigs[m.group(1)] = params
    return sigs


SIGS = _signatures()
_C_TO_NP = {"int": np.int32, "u32": np.uint32, "u64": np.uint64, "float": np.float32}


class FakeKernel:
    def __init__(self, name, launches):
        self.name, self.launches = name, launches
        self.num_regs, self.shared_size_bytes, self.max_dynamic_shared_size_bytes = 40, 0, 48 * 1024
        self.kernel = types.SimpleNamespace(ptr=id(self))

    def __call__(self, grid, block, args, shared_mem=0):
        params = SIGS[self.name]
        assert len(args) == len(params), f"{self.name}: {len(args)} args for {params}"
        for arg, ctype in zip(args, params):
            if "*" in ctype:
                assert isinstance(arg, FakeArray), f"{self.name}: {ctype} needs a device array"
            else:
                assert isinstance(arg, _C_TO_NP[ctype]), f"{self.name}: {ctype} got {type(arg)}"
        assert 1 <= block[0] <= 1024 and grid[0] >= 1
        self.launches.append((self.name, grid[0], block[0], shared_mem))
        rng = np.random.default_rng(len(self.launches))
        outputs = [a for a, t in zip(args, params) if "*" in t and "const" not in t]
        for out in outputs:
            if out.dtype == np.uint64:
                out[...] = rng.integers(1_000, 2_000, size=out.shape)
            elif out.dtype == np.uint32:
                out[...] = np.arange(out.size) % 7


class FakeModule:
    def __init__(self, launches):
        self.launches = launches

    def get_function(self, name):
        assert name in SIGS, f"no kernel {name} in the sources"
        return FakeKernel(name, self.launches)


@pytest.fixture
def fake_gpu(monkeypatch):
    launches = []
    clock = {"t": 0.0}

    class Event:
        def record(self):
            clock["t"] += 1e-3
            self.t = clock["t"]

        def synchronize(self):
            pass

    cp = types.ModuleType("cupy")
    cp.zeros = lambda n, dtype=np.float32: _arr(np.zeros(n, dtype))
    cp.ones = lambda n, dtype=np.float32: _arr(np.ones(n, dtype))
    cp.empty_like = lambda a: _arr(np.empty_like(a))
    cp.asarray = lambda a, dtype=None: _arr(np.asarray(a, dtype))
    for name in ("int32", "uint32", "uint64", "float32", "uint8"):
        setattr(cp, name, getattr(np, name))
    cp.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None)
    runtime = types.SimpleNamespace(deviceSynchronize=lambda: None, driverGetVersion=lambda: 13000)
    driver = types.ModuleType("cupy.cuda.driver")
    driver.occupancyMaxActiveBlocksPerMultiprocessor = lambda ptr, threads, dyn: 1
    cp.cuda = types.SimpleNamespace(runtime=runtime, Event=Event, driver=driver,
                                    get_elapsed_time=lambda a, b: 1.0)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cp.cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.driver", driver)
    dev = gpu.CudaDevice(0, "NVIDIA H200 (test double)", 9, 0, 4, 233472, 232448, 50 << 20, 1980000, 141 << 30)
    monkeypatch.setattr(gpu, "cuda_device", lambda index=0: dev)
    monkeypatch.setattr(gpu, "load_module", lambda source, arch, defines=(), extra=(): FakeModule(launches))
    return launches


@pytest.mark.parametrize("suite", ["bank-conflicts", "occupancy", "clocks", "ceilings"])
def test_gpu_suite_plumbing(fake_gpu, suite):
    records = get(suite).run(SuiteContext(quick=True))
    assert records and fake_gpu
    assert not [r for r in records if r.op == "suite-error"], [r.extra for r in records if r.op == "suite-error"]
    for r in records:
        assert r.kind == "microbench" and r.provenance.device.startswith("NVIDIA H200")
    if suite == "ceilings":
        assert {r.op for r in records} >= {"hbm-bandwidth", "l2-bandwidth", "smem-bandwidth", "fp32-fma",
                                           "tensor-core", "latency"}
    names = [name for name, _, _, _ in fake_gpu]
    assert set(names) <= set(SIGS)
    results = selfcheck.checks(records)
    assert results and all(isinstance(ok, bool) for _, ok, _ in results)
