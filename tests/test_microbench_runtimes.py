"""The GPU runtime layer: every GPU suite's host code through the PyCUDA stand-in, the same
launches and records as through the CuPy stand-in, runtime selection and its reasons, the CLI
option, PyCUDA buffers and the occupancy twin (cuda.bindings and ctypes)."""

import ctypes
import json
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from ceiling.microbench import runner, runtimes, selfcheck
from ceiling.microbench.runtimes import driver_occupancy
from ceiling.microbench.suites import SuiteContext, get
from ceiling.microbench.suites import occupancy as occ_suite
from ceiling.roofline.cli import app

from .cuda_standins import DEVICE, LAUNCH_S, SIGS, install_cupy, install_pycuda

GPU_SUITES = ["bank-conflicts", "occupancy", "clocks", "ceilings"]


def _no_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # "import cupy" raises ImportError


def _no_pycuda(monkeypatch):
    monkeypatch.setitem(sys.modules, "pycuda", None)
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)


@pytest.fixture
def pycuda_only(monkeypatch):
    _no_cupy(monkeypatch)
    return install_pycuda(monkeypatch)


@pytest.mark.parametrize("suite", GPU_SUITES)
def test_gpu_suite_plumbing_on_pycuda(pycuda_only, suite):
    device = pycuda_only
    records = get(suite).run(SuiteContext(quick=True, runtime="auto"))  # auto falls back to PyCUDA
    assert records and device.launches
    assert not [r for r in records if r.op == "suite-error"], [r.extra for r in records if r.op == "suite-error"]
    for r in records:
        assert r.kind == "microbench" and r.provenance.device == DEVICE.name
        assert r.provenance.runtime == "pycuda 2026.1"
    assert {name for name, _, _, _ in device.launches} <= set(SIGS)
    assert device.state.cubins and all(c[:4] == b"\x7fELF" for c in device.state.cubins)  # real NVRTC cubins
    assert device.state.context_stack  # the primary context is current
    if suite == "occupancy":
        queries = sys.modules["cuda.bindings.driver"].queries
        api = next(r for r in records if r.name == "api-agreement")
        assert len(queries) >= api.repetitions >= 1000
        assert not [m for m in api.extra["mismatches"] if str(m["api"]).startswith("error")]
        assert any(dyn > 48 * 1024 for _, _, dyn in queries)  # the opt-in reached the twin too
        assert any(shared > 48 * 1024 for _, _, _, shared in device.launches)  # and the launches
    results = selfcheck.checks(records)
    assert results and all(isinstance(ok, bool) for _, ok, _ in results)


def _run_on(install, monkeypatch, suite):
    device = install(monkeypatch)
    seeded = occ_suite.random_configs
    monkeypatch.setattr(occ_suite, "random_configs", lambda n, max_dynamic, seed=None: seeded(n, max_dynamic, 7))
    rt = runtimes.select_runtime("cupy" if install is install_cupy else "pycuda")
    assert rt.reason is None, rt.reason
    records = get(suite).run(SuiteContext(quick=True, runtime=rt.name))
    return device.launches, [r.model_dump(exclude={"provenance"}) for r in records], records


@pytest.mark.parametrize("suite", GPU_SUITES)
def test_both_runtimes_make_the_same_launches_and_records(monkeypatch, suite):
    with monkeypatch.context() as m:
        cupy_launches, cupy_records, cupy_full = _run_on(install_cupy, m, suite)
    with monkeypatch.context() as m:
        pycuda_launches, pycuda_records, pycuda_full = _run_on(install_pycuda, m, suite)
    assert cupy_launches == pycuda_launches
    assert cupy_records == pycuda_records
    assert {r.provenance.runtime for r in cupy_full} == {"cupy 14.0.0 (test double)"}
    assert {r.provenance.runtime for r in pycuda_full} == {"pycuda 2026.1"}


