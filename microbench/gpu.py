"""Running the CUDA microbenchmarks: device facts and module loading on CuPy, cubins, sample spreads.

Timing and provenance go through the runtime the suites run on (``ceiling.microbench.runtimes``), which
builds on this module; this module never imports it.

Modules are compiled for the device's exact architecture (``sm_90a`` on
Hopper, so arch-specific instructions are allowed) with NVRTC through
``cuda.bindings`` and loaded as a cubin by ``cupy.RawModule``; where
``cuda.bindings`` is missing, nvcc does the same; failing both, CuPy compiles
the source itself for the plain architecture.
"""

from __future__ import annotations

import functools
import re
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from . import build


def cupy_unavailable_reason() -> str | None:
    """None if CuPy can use a CUDA GPU here, else why not."""
    try:
        import cupy
    except Exception as exc:  # noqa: BLE001 - any import failure means no CuPy here
        return f"CuPy is not importable ({exc.__class__.__name__}: {exc}); install cupy-cuda13x"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device visible"
        if cupy.cuda.runtime.is_hip:
            return "CuPy is built for ROCm; the CUDA suites need an NVIDIA GPU"
    except Exception as exc:  # noqa: BLE001
        return f"no usable CUDA device ({exc.__class__.__name__}: {exc})"
    return None


@dataclass(frozen=True)
class CudaDevice:
    index: int
    name: str
    major: int
    minor: int
    sm_count: int
    shared_per_sm: int
    shared_per_block_optin: int
    l2_bytes: int
    clock_khz: int
    memory_bytes: int

    @property
    def arch(self) -> str:
        """Compile target: ``sm_90a`` on Hopper (arch-specific features), else ``sm_XY``."""
        base = f"sm_{self.major}{self.minor}"
        return base + "a" if self.major >= 9 else base

    @property
    def occupancy_arch(self) -> str:
        return f"sm_{self.major}{self.minor}"


@functools.cache
def cuda_device(index: int = 0) -> CudaDevice:
    import cupy

    with cupy.cuda.Device(index):
        props = cupy.cuda.runtime.getDeviceProperties(index)
        name = props["name"]
        free, total = cupy.cuda.runtime.memGetInfo()
    attr = cupy.cuda.runtime.deviceGetAttribute
    optin = attr(cupy.cuda.runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin, index)
    return CudaDevice(
        index=index,
        name=name.decode() if isinstance(name, bytes) else str(name),
        major=int(props["major"]),
        minor=int(props["minor"]),
        sm_count=int(props["multiProcessorCount"]),
        shared_per_sm=int(props["sharedMemPerMultiprocessor"]),
        shared_per_block_optin=int(optin),
        l2_bytes=int(props["l2CacheSize"]),
        clock_khz=int(props.get("clockRate", 0) or 0),
        memory_bytes=int(total),
    )


@functools.cache
def _module_dir() -> Path:
    """Where this process keeps the cubins it loads (RawModule loads from a path)."""
    return Path(tempfile.mkdtemp(prefix="microbench-cubin-"))


def kernel_names(source: str) -> list[str]:
    """The ``extern "C" __global__`` functions a source defines, in order."""
    text = build.source_path(source).read_text()
    return re.findall(r'extern "C" __global__ void\s+(?:__launch_bounds__\(\d+\)\s+)?(\w+)\s*\(', text)


def compile_and_load(source: str, arch: str, defines: tuple[tuple[str, Any], ...], extra: tuple[str, ...],
                     load: Callable[[bytes], Any], errors: list[str]) -> Any | None:
    """Compile ``source`` to a cubin (NVRTC, then nvcc) and hand it to ``load``; None if neither worked.

    A cubin the driver refuses falls through to the next compiler; every
    failure is appended to ``errors``.
    """
    for compile_ in (build.nvrtc_cubin, build.nvcc_cubin):
        try:
            cubin = compile_(source, arch, dict(defines), extra)
        except Exception as exc:  # noqa: BLE001 - try the next compiler
            errors.append(f"{compile_.__name__}: {exc}")
            continue
        try:
            return load(cubin)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{compile_.__name__}: cubin did not load: {exc}")
    return None


@functools.cache
def load_module(source: str, arch: str, defines: tuple[tuple[str, Any], ...] = (), extra: tuple[str, ...] = ()):
    """A ``cupy.RawModule`` for one source, compiled for ``arch`` (cached per process)."""
    import cupy

    def load(cubin: bytes):
        path = _module_dir() / f"{Path(source).stem}-{arch}-{abs(hash((defines, extra)))}.cubin"
        path.write_bytes(cubin)
        module = cupy.RawModule(path=str(path))
        module.get_function(kernel_names(source)[0])  # loads the cubin now, so a refusal falls through
        return module

    errors: list[str] = []
    module = compile_and_load(source, arch, defines, extra, load, errors)
    if module is not None:
        return module
    # Last resort: CuPy's own NVRTC for the plain architecture (no arch-specific features).
    options = (f"-I{build.SOURCES}", "-std=c++17", *build._defines(dict(defines)), *extra)
    try:
        module = cupy.RawModule(code=build.source_path(source).read_text(), options=options)
        module.compile()
        return module
    except Exception as exc:  # noqa: BLE001
        errors.append(f"cupy.RawModule: {exc}")
    raise RuntimeError(f"could not build {source} for {arch}: " + " | ".join(errors))


def spread(values: list[float]) -> dict[str, float]:
    """median, p20, p80 of a sample (as the record schema stores them)."""
    s = sorted(values)

    def q(p: float) -> float:
        if len(s) == 1:
            return s[0]
        pos = p * (len(s) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    return {"median": statistics.median(s), "p20": q(0.2), "p80": q(0.8)}
