"""Stand-ins for CuPy and PyCUDA that run the GPU suites' host code on a CPU.

Both record every launch on one simulated device that checks the arguments
against the kernel signatures in the CUDA sources, writes deterministic values
into the output buffers, and advances a clock that the CUDA events read. The
same suite run through either stand-in therefore yields the same launches and
the same records, which is how the tests show the two runtimes are equivalent.

The PyCUDA stand-in keeps the real API's names and conventions
(``pycuda.driver``): ``init`` first, a context current before any call that
needs one, ``mem_alloc`` sizes in bytes returning uninitialised memory,
``memset_d8``/``memset_d32`` counts in elements of their width,
``memcpy_htod(dest, src)``/``memcpy_dtoh(dest, src)``, ``module_from_buffer``
on an ELF cubin, ``Function.prepare(format)`` then
``prepared_call(grid, block, *args, shared_size=)`` with tuples of up to 3
ints, ``function_attribute``/``device_attribute`` lookups,
``Event.record/synchronize/time_till`` in milliseconds. Its occupancy twin goes
through a stand-in of ``cuda.bindings.driver`` (``(CUresult, value)`` tuples).
"""

from __future__ import annotations

import enum
import re
import struct
import sys
import types

import numpy as np

from ceiling.microbench import build, gpu


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
C_TO_NP = {"int": np.int32, "u32": np.uint32, "u64": np.uint64, "float": np.float32}
POINTEE = {"u32": np.uint32, "u64": np.uint64, "float": np.float32, "f4": np.float32}
LAUNCH_S = 2.5e-4  # simulated duration of every kernel

DEVICE = gpu.CudaDevice(0, "NVIDIA H200 (test double)", 9, 0, 4, 233472, 232448, 50 << 20, 1980000, 141 << 30)
NUM_REGS = 40
DEFAULT_MAX_DYNAMIC = 48 * 1024


def pointee(ctype: str):
    base = ctype.replace("const", "").replace("__restrict__", "").replace("*", "").strip()
    return POINTEE[base]


