"""Shared-memory bank conflicts on NVIDIA: measured cycles per access next to the model.

Cases: LDS/STS of 4, 8 and 16 bytes over strides 1..64 (in elements), the
column reads that motivate swizzling (a 128-byte-pitch tile read down a
column, plain and with the CUTLASS SW128 / Triton XOR swizzles), and ldmatrix
x4 (plain 128-byte pitch, padded, swizzled). Each case launches one block per
SM; every warp repeats the same access, and the SM's clock64 interval gives
cycles per warp access, which should track the model's wavefronts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import bankconf
from ..records import Record
from .base import Suite, SuiteContext, gpu_runtime, runtime_reason

SMEM_BYTES = 40960  # the kernels' shared buffer (bank_conflicts.cu)
SHIFT = 128  # bytes each unrolled ldmatrix step moves (keeps every lane's bank)
UNROLL = 16
WARPS = 16  # enough loads in flight per SM to keep the shared-memory pipe busy
STRIDES = tuple(range(1, 65))
QUICK_STRIDES = (1, 2, 3, 4, 8, 16, 31, 32, 33, 64)


@dataclass(frozen=True)
class Case:
    name: str
    kernel: str  # function in bank_conflicts.cu
    width: int  # bytes per lane
    offsets: tuple[int, ...]  # 32 byte offsets into the buffer
    model: bankconf.Wavefronts
    family: str  # "stride", "swizzle", "ldmatrix"

    @property
    def max_offset(self) -> int:
        return max(self.offsets) + self.width


_KERNELS = {("read", 4): "lds_b32", ("read", 8): "lds_b64", ("read", 16): "lds_b128",
            ("write", 4): "sts_b32", ("write", 8): "sts_b64", ("write", 16): "sts_b128"}


def _column_read(pitch: int, chunk: int, swizzle=None) -> list[int]:
    """Lane i reads the 16-byte chunk ``chunk`` of row i of a tile with ``pitch`` bytes per row."""
    out = []
    for lane in range(32):
        offset = lane * pitch + chunk * 16
        out.append(swizzle(offset) if swizzle else offset)
    return out


def _triton_column_read(chunk: int) -> list[int]:
    # fp16 tile of 64 columns (128 B rows) in SwizzledSharedEncoding(vec=8, perPhase=1, maxPhase=8)
    return [bankconf.triton_swizzled_offset(lane, chunk * 8, 64, 2, 8, 1, 8) for lane in range(32)]


def cases(quick: bool = False) -> list[Case]:
    out: list[Case] = []
    for op in ("read", "write"):
        for width in (4, 8, 16):
            for stride in QUICK_STRIDES if quick else STRIDES:
                offs = bankconf.strided(stride, width)
                out.append(Case(f"{_KERNELS[op, width]}-stride-{stride}", _KERNELS[op, width], width, tuple(offs),
                                bankconf.nvidia_wavefronts(offs, width), "stride"))
    swizzled = {
        "column-128B-pitch": _column_read(128, 1),
        "column-144B-pitch-padded": _column_read(144, 1),
        "column-sw128-cute": _column_read(128, 1, bankconf.SW128),
        "column-sw64-cute": _column_read(128, 1, bankconf.SW64),
        "column-triton-swizzled-vec8": _triton_column_read(1),
    }
    for name, offs in swizzled.items():
        out.append(Case(f"lds_b128-{name}", "lds_b128", 16, tuple(offs), bankconf.nvidia_wavefronts(offs, 16), "swizzle"))
    ldsm = {
        "pitch-128B": bankconf.ldmatrix_tile_rows(128),
        "pitch-144B-padded": bankconf.ldmatrix_tile_rows(144),
        "pitch-128B-sw128": bankconf.ldmatrix_tile_rows(128, swizzle=bankconf.SW128),
        "pitch-64B-sw64": bankconf.ldmatrix_tile_rows(64, swizzle=bankconf.SW64),
        "pitch-16B-contiguous": bankconf.ldmatrix_tile_rows(16),
    }
    for name, rows in ldsm.items():
        for kernel in ("ldsm_x4", "ldsm_x4_trans"):
            out.append(Case(f"{kernel}-{name}", kernel, 16, tuple(rows), bankconf.ldmatrix_wavefronts(rows, 4), "ldmatrix"))
    for c in out:  # every case must fit the kernel's buffer, ldmatrix shifts included
        assert c.max_offset + (UNROLL - 1 + UNROLL) * SHIFT <= SMEM_BYTES, c.name
    return out


def _check(ctx: SuiteContext) -> str | None:
    return runtime_reason(ctx)


def _run(ctx: SuiteContext) -> list[Record]:
    from ..clocks import ClockSampler
    from ..gpu import spread
    from ..runtimes import gpu_provenance

    rt = gpu_runtime(ctx)
    dev = rt.device(ctx.device_index)
    module = rt.load_module("bank_conflicts.cu", dev.arch)
    iters = 16 if ctx.quick else 256
    blocks = dev.sm_count
    cycles = rt.zeros(blocks, np.uint64)
    sink = rt.zeros(WARPS * 32, np.uint32)
    all_cases = cases(quick=ctx.quick)
    measured: list[tuple[Case, list[int]]] = []
    with ClockSampler(dev.index) as sampler:
        for i, case in enumerate(all_cases):
            if i % 64 == 0:
                ctx.progress(f"bank conflicts {i}/{len(all_cases)}")
            fn = rt.function(module, case.kernel)
            offsets = rt.from_numpy(np.asarray(case.offsets, dtype=np.uint32))
            args = (offsets, np.int32(iters), np.uint32(SHIFT), cycles, sink)
            rt.launch(fn, blocks, WARPS * 32, args)  # warm
            rt.launch(fn, blocks, WARPS * 32, args)
            rt.synchronize()
            measured.append((case, [int(c) for c in rt.to_numpy(cycles)]))
    provenance = gpu_provenance(dev, sampler.summary(), rt)
    accesses = iters * UNROLL * WARPS
    records = []
    for case, per_block in measured:
        per_access = [c / accesses for c in per_block]
        s = spread(per_access)
        records.append(Record(
            kind="microbench", op="bank-conflicts", name=case.name, metric="cycles-per-access",
            value=s["median"], unit="cycles", backend="cuda",
            shape={"width_bytes": case.width, "lanes": 32},
            config={"kernel": case.kernel, "iters": iters, "unroll": UNROLL, "warps": WARPS, "family": case.family},
            method="clock64", repetitions=len(per_block), median=s["median"], p20=s["p20"], p80=s["p80"],
            extra={"offsets": list(case.offsets), "model_wavefronts": case.model.wavefronts,
                   "model_ideal": case.model.ideal, "model_per_phase": list(case.model.per_phase)},
            provenance=provenance,
        ))
    return records


SUITE = Suite(
    name="bank-conflicts",
    needs_gpu=True,
    description="shared-memory cycles per access over strides, widths, swizzles and ldmatrix vs the bank model",
    check=_check,
    run=_run,
    timeout_s=120.0,
)
