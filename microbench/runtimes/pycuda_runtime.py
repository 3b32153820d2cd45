"""The suites' runtime on PyCUDA (``pycuda.driver``).

- context: the device's primary context (``Device.retain_primary_context``,
  as ``pycuda.autoprimaryctx`` does), pushed once per process, popped at exit;
- modules: the cubin ``ceiling.microbench.build`` compiles (NVRTC, else nvcc), loaded
  with ``module_from_buffer``;
- launches: ``Function.prepare`` once per argument layout, then
  ``prepared_call(grid, block, *args, shared_size=...)`` with 3-tuples;
  buffers go in as their device address (format ``P``), scalars by dtype;
- buffers: ``mem_alloc`` (sizes in bytes), ``memset_d8``/``memset_d32``,
  ``memcpy_htod``/``memcpy_dtoh``;
- timing: ``Event().record()``, ``synchronize()``, ``time_till`` (ms);
- occupancy: PyCUDA has no wrapper, see ``driver_occupancy``.
"""

from __future__ import annotations

import atexit
import functools
import gc
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .interface import KernelFacts


def pycuda_unavailable_reason() -> str | None:
    """None if PyCUDA can use a CUDA GPU here, else why not."""
    try:
        import pycuda.driver as drv
    except Exception as exc:  # noqa: BLE001 - any import failure means no PyCUDA here
        return f"PyCUDA is not importable ({exc.__class__.__name__}: {exc}); pip install pycuda"
    try:
        drv.init()
        if drv.Device.count() < 1:
            return "no CUDA device visible"
    except Exception as exc:  # noqa: BLE001
        return f"no usable CUDA device ({exc.__class__.__name__}: {exc})"
    return None


@dataclass
class PycudaBuffer:
    """``n`` elements of ``dtype`` in one ``DeviceAllocation``."""

    allocation: Any
    n: int
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return self.n * self.dtype.itemsize

    @property
    def ptr(self) -> int:
        return int(self.allocation)


class PycudaKernel:
    """A ``Function`` with the cubin it came from (for the occupancy twin) and its prepared layout."""

    def __init__(self, fn: Any, name: str, cubin: bytes) -> None:
        self.fn, self.name, self.cubin = fn, name, cubin
        self.arg_format: str | None = None
        self._twin = None

    def twin(self):
        if self._twin is None:
            from .driver_occupancy import OccupancyTwin

            self._twin = OccupancyTwin(self.cubin, self.name)
        return self._twin


@dataclass
class PycudaModule:
    module: Any
    cubin: bytes


_contexts: dict[int, Any] = {}


def _context(index: int):
    """The primary context of device ``index``, made current on this thread (once per process)."""
    import pycuda.driver as drv

    if index not in _contexts:
        drv.init()
        ctx = drv.Device(index).retain_primary_context()
        ctx.push()
        _contexts[index] = ctx
        atexit.register(_release, index)
    return _contexts[index]


def _release(index: int) -> None:
    ctx = _contexts.pop(index, None)
    if ctx is not None:
        try:
            ctx.pop()
        except Exception:  # noqa: BLE001 - at exit, a context already gone is fine
            pass


@functools.cache
def _load(source: str, arch: str, defines: tuple, extra: tuple) -> PycudaModule:
    import pycuda.driver as drv

    from .. import gpu

    errors: list[str] = []
    loaded = gpu.compile_and_load(source, arch, defines, extra,
                                  lambda cubin: PycudaModule(drv.module_from_buffer(cubin), cubin), errors)
    if loaded is None:
        raise RuntimeError(f"could not build {source} for {arch}: " + " | ".join(errors))
    return loaded