class SimulatedDevice:
    """The launch log and the clock both stand-ins share."""

    def __init__(self):
        self.launches: list[tuple[str, int, int, int]] = []
        self.clock = 0.0

    def run(self, name, grid, block, shared, args, buffer_range):
        """``args``: per parameter a NumPy view of the buffer (pointers) or the scalar.

        ``buffer_range(view) -> (first address, end address)`` of a buffer, to
        check the pointer chain the latency ladder writes.
        """
        params = SIGS[name]
        self.launches.append((name, grid, block, shared))
        self.clock += LAUNCH_S
        if name == "pointer_chase":  # every node must hold a device address inside the chain's own buffer
            chain = args[0]
            lo, hi = buffer_range(chain)
            nodes = chain[:: 64 // 8]
            assert ((nodes >= lo) & (nodes < hi)).all(), "pointer chain leaves its buffer"
        rng = np.random.default_rng(len(self.launches))
        for view, ctype in zip(args, params):
            if "*" in ctype and "const" not in ctype:
                if view.dtype == np.uint64:
                    view[...] = rng.integers(1_000, 2_000, size=view.shape)
                elif view.dtype == np.uint32:
                    view[...] = np.arange(view.size) % 7


# ------------------------------------------------------------------ CuPy


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


class FakeKernel:
    def __init__(self, name, device):
        self.name, self.device = name, device
        self.num_regs, self.shared_size_bytes, self.max_dynamic_shared_size_bytes = NUM_REGS, 0, DEFAULT_MAX_DYNAMIC
        self.kernel = types.SimpleNamespace(ptr=id(self))

    def __call__(self, grid, block, args, shared_mem=0):
        params = SIGS[self.name]
        assert len(args) == len(params), f"{self.name}: {len(args)} args for {params}"
        for arg, ctype in zip(args, params):
            if "*" in ctype:
                assert isinstance(arg, FakeArray), f"{self.name}: {ctype} needs a device array"
            else:
                assert isinstance(arg, C_TO_NP[ctype]), f"{self.name}: {ctype} got {type(arg)}"
        assert 1 <= block[0] <= 1024 and grid[0] >= 1
        assert shared_mem <= self.max_dynamic_shared_size_bytes, "dynamic shared memory beyond the opt-in"

        def extent(view):
            return view.ctypes.data, view.ctypes.data + view.nbytes

        self.device.run(self.name, grid[0], block[0], shared_mem, args, extent)


class FakeModule:
    def __init__(self, device):
        self.device = device

    def get_function(self, name):
        assert name in SIGS, f"no kernel {name} in the sources"
        return FakeKernel(name, self.device)


def install_cupy(monkeypatch) -> SimulatedDevice:
    """A CuPy stand-in in ``sys.modules``, with the device facts and module loading of ``ceiling.microbench.gpu`` faked."""
    device = SimulatedDevice()

    class Event:
        def record(self):
            self.t = device.clock

        def synchronize(self):
            pass

    cp = types.ModuleType("cupy")
    cp.__version__ = "14.0.0 (test double)"
    cp.zeros = lambda n, dtype=np.float32: _arr(np.zeros(n, dtype))
    cp.ones = lambda n, dtype=np.float32: _arr(np.ones(n, dtype))
    cp.empty = lambda n, dtype=np.float32: _arr(np.empty(n, dtype))
    cp.empty_like = lambda a: _arr(np.empty_like(a))
    cp.asarray = lambda a, dtype=None: _arr(np.asarray(a, dtype))
    for name in ("int32", "uint32", "uint64", "float32", "uint8"):
        setattr(cp, name, getattr(np, name))
    cp.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None)
    runtime = types.SimpleNamespace(deviceSynchronize=lambda: None, driverGetVersion=lambda: 13000,
                                    getDeviceCount=lambda: 1, is_hip=False)
    driver = types.ModuleType("cupy.cuda.driver")
    driver.occupancyMaxActiveBlocksPerMultiprocessor = lambda ptr, threads, dyn: 1
    cp.cuda = types.SimpleNamespace(runtime=runtime, Event=Event, driver=driver,
                                    get_elapsed_time=lambda a, b: (b.t - a.t) * 1e3)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cp.cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.driver", driver)
    monkeypatch.setattr(gpu, "cuda_device", lambda index=0: DEVICE)
    monkeypatch.setattr(gpu, "load_module", lambda source, arch, defines=(), extra=(): FakeModule(device))
    return device


# ------------------------------------------------------------------ PyCUDA


class LogicError(RuntimeError):
    pass


class LaunchError(RuntimeError):
    pass


class _State:
    def __init__(self, device: SimulatedDevice):
        self.device = device
        self.initialized = False
        self.context_stack: list = []
        self.allocations: dict[int, np.ndarray] = {}  # base address -> bytes
        self.next_address = 0x7F00_0000_0000
        self.cubins: list[bytes] = []
        self.freed = 0

    def need_context(self, what):
        if not self.initialized:
            raise LogicError(f"{what} failed: initialization error (call pycuda.driver.init() first)")
        if not self.context_stack:
            raise LogicError(f"{what} failed: invalid device context")

    def find(self, address: int, what: str) -> tuple[int, np.ndarray]:
        for base, mem in self.allocations.items():
            if base <= address < base + mem.size:
                return base, mem
        raise LogicError(f"{what} failed: invalid argument (0x{address:x} is no allocation)")


