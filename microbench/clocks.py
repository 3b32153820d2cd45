"""Sample a GPU's clocks and throttle reasons while something runs, through NVML.

    with ClockSampler() as clocks:
        run_the_benchmark()
    clocks.summary()   # {"available": True, "clocks_mhz": {"sm": 1980.0, ...}, "throttle_reasons": [...]}

The sampler only reads: it never sets clocks or power limits. Without NVML (no
``pynvml``, no NVIDIA driver, a CPU-only machine) it still works as a context
manager and ``summary()`` says why nothing was sampled, so callers need no
special case.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

# NVML clocks-event (throttle) reason bits, from nvml.h.
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def reason_names(mask: int) -> list[str]:
    """The names of the throttle-reason bits set in ``mask`` (unknown bits as hex)."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(f"0x{unknown:x}")
    return names


def _nvml():
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    return pynvml


def _handle(nvml, device: int | None):
    """The NVML handle of the CUDA device ``device`` (matched by UUID; NVML and CUDA may number GPUs differently)."""
    index = 0 if device is None else device
    try:
        import torch

        if torch.cuda.is_available():
            uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
            if uuid is not None:
                text = str(uuid)
                return nvml.nvmlDeviceGetHandleByUUID(text if text.startswith("GPU-") else f"GPU-{text}")
    except Exception:  # noqa: BLE001 - fall back to the NVML index
        pass
    return nvml.nvmlDeviceGetHandleByIndex(index)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class ClockSampler:
    """A context manager sampling SM/memory clocks, throttle reasons, temperature and power."""

    def __init__(self, device: int | None = None, interval_s: float = 0.05):
        self.device = device
        self.interval_s = interval_s
        self.samples: list[dict[str, Any]] = []
        self.reason: str | None = None  # why nothing is sampled, when that is so
        self.driver: str | None = None
        self.name: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml = None
        self._h = None

    def __enter__(self) -> "ClockSampler":
        try:
            self._nvml = _nvml()
            self._h = _handle(self._nvml, self.device)
            self.driver = _text(self._nvml.nvmlSystemGetDriverVersion())
            self.name = _text(self._nvml.nvmlDeviceGetName(self._h))
        except Exception as exc:  # noqa: BLE001 - no NVML is a normal state, reported in summary()
            self.reason = f"NVML unavailable ({exc.__class__.__name__}: {exc})"
            return self
        self._sample()  # at least one sample even for very short runs
        self._thread = threading.Thread(target=self._loop, name="clock-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        nvml, h = self._nvml, self._h
        s: dict[str, Any] = {"t": time.monotonic()}
        try:
            s["sm"] = float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))
            s["mem"] = float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM))
        except Exception:  # noqa: BLE001
            return
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        for key, read in (
            ("reasons", (lambda: int(reasons(h))) if reasons else None),
            ("temperature_c", lambda: float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))),
            ("power_w", lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
        ):
            if read is None:
                continue
            try:
                s[key] = read()
            except Exception:  # noqa: BLE001 - not every GPU reports every field
                pass
        self.samples.append(s)

    def summary(self) -> dict[str, Any]:
        """Clocks (median, min, max in MHz), the throttle reasons seen, peak temperature and power."""
        if not self.samples:
            return {"available": False, "reason": self.reason or "no samples were taken"}
        sm = [s["sm"] for s in self.samples]
        mem = [s["mem"] for s in self.samples]
        mask = 0
        for s in self.samples:
            mask |= s.get("reasons", 0)
        out: dict[str, Any] = {
            "available": True,
            "samples": len(self.samples),
            "device": self.name,
            "driver": self.driver,
            "clocks_mhz": {
                "sm": statistics.median(sm),
                "sm_min": min(sm),
                "sm_max": max(sm),
                "mem": statistics.median(mem),
            },
            # gpu_idle is set between launches and says nothing about the kernels' speed.
            "throttle_reasons": [r for r in reason_names(mask) if r != "gpu_idle"],
        }
        temps = [s["temperature_c"] for s in self.samples if "temperature_c" in s]
        power = [s["power_w"] for s in self.samples if "power_w" in s]
        if temps:
            out["temperature_c_max"] = max(temps)
        if power:
            out["power_w_max"] = max(power)
        return out
