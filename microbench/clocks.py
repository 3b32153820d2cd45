"""NVML clock and throttle sampling around any measurement.

``ClockSampler`` polls NVML on a side thread (SM and memory clock, power,
temperature, the clocks-event/throttle-reasons mask) while a benchmark runs::

    with ClockSampler(device_index=0) as sampler:
        run_the_benchmark()
    summary = sampler.summary()      # min/median/max SM MHz, reasons seen, ...
    record.provenance = host_provenance(device=..., **summary.provenance_fields())

It only reads; it never changes a clock or a limit. Without NVML (no
``nvidia-ml-py``, no driver) the sampler records nothing and says why, so the
same code runs on a CPU machine.
"""

from __future__ import annotations

import statistics
import threading
from dataclasses import dataclass, field
from typing import Any

# nvmlClocksEventReasons bits (formerly "throttle reasons").
REASONS: dict[int, str] = {
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

# Reasons that mean the clock was held below what the workload asked for.
THROTTLING = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)


def decode_reasons(mask: int) -> list[str]:
    names = [name for bit, name in REASONS.items() if mask & bit]
    unknown = mask & ~sum(REASONS)
    if unknown:
        names.append(f"other_0x{unknown:x}")
    return names


@dataclass
class ClockSummary:
    samples: int
    sm_mhz: dict[str, float] = field(default_factory=dict)  # min / median / max
    mem_mhz: dict[str, float] = field(default_factory=dict)
    power_w: dict[str, float] = field(default_factory=dict)
    temperature_c: dict[str, float] = field(default_factory=dict)
    max_sm_mhz: float | None = None  # the part's maximum SM clock
    reasons: list[str] = field(default_factory=list)  # every reason seen in any sample
    error: str | None = None  # why nothing was sampled

    @property
    def throttled(self) -> bool:
        return bool(THROTTLING.intersection(self.reasons))

    @property
    def fraction_of_max(self) -> float | None:
        """Median sampled SM clock over the part's maximum (below ~0.97 under load: held back)."""
        if not self.sm_mhz or not self.max_sm_mhz:
            return None
        return self.sm_mhz["median"] / self.max_sm_mhz

    def provenance_fields(self) -> dict[str, Any]:
        clocks = {}
        for key, stats in (("sm", self.sm_mhz), ("mem", self.mem_mhz)):
            for stat, value in stats.items():
                clocks[key if stat == "median" else f"{key}_{stat}"] = value
        if self.max_sm_mhz:
            clocks["sm_max_supported"] = self.max_sm_mhz
        return {"clocks_mhz": clocks, "throttle_reasons": sorted(self.reasons)}

    def as_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "sm_mhz": self.sm_mhz,
            "mem_mhz": self.mem_mhz,
            "power_w": self.power_w,
            "temperature_c": self.temperature_c,
            "max_sm_mhz": self.max_sm_mhz,
            "reasons": self.reasons,
            "throttled": self.throttled,
            "sm_fraction_of_max": self.fraction_of_max,
            "error": self.error,
        }


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def nvml_device_facts(device_index: int = 0) -> dict[str, Any]:
    """Name, driver, max clocks and current reasons of one GPU (empty with an 'error' if no NVML)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no library, no driver, no device: all mean "not here"
        return {"error": f"NVML unavailable: {exc}"}
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        name = pynvml.nvmlDeviceGetName(h)
        driver = pynvml.nvmlSystemGetDriverVersion()
        facts = {
            "name": name.decode() if isinstance(name, bytes) else name,
            "driver": driver.decode() if isinstance(driver, bytes) else driver,
            "max_sm_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
            "max_mem_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM),
            "count": pynvml.nvmlDeviceGetCount(),
        }
        try:
            facts["power_limit_w"] = pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
        except Exception:  # noqa: BLE001 - optional on some parts
            pass
        return facts
    except Exception as exc:  # noqa: BLE001
        return {"error": f"NVML query failed: {exc}"}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


class ClockSampler:
    """Sample NVML every ``interval_s`` between ``start()`` and ``stop()`` (or as a context manager)."""

    def __init__(self, device_index: int = 0, interval_s: float = 0.005):
        self.device_index = device_index
        self.interval_s = interval_s
        self._sm: list[float] = []
        self._mem: list[float] = []
        self._power: list[float] = []
        self._temp: list[float] = []
        self._mask = 0
        self._max_sm: float | None = None
        self._error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml = None
        self._handle = None

    def start(self) -> "ClockSampler":
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(self.device_index)
            self._max_sm = float(pynvml.nvmlDeviceGetMaxClockInfo(self._handle, pynvml.NVML_CLOCK_SM))
        except Exception as exc:  # noqa: BLE001
            self._error = f"NVML unavailable: {exc}"
            self._nvml = None
            return self
        self._sample()  # at least one sample even for a very short run
        self._thread = threading.Thread(target=self._loop, name="nvml-clock-sampler", daemon=True)
        self._thread.start()
        return self

    def _reasons_mask(self) -> int:
        nv = self._nvml
        getter = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(getter(self._handle))

    def _sample(self) -> None:
        nv, h = self._nvml, self._handle
        try:
            self._sm.append(float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)))
            self._mem.append(float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)))
            self._mask |= self._reasons_mask()
        except Exception as exc:  # noqa: BLE001 - keep what was sampled, note the failure
            self._error = f"NVML sample failed: {exc}"
            return
        try:
            self._power.append(nv.nvmlDeviceGetPowerUsage(h) / 1000.0)
            self._temp.append(float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)))
        except Exception:  # noqa: BLE001 - power/temperature are optional extras
            pass

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def stop(self) -> ClockSummary:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=2.0)
            self._sample()
            self._thread = None
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
            self._nvml = None
        return self.summary()

    def summary(self) -> ClockSummary:
        return ClockSummary(
            samples=len(self._sm),
            sm_mhz=_stats(self._sm),
            mem_mhz=_stats(self._mem),
            power_w=_stats(self._power),
            temperature_c=_stats(self._temp),
            max_sm_mhz=self._max_sm,
            # gpu_idle is set between launches; it says nothing about the measurement.
            reasons=[r for r in decode_reasons(self._mask) if r != "gpu_idle"],
            error=self._error,
        )

    def __enter__(self) -> "ClockSampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def sampled(fn, *args, device_index: int = 0, interval_s: float = 0.005, **kwargs):
    """Run ``fn(*args, **kwargs)`` under a sampler; returns (result, ClockSummary)."""
    sampler = ClockSampler(device_index, interval_s).start()
    try:
        result = fn(*args, **kwargs)
    finally:
        summary = sampler.stop()
    return result, summary
