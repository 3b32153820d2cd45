"""Per-NeuronCore facts for the targets the emulator knows, trn1 (NeuronCore-v2) and trn2
(NeuronCore-v3), with their sources at :data:`TRN1`. There is no default target: the newer chip has
looser limits, so a kernel checked only against it could fail on trn1; callers name the target.
"""

from __future__ import annotations

from dataclasses import dataclass

KiB = 1024


@dataclass(frozen=True)
class Target:
    name: str
    nc_version: int  # NeuronCore-v2 for trn1, -v3 for trn2

    # Memories, per NeuronCore.
    partitions: int  # SBUF and PSUM partitions (nl.tile_size.pmax)
    sbuf_bytes_per_partition: int
    psum_bank_bytes: int  # per partition
    psum_banks: int

    # TensorE (nc_matmul) tile limits.
    matmul_contraction_max: int  # partition axis of stationary and moving
    matmul_stationary_free_max: int  # nl.tile_size.gemm_stationary_fmax
    matmul_moving_free_max: int  # nl.tile_size.gemm_moving_fmax

    # Vector / Scalar / GpSimd free-size limits (elements per partition per instruction).
    engine_free_max_sbuf: int
    engine_free_max_psum: int
    activation_scalar_bias: bool  # a Python-float bias is allowed (from NeuronCore-v3)

    # Clocks (Hz) and throughputs for the cost model.
    tensor_hz: float
    vector_hz: float
    scalar_hz: float
    gpsimd_hz: float
    vector_elems_per_cycle: int  # per partition, per input operand
    scalar_elems_per_cycle: int  # per partition
    dma_bytes_per_s: float  # per NeuronCore: min(HBM share, DMA-engine share)

    @property
    def psum_bytes_per_partition(self) -> int:
        return self.psum_bank_bytes * self.psum_banks

    @property
    def tensor_peak_flops(self) -> float:
        """Dense bf16 TensorE peak of one NeuronCore: a 128x128 PE array, one MAC per PE per cycle."""
        return 2.0 * self.partitions * self.matmul_stationary_free_max * self.tensor_hz


# Sources (AWS Neuron docs repository, aws-neuron/aws-neuron-sdk):
# about-neuron/arch/neuron-hardware/trainium{,2}.rst and
# nki/guides/architecture/{trainium_inferentia2,trainium2}_arch.rst; the limits of nki.isa.nc_matmul and
# nl.tile_size from nki/api/nki/{isa,language}/__init__.py (NKI 0.6.0, Neuron SDK 2.32).
TRN1 = Target(
    name="trn1",
    nc_version=2,
    partitions=128,
    # SBUF 24 MiB per NC = 128 partitions x 192 KiB (trainium.rst, trainium_inferentia2_arch.rst).
    sbuf_bytes_per_partition=192 * KiB,
    # PSUM 2 MiB per NC = 128 x 16 KiB = 8 banks x 2 KiB (512 fp32) per partition.
    psum_bank_bytes=2 * KiB,
    psum_banks=8,
    matmul_contraction_max=128,
    matmul_stationary_free_max=128,
    matmul_moving_free_max=512,  # one PSUM bank of fp32 on NeuronCore-v2/-v3 (isa docstring)
    engine_free_max_sbuf=64 * KiB,  # arch guide: <=64K elements from SBUF, <=4K from PSUM
    engine_free_max_psum=4 * KiB,
    activation_scalar_bias=False,  # NeuronCore-v2: bias is an [N, 1] vector
    # TensorE 128x128 at 2.8 GHz = 92 TFLOP/s bf16; Vector 1.12 GHz, Scalar and GpSimd 1.4 GHz.
    tensor_hz=2.8e9,
    vector_hz=1.12e9,
    scalar_hz=1.4e9,
    gpsimd_hz=1.4e9,
    vector_elems_per_cycle=1,  # arch guide: ~N cycles for N elements per partition (one input)
    scalar_elems_per_cycle=1,
    # HBM 820 GB/s per chip over 2 NCs = 410 GB/s; DMA 1 TB/s per chip over 2 NCs = 500 GB/s.
    dma_bytes_per_s=410e9,
)

TRN2 = Target(
    name="trn2",
    nc_version=3,
    partitions=128,
    # SBUF 28 MiB per NC = 128 partitions x 224 KiB (trainium2.rst); PSUM as on trn1.
    sbuf_bytes_per_partition=224 * KiB,
    psum_bank_bytes=2 * KiB,
    psum_banks=8,
    matmul_contraction_max=128,
    matmul_stationary_free_max=128,
    matmul_moving_free_max=512,
    engine_free_max_sbuf=64 * KiB,
    engine_free_max_psum=4 * KiB,
    activation_scalar_bias=True,
    # TensorE at 2.4 GHz = 79 TFLOP/s bf16 per NC; Vector 0.96 GHz with 256 elem/cycle
    # (512 in the bf16 perf mode, not modelled), Scalar 1.2 GHz with 128 elem/cycle, GpSimd 1.2 GHz.
    tensor_hz=2.4e9,
    vector_hz=0.96e9,
    scalar_hz=1.2e9,
    gpsimd_hz=1.2e9,
    vector_elems_per_cycle=2,  # 256 elem/cycle over 128 lanes
    scalar_elems_per_cycle=1,  # 128 elem/cycle over 128 lanes
    # HBM 2.9 TB/s per chip over 8 NCs = 362.5 GB/s; DMA 3.5 TB/s over 8 NCs = 437.5 GB/s.
    dma_bytes_per_s=362.5e9,
)

TARGETS: dict[str, Target] = {"trn1": TRN1, "trn2": TRN2}


def get(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"target: expected one of {sorted(TARGETS)}, got {name!r}") from None
