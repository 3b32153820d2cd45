"""``cuOccupancyMaxActiveBlocksPerMultiprocessor`` for kernels PyCUDA loaded.

PyCUDA wraps neither the occupancy API nor exposes a ``Function``'s raw
``CUfunction`` handle. So the same cubin is loaded a second time, straight
through the driver API, into the same (current) context, and the query runs
on that twin: same code, same registers, same static shared memory, and the
same max-dynamic-shared-memory opt-in (set on both). The driver API is
reached through ``cuda.bindings.driver`` where it is installed, else through
ctypes on ``libcuda.so.1``.
"""

from __future__ import annotations

import ctypes
import importlib
from typing import Any

# CUfunction_attribute value, from cuda.h (stable since CUDA 9).
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class DriverError(RuntimeError):
    pass


class BindingsDriver:
    """The four driver calls through ``cuda.bindings.driver`` (each returns ``(CUresult, *values)``)."""

    library = "cuda.bindings"

    def __init__(self) -> None:
        self._cu = importlib.import_module("cuda.bindings.driver")

    def _check(self, result: tuple, what: str) -> Any:
        err, *values = result
        if err != self._cu.CUresult.CUDA_SUCCESS:
            raise DriverError(f"{what} failed: {getattr(err, 'name', err)}")
        return values[0] if values else None

    def load(self, cubin: bytes) -> Any:
        return self._check(self._cu.cuModuleLoadData(cubin), "cuModuleLoadData")

    def function(self, module: Any, name: str) -> Any:
        return self._check(self._cu.cuModuleGetFunction(module, name.encode()), "cuModuleGetFunction")

    def set_max_dynamic_shared(self, fn: Any, nbytes: int) -> None:
        attr = self._cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self._check(self._cu.cuFuncSetAttribute(fn, attr, int(nbytes)), "cuFuncSetAttribute")

    def occupancy(self, fn: Any, threads: int, dynamic_shared: int) -> int:
        result = self._cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn, int(threads), int(dynamic_shared))
        return int(self._check(result, "cuOccupancyMaxActiveBlocksPerMultiprocessor"))


class CtypesDriver:
    """The same four calls through ctypes on ``libcuda.so.1`` (each returns a ``CUresult``)."""

    library = "libcuda"

    def __init__(self, lib: Any = None) -> None:
        self._lib = lib if lib is not None else ctypes.CDLL("libcuda.so.1")
        self._images: list[Any] = []  # kept alive as long as the modules loaded from them

    def _check(self, err: int, what: str) -> None:
        if err != 0:
            raise DriverError(f"{what} failed: CUresult {err}")

    def load(self, cubin: bytes) -> Any:
        module = ctypes.c_void_p()
        image = ctypes.create_string_buffer(cubin, len(cubin))
        self._images.append(image)
        self._check(self._lib.cuModuleLoadData(ctypes.pointer(module), image), "cuModuleLoadData")
        return module

    def function(self, module: Any, name: str) -> Any:
        fn = ctypes.c_void_p()
        self._check(self._lib.cuModuleGetFunction(ctypes.pointer(fn), module, name.encode()), "cuModuleGetFunction")
        return fn

    def set_max_dynamic_shared(self, fn: Any, nbytes: int) -> None:
        err = self._lib.cuFuncSetAttribute(fn, ctypes.c_int(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES),
                                           ctypes.c_int(int(nbytes)))
        self._check(err, "cuFuncSetAttribute")

    def occupancy(self, fn: Any, threads: int, dynamic_shared: int) -> int:
        blocks = ctypes.c_int()
        err = self._lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.pointer(blocks), fn, ctypes.c_int(int(threads)), ctypes.c_size_t(int(dynamic_shared)))
        self._check(err, "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        return int(blocks.value)


def driver() -> BindingsDriver | CtypesDriver:
    """``cuda.bindings`` where installed, else ctypes on libcuda."""
    try:
        return BindingsDriver()
    except ImportError:
        return CtypesDriver()


class OccupancyTwin:
    """A driver-API handle on the kernel ``name`` of ``cubin``, for occupancy queries only."""

    def __init__(self, cubin: bytes, name: str, api: BindingsDriver | CtypesDriver | None = None) -> None:
        self.api = api or driver()
        self._module = self.api.load(cubin)
        self._fn = self.api.function(self._module, name)

    def set_max_dynamic_shared(self, nbytes: int) -> None:
        self.api.set_max_dynamic_shared(self._fn, nbytes)

    def blocks(self, threads: int, dynamic_shared: int) -> int:
        return self.api.occupancy(self._fn, threads, dynamic_shared)