class PycudaRuntime:
    name = "pycuda"

    def __init__(self) -> None:
        import pycuda
        import pycuda.driver as drv

        self._pycuda, self._drv = pycuda, drv

    def describe(self) -> str:
        return f"pycuda {getattr(self._pycuda, 'VERSION_TEXT', '?')}"

    def device(self, index: int = 0):
        return _device(index)

    def driver_version(self) -> int | None:
        return int(self._drv.get_driver_version())

    # ---- buffers
    def empty(self, n: int, dtype: Any) -> PycudaBuffer:
        dtype = np.dtype(dtype)
        return PycudaBuffer(self._drv.mem_alloc(max(1, n * dtype.itemsize)), n, dtype)

    def zeros(self, n: int, dtype: Any) -> PycudaBuffer:
        buf = self.empty(n, dtype)
        if buf.nbytes:
            self._drv.memset_d8(buf.ptr, 0, buf.nbytes)
        return buf

    def ones(self, n: int, dtype: Any) -> PycudaBuffer:
        buf = self.empty(n, dtype)
        one = np.ones(1, buf.dtype)
        if buf.dtype.itemsize == 4:  # one 32-bit pattern repeated: a device-side fill
            self._drv.memset_d32(buf.ptr, int(one.view(np.uint32)[0]), n)
        elif n:
            self._drv.memcpy_htod(buf.ptr, np.ones(n, buf.dtype))
        return buf

    def from_numpy(self, host: np.ndarray) -> PycudaBuffer:
        host = np.ascontiguousarray(host).reshape(-1)
        buf = self.empty(host.size, host.dtype)
        if host.size:
            self._drv.memcpy_htod(buf.ptr, host)
        return buf

    def to_numpy(self, buffer: PycudaBuffer) -> np.ndarray:
        host = np.empty(buffer.n, buffer.dtype)
        if buffer.n:
            self._drv.memcpy_dtoh(host, buffer.ptr)
        return host

    def copy_from_host(self, buffer: PycudaBuffer, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host, dtype=buffer.dtype).reshape(-1)
        if host.size != buffer.n:
            raise ValueError(f"host array has {host.size} elements, the buffer {buffer.n}")
        self._drv.memcpy_htod(buffer.ptr, host)

    def pointer(self, buffer: PycudaBuffer) -> int:
        return buffer.ptr

    def release_cached(self) -> None:
        gc.collect()  # a DeviceAllocation is freed when its last reference goes

    # ---- code
    def load_module(self, source: str, arch: str, defines: tuple = (), extra: tuple = ()) -> PycudaModule:
        return _load(source, arch, tuple(defines), tuple(extra))

    def function(self, module: PycudaModule, name: str) -> PycudaKernel:
        return PycudaKernel(module.module.get_function(name), name, module.cubin)

    def kernel_facts(self, fn: PycudaKernel) -> KernelFacts:
        attr = self._drv.function_attribute
        get = fn.fn.get_attribute
        return KernelFacts(int(get(attr.NUM_REGS)), int(get(attr.SHARED_SIZE_BYTES)),
                           int(get(attr.MAX_DYNAMIC_SHARED_SIZE_BYTES)))

    def set_max_dynamic_shared(self, fn: PycudaKernel, nbytes: int) -> None:
        fn.fn.set_attribute(self._drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, int(nbytes))
        fn.twin().set_max_dynamic_shared(nbytes)

    def occupancy(self, fn: PycudaKernel, threads: int, dynamic_shared: int) -> int:
        return fn.twin().blocks(threads, dynamic_shared)

    def launch(self, fn: PycudaKernel, grid: int, block: int, args: Sequence[Any], shared_bytes: int = 0) -> None:
        values, layout = [], ""
        for i, arg in enumerate(args):
            if isinstance(arg, PycudaBuffer):
                values.append(arg.ptr)
                layout += "P"
            elif isinstance(arg, np.generic):
                values.append(arg)
                layout += arg.dtype.char
            else:
                raise TypeError(f"{fn.name}: argument {i} must be a device buffer or a NumPy scalar, got {type(arg)}")
        if fn.arg_format != layout:
            fn.fn.prepare(layout)
            fn.arg_format = layout
        fn.fn.prepared_call((int(grid), 1, 1), (int(block), 1, 1), *values, shared_size=int(shared_bytes))

    # ---- ordering and timing
    def synchronize(self) -> None:
        self._drv.Context.synchronize()

    def event(self):
        return self._drv.Event()

    def elapsed_s(self, start, stop) -> float:
        return start.time_till(stop) / 1e3


@functools.cache
def _device(index: int):
    import pycuda.driver as drv

    from ..gpu import CudaDevice

    _context(index)
    dev = drv.Device(index)
    attr = drv.device_attribute
    major, minor = dev.compute_capability()
    free, total = drv.mem_get_info()
    return CudaDevice(
        index=index,
        name=str(dev.name()),
        major=int(major),
        minor=int(minor),
        sm_count=int(dev.get_attribute(attr.MULTIPROCESSOR_COUNT)),
        shared_per_sm=int(dev.get_attribute(attr.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)),
        shared_per_block_optin=int(dev.get_attribute(attr.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)),
        l2_bytes=int(dev.get_attribute(attr.L2_CACHE_SIZE)),
        clock_khz=int(dev.get_attribute(attr.CLOCK_RATE)),
        memory_bytes=int(total),
    )