def test_select_runtime_prefers_cupy_and_explains_when_neither_works(monkeypatch):
    with monkeypatch.context() as m:  # a machine with a GPU but neither library
        _no_cupy(m)
        _no_pycuda(m)
        m.setattr(runtimes, "no_gpu_reason", lambda: None)
        choice = runtimes.select_runtime()
        assert choice.name is None
        assert "cupy: CuPy is not importable" in choice.reason and "pycuda: PyCUDA is not importable" in choice.reason
        only = runtimes.select_runtime("pycuda")
        assert only.name is None and only.reason.startswith("PyCUDA is not importable")
        with pytest.raises(RuntimeError, match="PyCUDA"):
            only.runtime()
        ctx = SuiteContext(quick=True, runtime="pycuda")
        for suite in GPU_SUITES:
            assert get(suite).check(ctx).startswith("PyCUDA is not importable")
    with monkeypatch.context() as m:
        install_cupy(m)
        install_pycuda(m)
        assert runtimes.select_runtime().name == "cupy"
        assert runtimes.select_runtime("PyCUDA").name == "pycuda"
        assert isinstance(runtimes.select_runtime("pycuda").runtime(), runtimes.pycuda_runtime.PycudaRuntime)
    with pytest.raises(ValueError, match="runtime"):
        runtimes.select_runtime("opencl")


def test_without_a_gpu_the_reason_is_the_missing_gpu_not_a_library(monkeypatch, tmp_path):
    """No NVIDIA driver or GPU: every GPU suite says so (not "install cupy-cuda13x"), whole, in the table."""
    _no_cupy(monkeypatch)
    _no_pycuda(monkeypatch)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML either: the driver's files decide
    monkeypatch.setattr(runtimes, "Path", lambda p: tmp_path / "no-such-driver")
    reason = runtimes.select_runtime().reason
    assert reason.startswith("no NVIDIA GPU on this machine") and "install" not in reason
    ctx = SuiteContext(quick=True)
    assert all(get(suite).check(ctx) == reason for suite in GPU_SUITES)
    result = CliRunner().invoke(app, ["microbench", "clocks", "--out", str(tmp_path / "mb")], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "clocks: unavailable" in result.output and "cupy" not in result.output.lower()
    table = result.output[result.output.index("microbench ("):]
    assert "no NVIDIA GPU on this machine" in table and "…" not in table
    result = CliRunner().invoke(app, ["microbench", "clocks", "--json", "--out", str(tmp_path / "mb")])
    doc = json.loads(result.stdout[result.stdout.index("{"):])
    assert doc["suites"] == [{"suite": "clocks", "status": "unavailable", "records": 0, "seconds": 0.0,
                              "reason": reason}]


def test_runner_and_cli_pass_the_runtime(pycuda_only, tmp_path):
    outcomes = runner.run(["clocks"], tmp_path, device=0, quick=True, runtime="pycuda", isolate=False)
    assert outcomes[0].status == "ok", outcomes[0].reason
    assert {r.provenance.runtime for r in outcomes[0].records} == {"pycuda 2026.1"}
    with pytest.raises(ValueError, match="runtime"):
        runner.run(["clocks"], None, runtime="metal")
    ok = CliRunner().invoke(app, ["microbench", "clocks", "--runtime", "pycuda", "--device", "cpu", "--out", str(tmp_path)])
    assert ok.exit_code == 0, ok.output
    bad = CliRunner().invoke(app, ["microbench", "clocks", "--runtime", "metal", "--out", str(tmp_path)])
    assert bad.exit_code != 0 and "runtime" in bad.output


def test_isolated_suite_gets_the_runtime():
    # the child process has no stand-in: it gives the reason the parent would for that runtime (on a
    # machine without a GPU, that there is none), and a runtime that does not exist fails in the child
    expected = runtimes.select_runtime("pycuda").reason
    if expected is not None:  # this machine's PyCUDA cannot run here: the child must say so, in the same words
        status, reason, _ = runner._run_isolated("clocks", SuiteContext(quick=True, runtime="pycuda"), timeout_s=120)
        assert (status, reason) == ("unavailable", expected)
    status, reason, _ = runner._run_isolated("clocks", SuiteContext(quick=True, runtime="opencl"), timeout_s=120)
    assert status == "failed" and "runtime must be one of" in reason


def test_pycuda_buffers_round_trip(pycuda_only):
    rt = runtimes.make("pycuda")
    assert rt.device(0) == DEVICE
    rng = np.random.default_rng()
    for dtype in (np.uint32, np.uint64, np.float32, np.int32):
        n = int(rng.integers(1, 300))
        host = rng.integers(0, 1 << 30, size=n).astype(dtype)
        buf = rt.from_numpy(host)
        assert rt.pointer(buf) == int(buf.allocation) and buf.nbytes == n * np.dtype(dtype).itemsize
        np.testing.assert_array_equal(rt.to_numpy(buf), host)
        other = rng.integers(0, 1 << 30, size=n).astype(dtype)
        rt.copy_from_host(buf, other)
        np.testing.assert_array_equal(rt.to_numpy(buf), other)
        assert (rt.to_numpy(rt.zeros(n, dtype)) == 0).all()
        assert (rt.to_numpy(rt.ones(n, dtype)) == 1).all()
        garbage = rt.to_numpy(rt.empty(n, dtype))  # uninitialised: what zeros() must overwrite
        assert not (garbage == 0).all()
    with pytest.raises(ValueError, match="elements"):
        rt.copy_from_host(rt.zeros(4, np.uint32), np.zeros(5, np.uint32))
    fn = rt.function(rt.load_module("ceilings.cu", DEVICE.arch), "fma_f32")
    with pytest.raises(TypeError, match="NumPy scalar"):
        rt.launch(fn, 1, 32, (1000, rt.zeros(1, np.float32), rt.zeros(2, np.uint64)))  # a bare int has no width
    before = pycuda_only.state.freed
    del buf
    rt.release_cached()
    assert pycuda_only.state.freed > before


def test_pycuda_event_timing(pycuda_only):
    rt = runtimes.make("pycuda")
    rt.device(0)
    fn = rt.function(rt.load_module("ceilings.cu", DEVICE.arch), "fma_f32")
    out, clk = rt.zeros(4, np.float32), rt.zeros(2, np.uint64)
    times = runtimes.time_launches(rt, lambda: rt.launch(fn, 4, 256, (np.int32(10), out, clk)), repeats=3,
                                   warmup=1, per_event=4)
    assert times == pytest.approx([LAUNCH_S] * 3)
    assert len(pycuda_only.launches) == 1 + 3 * 4
    assert pycuda_only.launches[-1] == ("fma_f32", 4, 256, 0)


class _FakeLibcuda:
    """libcuda's four entry points as ctypes would call them: out-parameters by pointer, CUresult back."""

    def __init__(self):
        self.max_dynamic = {}

    def cuModuleLoadData(self, module_ptr, image):  # noqa: N802
        assert isinstance(module_ptr.contents, ctypes.c_void_p) and image.raw[:4] == b"\x7fELF"
        module_ptr.contents.value = 0x1000
        return 0

    def cuModuleGetFunction(self, fn_ptr, module, name):  # noqa: N802
        assert module.value == 0x1000 and name == b"resident"
        fn_ptr.contents.value = 0x2000
        return 0

    def cuFuncSetAttribute(self, fn, attr, value):  # noqa: N802
        assert attr.value == 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self.max_dynamic[fn.value] = value.value
        return 0

    def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, blocks_ptr, fn, threads, dyn):  # noqa: N802
        assert isinstance(threads, ctypes.c_int) and isinstance(dyn, ctypes.c_size_t)
        if dyn.value > self.max_dynamic.get(fn.value, 48 * 1024):
            return 1  # CUDA_ERROR_INVALID_VALUE
        blocks_ptr.contents.value = 2048 // max(threads.value, 1)
        return 0