def install_pycuda(monkeypatch) -> SimulatedDevice:
    """PyCUDA and ``cuda.bindings.driver`` stand-ins in ``sys.modules``."""
    from ceiling.microbench.runtimes import pycuda_runtime

    device = SimulatedDevice()
    state = _State(device)
    drv = types.ModuleType("pycuda.driver")
    drv.LogicError, drv.LaunchError = LogicError, LaunchError

    class device_attribute(enum.Enum):  # noqa: N801 - PyCUDA's spelling
        MULTIPROCESSOR_COUNT = "sm_count"
        MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = "shared_per_sm"
        MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = "shared_per_block_optin"
        L2_CACHE_SIZE = "l2_bytes"
        CLOCK_RATE = "clock_khz"

    class function_attribute(enum.Enum):  # noqa: N801
        MAX_THREADS_PER_BLOCK = 0
        SHARED_SIZE_BYTES = 1
        NUM_REGS = 4
        MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

    drv.device_attribute, drv.function_attribute = device_attribute, function_attribute

    def init(flags=0):
        state.initialized = True

    class Context:
        def push(self):
            state.context_stack.append(self)

        @staticmethod
        def pop():
            if not state.context_stack:
                raise LogicError("cuCtxPopCurrent failed: invalid context")
            state.context_stack.pop()

        def detach(self):
            pass

        @staticmethod
        def synchronize():
            state.need_context("cuCtxSynchronize")

    class Device:
        def __init__(self, index):
            if not state.initialized:
                raise LogicError("cuDeviceGet failed: initialization error")
            if index != 0:
                raise LogicError("cuDeviceGet failed: invalid device ordinal")
            self.index = index

        @staticmethod
        def count():
            if not state.initialized:
                raise LogicError("cuDeviceGetCount failed: initialization error")
            return 1

        def name(self):
            return DEVICE.name

        def compute_capability(self):
            return (DEVICE.major, DEVICE.minor)

        def total_memory(self):
            return DEVICE.memory_bytes

        def get_attribute(self, attr):
            return getattr(DEVICE, device_attribute(attr).value)

        def retain_primary_context(self):
            return Context()

        def make_context(self, flags=0):
            ctx = Context()
            ctx.push()
            return ctx

    class DeviceAllocation:
        def __init__(self, base):
            self._base = base

        def __int__(self):
            return self._base

        __index__ = __int__

        def free(self):
            if state.allocations.pop(self._base, None) is not None:
                state.freed += 1

        def __del__(self):
            self.free()

    def mem_get_info():
        state.need_context("cuMemGetInfo")
        used = sum(m.size for m in state.allocations.values())
        return DEVICE.memory_bytes - used, DEVICE.memory_bytes

    def mem_alloc(nbytes):
        state.need_context("cuMemAlloc")
        if not isinstance(nbytes, int) or nbytes <= 0:
            raise LogicError(f"cuMemAlloc failed: invalid argument ({nbytes!r} bytes)")
        base = state.next_address
        state.next_address += (nbytes + 511) // 512 * 512
        state.allocations[base] = np.full(nbytes, 0xAB, np.uint8)  # uninitialised: garbage
        return DeviceAllocation(base)

    def _span(dest, nbytes, what):
        address = int(dest)
        base, mem = state.find(address, what)
        offset = address - base
        if offset + nbytes > mem.size:
            raise LogicError(f"{what} failed: invalid argument ({nbytes} bytes past the allocation)")
        return mem[offset:offset + nbytes]

    def memset_d8(dest, data, size):
        state.need_context("cuMemsetD8")
        _span(dest, size, "cuMemsetD8")[...] = data

    def memset_d32(dest, data, size):
        state.need_context("cuMemsetD32")
        _span(dest, 4 * size, "cuMemsetD32").view(np.uint32)[...] = data

    def memcpy_htod(dest, src):
        state.need_context("cuMemcpyHtoD")
        src = memoryview(src).cast("B")
        _span(dest, src.nbytes, "cuMemcpyHtoD")[...] = np.frombuffer(src, np.uint8)

    def memcpy_dtoh(dest, src):
        state.need_context("cuMemcpyDtoH")
        out = memoryview(dest).cast("B")
        if out.readonly:
            raise TypeError("memcpy_dtoh: destination buffer is read-only")
        np.frombuffer(out, np.uint8)[...] = _span(src, out.nbytes, "cuMemcpyDtoH")

    class Function:
        def __init__(self, name):
            self.name = name
            self.attributes = {function_attribute.NUM_REGS: NUM_REGS, function_attribute.SHARED_SIZE_BYTES: 0,
                               function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES: DEFAULT_MAX_DYNAMIC,
                               function_attribute.MAX_THREADS_PER_BLOCK: 1024}
            self.arg_format = None

        def get_attribute(self, attr):
            return self.attributes[function_attribute(attr)]

        def set_attribute(self, attr, value):
            attr = function_attribute(attr)
            assert attr is function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, "only this one is settable"
            limit = DEVICE.shared_per_block_optin - self.attributes[function_attribute.SHARED_SIZE_BYTES]
            if not 0 <= value <= limit:
                raise LogicError("cuFuncSetAttribute failed: invalid argument")
            self.attributes[attr] = value

        def prepare(self, arg_types, texrefs=None):
            assert isinstance(arg_types, str), "this stand-in takes the struct-format spelling"
            self.arg_format = arg_types
            return self

        def prepared_call(self, grid, block, *args, shared_size=0):
            if self.arg_format is None:
                raise AttributeError("'Function' object has no attribute 'arg_format' (call prepare first)")
            self._launch(grid, block, self.arg_format, args, shared_size)

        def __call__(self, *args, block=None, grid=(1, 1), shared=0, stream=None):
            if block is None:
                raise ValueError("must specify block size")
            fmt = "".join("P" if isinstance(a, DeviceAllocation) else a.dtype.char for a in args)
            self._launch(grid, block, fmt, [int(a) if isinstance(a, DeviceAllocation) else a for a in args], shared)

        def _launch(self, grid, block, fmt, args, shared):
            state.need_context("cuLaunchKernel")
            for dims, what in ((grid, "grid"), (block, "block")):
                if not isinstance(dims, tuple) or not 1 <= len(dims) <= 3:
                    raise TypeError(f"{what} must be a tuple of at most 3 ints, got {dims!r}")
                if not all(isinstance(d, int) and d >= 1 for d in dims):
                    raise LogicError(f"cuLaunchKernel failed: invalid {what} {dims!r}")
            if int(np.prod(block)) > self.attributes[function_attribute.MAX_THREADS_PER_BLOCK]:
                raise LaunchError("cuLaunchKernel failed: too many resources requested for launch")
            if shared > self.attributes[function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES]:
                raise LogicError("cuLaunchKernel failed: invalid argument (dynamic shared memory beyond the opt-in)")
            struct.pack(fmt, *args)  # what PyCUDA does to build the argument buffer
            params = SIGS[self.name]
            assert len(fmt) == len(params) == len(args), f"{self.name}: format {fmt!r} for {params}"
            views = []
            for code, arg, ctype in zip(fmt, args, params):
                if "*" in ctype:
                    assert code == "P", f"{self.name}: {ctype} passed as {code!r}"
                    base, mem = state.find(arg, "cuLaunchKernel")
                    assert base == arg, f"{self.name}: pointer into the middle of an allocation"
                    views.append(mem.view(pointee(ctype)))
                else:
                    assert code == np.dtype(C_TO_NP[ctype]).char, f"{self.name}: {ctype} passed as {code!r}"
                    views.append(arg)

            def extent(view):
                for base, mem in state.allocations.items():
                    if np.shares_memory(mem, view):
                        return base, base + mem.size
                raise AssertionError("no allocation")

            device.run(self.name, grid[0], block[0], shared, views, extent)

    class Module:
        def __init__(self, cubin):
            self.cubin = cubin

        def get_function(self, name):
            if name.encode() not in self.cubin:
                raise LogicError("cuModuleGetFunction failed: named symbol not found")
            assert name in SIGS
            return Function(name)

    def module_from_buffer(buffer, options=None, message_handler=None):
        state.need_context("cuModuleLoadDataEx")
        cubin = bytes(buffer)
        if cubin[:4] != b"\x7fELF":
            raise LogicError("cuModuleLoadDataEx failed: device kernel image is invalid")
        state.cubins.append(cubin)
        return Module(cubin)

    class Event:
        def __init__(self, flags=0):
            self.t = None

        def record(self, stream=None):
            state.need_context("cuEventRecord")
            self.t = device.clock
            return self

        def synchronize(self):
            return self

        def time_till(self, end):
            if self.t is None or end.t is None:
                raise LogicError("cuEventElapsedTime failed: invalid resource handle")
            return (end.t - self.t) * 1e3

        def time_since(self, start):
            return start.time_till(self)

    for name, value in dict(locals()).items():
        if name in ("init", "Context", "Device", "DeviceAllocation", "mem_get_info", "mem_alloc", "memset_d8",
                    "memset_d32", "memcpy_htod", "memcpy_dtoh", "Function", "Module", "module_from_buffer", "Event"):
            setattr(drv, name, value)
    drv.get_driver_version = lambda: 13000
    pkg = types.ModuleType("pycuda")
    pkg.VERSION_TEXT = "2026.1"
    pkg.driver = drv
    monkeypatch.setitem(sys.modules, "pycuda", pkg)
    monkeypatch.setitem(sys.modules, "pycuda.driver", drv)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", _bindings_driver(state))
    # a fresh process for every test: no cached contexts, modules or device facts from the last one
    monkeypatch.setattr(pycuda_runtime, "_contexts", {})
    pycuda_runtime._load.cache_clear()
    pycuda_runtime._device.cache_clear()
    device.state = state
    return device


