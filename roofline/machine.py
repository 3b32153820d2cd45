"""The rates a model or plot uses for one device: measured ceilings first, published after."""

from __future__ import annotations

from dataclasses import dataclass, field

from ceiling.roofline import devices
from ceiling.roofline.ceilings import DeviceCeilings, _fill_published


@dataclass(frozen=True)
class Machine:
    key: str  # published key or reported name
    name: str
    vendor: str  # "nvidia", "amd", "google", "aws", "cpu"
    units: int
    flops: dict[str, float]  # dtype -> FLOP/s
    bandwidth: dict[str, float]  # level -> B/s
    limits: dict[str, float] = field(default_factory=dict)
    measured: bool = False

    def peak(self, dtype: str) -> float:
        if dtype in self.flops:
            return self.flops[dtype]
        if dtype == "float32" and "tf32" in self.flops:
            return self.flops["tf32"]
        if dtype.startswith("float8") and "float8" in self.flops:  # e4m3fn, e5m2, their FNUZ twins
            return self.flops["float8"]
        return max(self.flops.values())


def from_ceilings(dc: DeviceCeilings) -> Machine:
    spec = devices.PUBLISHED.get(dc.key) if dc.key else None
    if spec is not None:
        full = DeviceCeilings(dc.device, dc.key, dict(dc.bandwidth), dict(dc.compute))
        _fill_published(full, spec)
        dc = full
    return Machine(
        key=dc.key or dc.device,
        name=dc.device,
        vendor=spec.vendor if spec else "cpu",
        units=spec.units if spec else 1,
        flops={k: c.value for k, c in dc.compute.items()},
        bandwidth={k: c.value for k, c in dc.bandwidth.items()},
        limits=dict(spec.limits) if spec else {},
        measured=dc.measured(),
    )


def published(key: str) -> Machine:
    spec = devices.get(key)
    dc = DeviceCeilings(spec.name, spec.key)
    _fill_published(dc, spec)
    return from_ceilings(dc)
