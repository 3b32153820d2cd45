"""The suites' runtime on CuPy: ``cupy.RawModule`` kernels, CuPy arrays, CuPy events.

Device facts and module loading stay in ``ceiling.microbench.gpu`` (looked up there at
call time), so this is the same code path the suites always ran on.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .interface import KernelFacts


class CupyRuntime:
    name = "cupy"

    def __init__(self) -> None:
        import cupy

        self._cp = cupy

    def describe(self) -> str:
        return f"cupy {getattr(self._cp, '__version__', '?')}"

    def device(self, index: int = 0):
        from .. import gpu

        return gpu.cuda_device(index)

    def driver_version(self) -> int | None:
        return int(self._cp.cuda.runtime.driverGetVersion())

    # ---- buffers
    def zeros(self, n: int, dtype: Any):
        return self._cp.zeros(n, dtype=dtype)

    def ones(self, n: int, dtype: Any):
        return self._cp.ones(n, dtype=dtype)

    def empty(self, n: int, dtype: Any):
        return self._cp.empty(n, dtype=dtype)

    def from_numpy(self, host: np.ndarray):
        return self._cp.asarray(host, dtype=host.dtype)

    def to_numpy(self, buffer) -> np.ndarray:
        return buffer.get()

    def copy_from_host(self, buffer, host: np.ndarray) -> None:
        buffer.set(host)

    def pointer(self, buffer) -> int:
        return int(buffer.data.ptr)

    def release_cached(self) -> None:
        self._cp.get_default_memory_pool().free_all_blocks()

    # ---- code
    def load_module(self, source: str, arch: str, defines: tuple = (), extra: tuple = ()):
        from .. import gpu

        return gpu.load_module(source, arch, defines, extra)

    def function(self, module, name: str):
        return module.get_function(name)

    def kernel_facts(self, fn) -> KernelFacts:
        return KernelFacts(int(fn.num_regs), int(fn.shared_size_bytes), int(fn.max_dynamic_shared_size_bytes))

    def set_max_dynamic_shared(self, fn, nbytes: int) -> None:
        fn.max_dynamic_shared_size_bytes = nbytes

    def occupancy(self, fn, threads: int, dynamic_shared: int) -> int:
        from cupy.cuda import driver

        return driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, threads, dynamic_shared)

    def launch(self, fn, grid: int, block: int, args: Sequence[Any], shared_bytes: int = 0) -> None:
        fn((grid,), (block,), tuple(args), shared_mem=shared_bytes)

    # ---- ordering and timing
    def synchronize(self) -> None:
        self._cp.cuda.runtime.deviceSynchronize()

    def event(self):
        return self._cp.cuda.Event()

    def elapsed_s(self, start, stop) -> float:
        return self._cp.cuda.get_elapsed_time(start, stop) / 1e3
