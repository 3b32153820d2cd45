"""The GPU runtime the CUDA suites run on: CuPy or PyCUDA, behind one small interface.

Each suite is written once against :class:`Runtime`: device facts, device
buffers (allocate, fill, copy in and out), modules loaded from the cubins
``ceiling.microbench.build`` compiles, kernel launches, the max-dynamic-shared-memory
opt-in, occupancy queries, synchronisation and CUDA-event timing.
``select_runtime`` takes CuPy when it can use a GPU, else PyCUDA, and
otherwise says why neither works.

Buffers are whatever the runtime allocates (a ``cupy.ndarray``, a small
wrapper around a PyCUDA ``DeviceAllocation``); the suites hand them back to
the runtime and never reach into them. Kernel arguments are device buffers
and NumPy scalars (``np.int32``, ``np.uint64``, ...), which both libraries
pack by their dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..clocks import ClockSummary, nvml_device_facts
from ..gpu import CudaDevice
from ..records import Provenance, host_provenance
from .interface import KernelFacts, Runtime

NAMES = ("cupy", "pycuda")
CHOICES = ("auto", *NAMES)


@dataclass(frozen=True)
class Choice:
    """The runtime picked, or why none could be."""

    name: str | None
    reason: str | None = None

    def runtime(self) -> Runtime:
        if self.name is None:
            raise RuntimeError(self.reason or "no GPU runtime")
        return make(self.name)


def _reasons() -> dict[str, Callable[[], str | None]]:
    from ..gpu import cupy_unavailable_reason
    from .pycuda_runtime import pycuda_unavailable_reason

    return {"cupy": cupy_unavailable_reason, "pycuda": pycuda_unavailable_reason}


def no_gpu_reason() -> str | None:
    """Why this machine has no NVIDIA GPU to run on, asked of the driver before any library; None when
    it has one (whether CuPy or PyCUDA can then use it is the runtimes' question)."""
    try:
        import pynvml
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
            if Path("/proc/driver/nvidia/gpus").is_dir():
                return None  # a driver without a working NVML: let the runtimes try
            return f"no NVIDIA GPU on this machine (no NVIDIA driver: {exc})"
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
        return None if count else "no NVIDIA GPU on this machine (the NVIDIA driver counts none)"
    gpus = Path("/proc/driver/nvidia/gpus")
    if gpus.is_dir() and any(gpus.iterdir()):
        return None
    return "no NVIDIA GPU on this machine (no NVIDIA driver: /proc/driver/nvidia/gpus is absent)"


def select_runtime(prefer: str | None = None) -> Choice:
    """CuPy when it can use a GPU, else PyCUDA; ``prefer`` ("cupy"/"pycuda") asks for one only.
    When neither can and the machine has no GPU at all, the reason says that, not which library
    is missing."""
    prefer = (prefer or "auto").strip().lower()
    if prefer not in CHOICES:
        raise ValueError(f"runtime must be one of {CHOICES}, got {prefer!r}")
    checks = _reasons()
    names = NAMES if prefer == "auto" else (prefer,)
    why_not = []
    for name in names:
        try:
            reason = checks[name]()
        except Exception as exc:  # noqa: BLE001 - a broken install is a reason, not a crash
            reason = f"{exc.__class__.__name__}: {exc}"
        if reason is None:
            return Choice(name)
        why_not.append(f"{name}: {reason}")
    absent = no_gpu_reason()
    if absent:
        return Choice(None, absent)
    return Choice(None, "; ".join(why_not) if prefer == "auto" else why_not[0].split(": ", 1)[1])


def make(name: str) -> Runtime:
    """A runtime by name (no availability check; see ``select_runtime``)."""
    if name == "cupy":
        from .cupy_runtime import CupyRuntime

        return CupyRuntime()
    if name == "pycuda":
        from .pycuda_runtime import PycudaRuntime

        return PycudaRuntime()
    raise ValueError(f"runtime must be one of {NAMES}, got {name!r}")


def time_launches(rt: Runtime, launch: Callable[[], None], repeats: int = 10, warmup: int = 2,
                  per_event: int = 1) -> list[float]:
    """Seconds per call of ``launch`` (which enqueues GPU work), timed with CUDA events.

    Each sample brackets ``per_event`` back-to-back calls and divides, so the
    launch gap between kernels stays small next to short kernels.
    """
    for _ in range(warmup):
        launch()
    rt.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = rt.event(), rt.event()
        start.record()
        for _ in range(per_event):
            launch()
        stop.record()
        stop.synchronize()
        times.append(rt.elapsed_s(start, stop) / per_event)
    return times


def gpu_provenance(dev: CudaDevice, clocks: ClockSummary | None = None, runtime: Runtime | None = None) -> Provenance:
    """Provenance of a GPU measurement; ``runtime`` (CuPy when None) is named in it."""
    facts = nvml_device_facts(dev.index)
    fields: dict[str, Any] = {"device_count": int(facts.get("count", 1) or 1), "driver": facts.get("driver")}
    if clocks is not None:
        fields.update(clocks.provenance_fields())
    try:
        if runtime is None:
            runtime = make("cupy")
        fields["runtime"] = runtime.describe()
        version = runtime.driver_version()
        fields["driver"] = fields["driver"] or f"cuda-driver-api {version}"
    except Exception:  # noqa: BLE001
        pass
    return host_provenance(device=dev.name, **fields)


__all__ = ["CHOICES", "NAMES", "Choice", "KernelFacts", "Runtime", "gpu_provenance", "make", "select_runtime",
           "time_launches"]
