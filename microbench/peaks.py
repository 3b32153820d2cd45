"""Roofline ceilings: the peak tensor-core throughput and memory bandwidth of a device.

Two sources, always labeled: ``datasheet`` (the vendor's published dense peak)
and ``measured`` (what a benchmark on this device achieved: ``torch.matmul`` on
a large square problem, a large device-to-device copy). A roofline fraction says
which ceiling it is relative to.
"""

from __future__ import annotations

from dataclasses import dataclass

# Dense (no sparsity) tensor-core peaks in FLOP/s by input dtype, and HBM bandwidth
# in B/s, from the vendors' datasheets. float32 GEMMs run as TF32 on the tensor
# cores in our kernels, so their ceiling is the TF32 peak. Matched in order
# against the device name, so more specific names come first.
DATASHEETS: tuple[tuple[str, dict[str, float], float], ...] = (
    ("H100 PCIe", {"bfloat16": 756.0e12, "float16": 756.0e12, "float32": 378.0e12}, 2.0e12),
    ("H200", {"bfloat16": 989.4e12, "float16": 989.4e12, "float32": 494.7e12, "float8_e4m3fn": 1978.9e12,
              "float8_e5m2": 1978.9e12}, 4.8e12),
    ("H100", {"bfloat16": 989.4e12, "float16": 989.4e12, "float32": 494.7e12, "float8_e4m3fn": 1978.9e12,
              "float8_e5m2": 1978.9e12}, 3.35e12),
    ("MI300X", {"bfloat16": 1307.4e12, "float16": 1307.4e12, "float32": 653.7e12, "float8_e4m3fnuz": 2614.9e12,
                "float8_e5m2fnuz": 2614.9e12}, 5.3e12),
)


@dataclass(frozen=True)
class Ceiling:
    flops: float  # FLOP/s for the dtype
    bandwidth: float  # B/s
    source: str  # "datasheet" or "measured"
    device: str

    def attainable(self, flops: float, bytes_moved: float) -> float:
        """The shortest time the roofline allows for this much work and traffic, in seconds."""
        return max(flops / self.flops, bytes_moved / self.bandwidth)

    def fraction(self, flops: float, bytes_moved: float, seconds: float) -> float:
        """Achieved / attainable: 1.0 means the kernel sits on the roofline."""
        return self.attainable(flops, bytes_moved) / seconds


def datasheet(device_name: str | None, dtype: str) -> Ceiling | None:
    """The published ceiling for ``device_name`` and input ``dtype``; None if unknown."""
    if not device_name:
        return None
    for key, flops, bandwidth in DATASHEETS:
        if key.lower() in device_name.lower() and dtype in flops:
            return Ceiling(flops[dtype], bandwidth, "datasheet", device_name)
    return None
