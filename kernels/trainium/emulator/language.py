"""``nki.language`` on the emulator: tensors, buffers, dtypes, tile sizes, loops, operators,
and the ``nl.load`` / ``nl.store`` convenience wrappers over ``nisa.dma_copy``."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ceiling.trainium.emulator import isa, memory, ops, state
from ceiling.trainium.emulator.memory import Tensor

# Buffers (NKI names them as objects; the emulator uses their names).
sbuf = "sbuf"
psum = "psum"
hbm = "hbm"
private_hbm = "private_hbm"
shared_hbm = "shared_hbm"

# Data types.
bool_ = np.dtype(np.bool_)
int8, int16, int32 = np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32)
uint8, uint16, uint32 = np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32)
float16, float32 = np.dtype(np.float16), np.dtype(np.float32)
tfloat32 = np.dtype(np.float32)  # stored as fp32; TensorE treats it as fp32-class
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float8_e4m3 = float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)

# Operators and activation functions (also accepted by the ISA as numpy ufuncs).
globals().update(ops.BINARY)
globals().update(ops.UNARY)


class _TileSize:
    """``nl.tile_size``: hardware tile limits of the active target."""

    @property
    def pmax(self) -> int:
        return state.current().target.partitions

    @property
    def psum_bank_fmax(self) -> int:
        t = state.current().target
        return t.psum_bank_bytes // 4

    @property
    def psum_num_banks(self) -> int:
        return state.current().target.psum_banks

    @property
    def gemm_stationary_fmax(self) -> int:
        return state.current().target.matmul_stationary_free_max

    @property
    def gemm_moving_fmax(self) -> int:
        return state.current().target.matmul_moving_free_max

    @property
    def bn_stats_fmax(self) -> int:
        return 512

    @property
    def sbuf_fmax_bytes(self) -> int:
        return state.current().target.sbuf_bytes_per_partition


tile_size = _TileSize()


def ndarray(shape, dtype, buffer=sbuf, name: str = "", address=None) -> Tensor:
    """An uninitialized tensor: reading an element before it is written raises."""
    return memory.new(tuple(shape), memory.np_dtype(dtype), buffer, name)


def zeros(shape, dtype, buffer=sbuf, name: str = "") -> Tensor:
    t = ndarray(shape, dtype, buffer, name)
    isa.memset(t, 0)
    return t


def full(shape, fill_value, dtype, buffer=sbuf, name: str = "") -> Tensor:
    t = ndarray(shape, dtype, buffer, name)
    isa.memset(t, fill_value)
    return t


def load(src: Tensor, dtype=None) -> Tensor:
    """Copy an HBM tile into a new SBUF tile (``nisa.dma_copy``)."""
    t = ndarray(src.shape, dtype or src.dtype, sbuf, name=f"load({src.name})")
    isa.dma_copy(t, src)
    return t


def store(dst: Tensor, value: Tensor) -> None:
    isa.dma_copy(dst, value)


def ds(start: int, size: int) -> slice:
    """A dynamic slice: ``t[nl.ds(i * 128, 128)]``."""
    return slice(int(start), int(start) + int(size))


def affine_range(start, stop=None, step=1):
    """Alias of ``range`` in NKI 0.3+: every loop is unrolled at specialization."""
    return range(start, stop, step) if stop is not None else range(start)


sequential_range = static_range = affine_range


def program_id(axis: int = 0) -> int:
    return 0


def num_programs(axes: int = 0) -> int:
    return 1