def _bindings_driver(state: _State) -> types.ModuleType:
    """``cuda.bindings.driver``'s four calls the occupancy twin makes, as the real ones return them."""
    cu = types.ModuleType("cuda.bindings.driver")

    class CUresult(enum.IntEnum):
        CUDA_SUCCESS = 0
        CUDA_ERROR_INVALID_VALUE = 1
        CUDA_ERROR_INVALID_IMAGE = 200
        CUDA_ERROR_INVALID_CONTEXT = 201
        CUDA_ERROR_NOT_FOUND = 500

    class CUfunction_attribute(enum.IntEnum):  # noqa: N801
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

    class CUfunction:
        def __init__(self, name):
            self.name, self.max_dynamic = name, DEFAULT_MAX_DYNAMIC

    cu.CUresult, cu.CUfunction_attribute, cu.CUfunction = CUresult, CUfunction_attribute, CUfunction
    cu.queries = []

    def cuModuleLoadData(image):  # noqa: N802
        if not state.context_stack:
            return (CUresult.CUDA_ERROR_INVALID_CONTEXT, None)
        if bytes(image) not in state.cubins:  # the twin must load the very cubin PyCUDA loaded
            return (CUresult.CUDA_ERROR_INVALID_IMAGE, None)
        return (CUresult.CUDA_SUCCESS, types.SimpleNamespace(image=bytes(image)))

    def cuModuleGetFunction(module, name):  # noqa: N802
        assert isinstance(name, bytes)
        if name not in module.image:
            return (CUresult.CUDA_ERROR_NOT_FOUND, None)
        return (CUresult.CUDA_SUCCESS, CUfunction(name.decode()))

    def cuFuncSetAttribute(fn, attrib, value):  # noqa: N802
        assert attrib == CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        if not 0 <= value <= DEVICE.shared_per_block_optin:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        fn.max_dynamic = value
        return (CUresult.CUDA_SUCCESS,)

    def cuOccupancyMaxActiveBlocksPerMultiprocessor(fn, block_size, dynamic_smem):  # noqa: N802
        cu.queries.append((fn.name, block_size, dynamic_smem))
        if dynamic_smem > fn.max_dynamic:
            return (CUresult.CUDA_ERROR_INVALID_VALUE, 0)
        return (CUresult.CUDA_SUCCESS, 1)

    for f in (cuModuleLoadData, cuModuleGetFunction, cuFuncSetAttribute, cuOccupancyMaxActiveBlocksPerMultiprocessor):
        setattr(cu, f.__name__, f)
    return cu
