"""Published figures for the devices the kernels target.

These are the vendor's (or a cited third party's) numbers, never ours: every
figure carries its source, and ``ceiling.roofline.ceilings`` marks a ceiling taken from
here as *published*, so a plot or report never passes one off as measured.
Bandwidths are in B/s, compute in FLOP/s (dense, no sparsity), sizes in bytes.
The resource limits configs must respect (shared memory, registers, VMEM, SBUF, PSUM) are
the compile target's, read from ``kernels/spaces/targets.json``: the search spaces' constraints
use the same numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ceiling.spaces import target_info, target_limits


@dataclass(frozen=True)
class DeviceSpec:
    key: str  # short, stable: "h200", "mi300x", "tpu-v5e", "trn2"
    name: str  # as the driver reports it, or the product name
    vendor: str  # "nvidia", "amd", "google", "aws"
    target: str  # compile target: "sm_90a", "gfx942", "tpu", "trn2"
    units: int  # SMs, CUs, TensorCores, NeuronCores
    clock_mhz: float | None
    peak_flops: dict[str, float]  # dtype -> FLOP/s, dense
    bandwidth: dict[str, float]  # memory level -> B/s, for the whole device
    limits: dict[str, float]  # resource limits that configs must respect
    sources: dict[str, str] = field(default_factory=dict)  # figure -> where it comes from
    match: tuple[str, ...] = ()  # lower-case regexes for device names reported by drivers
    capacity: dict[str, float] = field(default_factory=dict)  # memory level -> bytes ("hbm", "l2")

    @property
    def levels(self) -> list[str]:
        """Memory levels from the slowest to the fastest."""
        order = ("hbm", "l2", "smem", "vmem", "sbuf")
        return [lvl for lvl in order if lvl in self.bandwidth]

    def peak(self, dtype: str) -> float | None:
        return self.peak_flops.get(dtype)


def _smem_bw(bytes_per_clk_per_unit: float, units: int, mhz: float) -> float:
    # shared memory / LDS delivers a fixed number of bytes per clock per SM (CU)
    return bytes_per_clk_per_unit * units * mhz * 1e6


_H100_SXM = DeviceSpec(
    key="h100-sxm",
    name="NVIDIA H100 80GB HBM3",
    vendor="nvidia",
    target="sm_90a",
    units=132,
    clock_mhz=1980.0,
    peak_flops={"bfloat16": 989.5e12, "float16": 989.5e12, "float8": 1979e12, "tf32": 494.7e12, "float32": 66.9e12},
    bandwidth={"hbm": 3.35e12, "smem": _smem_bw(128, 132, 1980.0)},
    limits=target_limits("sm_90a"),
    sources={
        "peak_flops": "NVIDIA H100 SXM datasheet (dense tensor-core rates)",
        "hbm": "NVIDIA H100 SXM datasheet",
        "smem": "derived: 32 banks x 4 B per clock per SM x 132 SMs x 1980 MHz",
        "limits": target_info("sm_90a")["source"],
    },
    match=(r"h100.*(sxm|hbm3)", r"^h100$"),
)

_H200 = DeviceSpec(
    key="h200",
    name="NVIDIA H200",
    vendor="nvidia",
    target="sm_90a",
    units=132,
    clock_mhz=1980.0,
    peak_flops=dict(_H100_SXM.peak_flops),
    bandwidth={"hbm": 4.8e12, "l2": 9.7e12, "smem": _smem_bw(128, 132, 1980.0)},
    limits=target_limits("sm_90a"),
    sources={
        "peak_flops": "NVIDIA H200 datasheet (same SM array and clocks as H100 SXM)",
        "hbm": "NVIDIA H200 datasheet",
        "l2": "third-party measurement: te42kyfo/gpu-benches gpu-l2-cache on H200 (9.7-10.2 TB/s)",
        "smem": "derived: 32 banks x 4 B per clock per SM x 132 SMs x 1980 MHz",
        "limits": target_info("sm_90a")["source"],
    },
    match=(r"h200",),
)

_MI300X = DeviceSpec(
    key="mi300x",
    name="AMD Instinct MI300X",
    vendor="amd",
    target="gfx942",
    units=304,
    clock_mhz=2100.0,
    peak_flops={"bfloat16": 1307.4e12, "float16": 1307.4e12, "float8": 2614.9e12, "tf32": 653.7e12, "float32": 163.4e12},
    bandwidth={"hbm": 5.3e12, "smem": _smem_bw(128, 304, 2100.0)},
    limits=target_limits("gfx942"),
    sources={
        "peak_flops": "AMD Instinct MI300X datasheet (dense matrix rates)",
        "hbm": "AMD Instinct MI300X datasheet",
        "smem": "derived: LDS 128 B per clock per CU x 304 CUs x 2100 MHz",
        "limits": target_info("gfx942")["source"],
    },
    match=(r"mi300x", r"gfx942"),
)

_TPU_V5E = DeviceSpec(
    key="tpu-v5e",
    name="TPU v5 lite",
    vendor="google",
    target="tpu",
    units=1,
    clock_mhz=None,
    peak_flops={"bfloat16": 197e12, "int8": 394e12},
    bandwidth={"hbm": 819e9},
    limits=target_limits("tpu-v5e"),
    sources={
        "peak_flops": "Google Cloud TPU v5e system architecture",
        "hbm": "Google Cloud TPU v5e system architecture",
        "limits": target_info("tpu-v5e")["source"],
    },
    match=(r"v5\s*lite", r"v5e"),
)

_TPU_V5P = DeviceSpec(
    key="tpu-v5p",
    name="TPU v5p",
    vendor="google",
    target="tpu",
    units=2,
    clock_mhz=None,
    peak_flops={"bfloat16": 459e12, "int8": 918e12},
    bandwidth={"hbm": 2765e9},
    limits=target_limits("tpu-v5p"),
    sources={
        "peak_flops": "Google Cloud TPU v5p system architecture",
        "hbm": "Google Cloud TPU v5p system architecture",
        "limits": target_info("tpu-v5p")["source"],
    },
    match=(r"v5p",),
)

_TPU_V6E = DeviceSpec(
    key="tpu-v6e",
    name="TPU v6 lite",
    vendor="google",
    target="tpu",
    units=1,
    clock_mhz=None,
    peak_flops={"bfloat16": 918e12, "int8": 1836e12},
    bandwidth={"hbm": 1640e9},
    limits=target_limits("tpu-v6e"),
    sources={
        "peak_flops": "Google Cloud TPU v6e (Trillium) system architecture",
        "hbm": "Google Cloud TPU v6e (Trillium) system architecture",
        "limits": target_info("tpu-v6e")["source"],
    },
    match=(r"v6\s*lite", r"v6e", r"trillium"),
)

_TRN1 = DeviceSpec(
    key="trn1",
    name="AWS Trainium (trn1)",
    vendor="aws",
    target="trn1",
    units=2,
    clock_mhz=None,
    peak_flops={"bfloat16": 190e12, "float16": 190e12, "float32": 47.5e12},
    bandwidth={"hbm": 820e9},
    limits=target_limits("trn1"),
    sources={
        "peak_flops": "AWS Neuron docs, Trainium architecture (per chip)",
        "hbm": "AWS Neuron docs, Trainium architecture (per chip)",
        "limits": target_info("trn1")["source"],
    },
    match=(r"trn1", r"trainium1?$"),
)

_TRN2 = DeviceSpec(
    key="trn2",
    name="AWS Trainium2 (trn2)",
    vendor="aws",
    target="trn2",
    units=8,
    clock_mhz=None,
    peak_flops={"bfloat16": 667e12, "float8": 1299e12},
    bandwidth={"hbm": 2.9e12},
    limits=target_limits("trn2"),
    sources={
        "peak_flops": "AWS Neuron docs, Trainium2 architecture (per device, 8 NeuronCore-v3)",
        "hbm": "AWS Neuron docs, Trainium2 architecture",
        "limits": target_info("trn2")["source"],
    },
    match=(r"trn2", r"trainium2"),
)

# Blackwell and CDNA4: every figure published by the vendor or a cited third party, none measured
# here (no such device has run these kernels). HGX B200 is the 1000 W part; a B200 in a GB200
# runs at 1200 W with higher peaks. Clocks only where a source gives one.
_B200_SOURCE = "https://glennklockwood.com/garden/processors/B200 (NVIDIA Blackwell datasheet, HGX B200 at 1000 W, dense)"
_CHIPS_AND_CHEESE = "https://chipsandcheese.com/p/nvidias-b200-keeping-the-cuda-juggernaut"

_B200 = DeviceSpec(
    key="b200",
    name="NVIDIA B200",
    vendor="nvidia",
    target="sm_100a",
    units=148,
    clock_mhz=1965.0,
    peak_flops={"bfloat16": 2.25e15, "float16": 2.25e15, "float8": 4.5e15, "float4": 9e15, "tf32": 1.1e15},
    bandwidth={"hbm": 8e12, "smem": _smem_bw(128, 148, 1965.0)},
    limits=target_limits("sm_100a"),
    capacity={"hbm": 180e9, "l2": 126e6},
    sources={
        "peak_flops": _B200_SOURCE,
        "units": _CHIPS_AND_CHEESE + " (148 SMs: 2 dies x 74)",
        "clock_mhz": "https://github.com/ByteDance-Seed/VeOmni/pull/986 (148 SMs x 8192 FLOP/clk x 1.965 GHz boost)",
        "hbm": "https://www.nvidia.com/en-us/data-center/dgx-b200/ (8 TB/s and 180 GB per GPU: 64 TB/s, 1440 GB for 8)",
        "l2": _CHIPS_AND_CHEESE + " (126 MB in two partitions)",
        "smem": "derived: 32 banks x 4 B per clock per SM x 148 SMs x 1965 MHz",
        "limits": target_info("sm_100a")["source"],
    },
    match=(r"(?<!g)b200",),
)

_GB200 = DeviceSpec(
    key="gb200",
    name="NVIDIA GB200",
    vendor="nvidia",
    target="sm_100a",
    units=148,
    clock_mhz=None,
    peak_flops={"bfloat16": 2.5e15, "float16": 2.5e15, "float8": 5e15, "float4": 10e15, "tf32": 1.25e15},
    bandwidth={"hbm": 8e12},
    limits=target_limits("sm_100a"),
    capacity={"hbm": 186e9},
    sources={
        "peak_flops": "https://glennklockwood.com/garden/processors/B200 (GB200's B200 at 1200 W, dense); "
                      "https://github.com/marin-community/marin/pull/7334 (Blackwell Architecture Technical Brief, per GPU)",
        "units": "the B200 die: " + _CHIPS_AND_CHEESE,
        "hbm": "https://github.com/marin-community/marin/pull/7334 (8 TB/s, 186 GB per GPU)",
        "limits": target_info("sm_100a")["source"],
    },
    match=(r"gb200",),
)

_B300 = DeviceSpec(
    key="b300",
    name="NVIDIA B300",
    vendor="nvidia",
    target="sm_103a",
    units=160,
    clock_mhz=None,
    peak_flops={"bfloat16": 2.25e15, "float16": 2.25e15, "float8": 4.5e15, "float4": 14e15},
    bandwidth={"hbm": 8e12},
    limits=target_limits("sm_103a"),
    capacity={"hbm": 288e9},
    sources={
        "peak_flops": "https://verda.com/blog/gb300-nvl72-architecture (B300 dense: BF16 2.25, FP8 4.5, NVFP4 14 PFLOP/s)",
        "units": "https://developer.nvidia.com/blog/inside-nvidia-blackwell-ultra-the-chip-powering-the-ai-factory-era/ "
                 "(160 SMs)",
        "hbm": "https://developer.nvidia.com/blog/inside-nvidia-blackwell-ultra-the-chip-powering-the-ai-factory-era/ "
               "(288 GB HBM3e, 8 TB/s)",
        "limits": target_info("sm_103a")["source"],
    },
    match=(r"b300",),
)

_MI355X_SOURCE = "https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html"

_MI355X = DeviceSpec(
    key="mi355x",
    name="AMD Instinct MI355X",
    vendor="amd",
    target="gfx950",
    units=256,
    clock_mhz=2400.0,
    peak_flops={"bfloat16": 2.5e15, "float16": 2.5e15, "float8": 5e15, "float4": 10e15},
    bandwidth={"hbm": 8e12, "smem": _smem_bw(256, 256, 2400.0)},
    limits=target_limits("gfx950"),
    capacity={"hbm": 288e9},
    sources={
        "peak_flops": _MI355X_SOURCE + " (dense matrix: FP16/BF16 2.5, FP8 5, MXFP4 10 PFLOP/s)",
        "units": _MI355X_SOURCE + " (256 CUs)",
        "clock_mhz": _MI355X_SOURCE + " (2400 MHz peak engine clock)",
        "hbm": _MI355X_SOURCE + " (288 GB HBM3E, 8 TB/s)",
        "smem": "derived: LDS 256 B per clock per CU (CDNA4: 64 banks) x 256 CUs x 2400 MHz",
        "limits": target_info("gfx950")["source"],
    },
    match=(r"mi355x", r"gfx950"),
)

PUBLISHED: dict[str, DeviceSpec] = {
    d.key: d for d in (_H100_SXM, _H200, _B200, _GB200, _B300, _MI300X, _MI355X, _TPU_V5E, _TPU_V5P, _TPU_V6E,
                       _TRN1, _TRN2)
}

# Which published device stands for a compile target when only the target is known.
TARGET_DEVICE = {"sm_90a": "h200", "sm_100a": "b200", "sm_103a": "b300", "gfx942": "mi300x", "gfx950": "mi355x",
                 "tpu": "tpu-v5e", "trn1": "trn1", "trn2": "trn2"}


def target_of(device: str) -> str:
    """The compile target named by a static record's device ("target sm_90a (compiled on the host)")."""
    rest = device.strip().removeprefix("target ").strip()
    return rest.split()[0] if rest else ""


def match(name: str) -> DeviceSpec | None:
    """The published device whose reported name this is, if any."""
    text = name.lower()
    if text.startswith("target "):
        key = TARGET_DEVICE.get(target_of(text))
        return PUBLISHED.get(key) if key else None
    for spec in PUBLISHED.values():
        if any(re.search(p, text) for p in spec.match):
            return spec
    return None


def get(key_or_name: str) -> DeviceSpec:
    if key_or_name in PUBLISHED:
        return PUBLISHED[key_or_name]
    spec = match(key_or_name)
    if spec is None:
        raise KeyError(f"no published figures for device {key_or_name!r}; known: {sorted(PUBLISHED)}")
    return spec