def test_occupancy_twin_through_ctypes():
    lib = _FakeLibcuda()
    twin = driver_occupancy.OccupancyTwin(b"\x7fELF...resident...", "resident", driver_occupancy.CtypesDriver(lib))
    assert twin.blocks(256, 0) == 8
    with pytest.raises(driver_occupancy.DriverError, match="CUresult 1"):
        twin.blocks(128, 100 * 1024)
    twin.set_max_dynamic_shared(200 * 1024)
    assert lib.max_dynamic == {0x2000: 200 * 1024}
    assert twin.blocks(128, 100 * 1024) == 16


def test_occupancy_twin_through_cuda_bindings(pycuda_only):
    rt = runtimes.make("pycuda")
    rt.device(0)
    fn = rt.function(rt.load_module("occupancy.cu", DEVICE.arch, (("NACC", 4),)), "resident")
    assert fn.twin().api.library == "cuda.bindings"
    with pytest.raises(driver_occupancy.DriverError, match="INVALID_VALUE"):
        rt.occupancy(fn, 128, 100 * 1024)  # beyond the default 48 KB before the opt-in
    rt.set_max_dynamic_shared(fn, DEVICE.shared_per_block_optin)
    assert rt.kernel_facts(fn).max_dynamic_shared == DEVICE.shared_per_block_optin
    assert rt.occupancy(fn, 128, 100 * 1024) == 1
