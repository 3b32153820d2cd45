"""Tensors in HBM, SBUF and PSUM. A ``Tensor`` is a view of an ``Allocation``. The allocation knows its
buffer, owns the data (None in dry mode) and a ``written`` mask: ``nl.ndarray`` memory starts
uninitialized, so float data is filled with NaN (as NKI's own simulator does) and every read checks
the mask. The first axis of an SBUF or PSUM tensor is the partition axis.
"""

from __future__ import annotations

import math
import weakref

import ml_dtypes
import numpy as np

try:  # numpy 2 moved it
    from numpy.lib.array_utils import byte_bounds as _byte_bounds
except ImportError:  # numpy 1.x
    _byte_bounds = np.byte_bounds

from ceiling.trainium.emulator import state
from ceiling.trainium.emulator.errors import HardwareRuleError, UninitializedReadError

HBM_BUFFERS = ("hbm", "shared_hbm", "private_hbm")
ON_CHIP = ("sbuf", "psum")


def np_dtype(dtype) -> np.dtype:
    """A numpy dtype from an NKI, numpy, ml_dtypes or torch-style name."""
    if isinstance(dtype, str):
        name = dtype.removeprefix("torch.").removeprefix("nl.")
        if name in ("bfloat16", "bf16"):
            return np.dtype(ml_dtypes.bfloat16)
        if name == "tfloat32":
            return np.dtype(np.float32)
        if name in ("float8_e4m3", "float8_e4m3fn"):
            return np.dtype(ml_dtypes.float8_e4m3fn)
        if name == "float8_e5m2":
            return np.dtype(ml_dtypes.float8_e5m2)
        return np.dtype(name)
    return np.dtype(dtype)


def dtype_name(dtype) -> str:
    return np.dtype(dtype).name


class Allocation:
    def __init__(self, shape: tuple[int, ...], dtype, buffer: str, name: str, data=None, written: bool = False):
        self.shape, self.dtype, self.buffer, self.name = tuple(int(s) for s in shape), np_dtype(dtype), buffer, name
        ctx = state.current()
        if buffer in ON_CHIP and len(self.shape) < 1:
            raise HardwareRuleError("partition-dim", f"nl.ndarray({name!r})", "on-chip tensors need a partition axis", ctx.target.name)
        per_partition = math.prod(self.shape[1:]) * self.dtype.itemsize if buffer in ON_CHIP else 0
        if buffer in ON_CHIP and self.shape[0] > ctx.target.partitions:
            raise HardwareRuleError(
                "partition-dim",
                f"nl.ndarray({name!r}, buffer={buffer})",
                f"partition axis {self.shape[0]} exceeds {ctx.target.partitions} (shape {self.shape})",
                ctx.target.name,
            )
        self.id, banks = ctx.allocate(buffer, per_partition, name) if buffer in ON_CHIP else (ctx.allocate("hbm", 0, name)[0], 0)
        if buffer in ON_CHIP:
            weakref.finalize(self, ctx.release, buffer, per_partition, banks)
        self.written = np.full(self.shape, written, dtype=bool)
        # PSUM elements whose last write came from an engine other than TensorE: a matmul must
        # not accumulate onto them (undefined on NeuronCore-v2/-v3).
        self.engine_written = np.zeros(self.shape, dtype=bool) if buffer == "psum" else None
        if data is not None:
            self.data = np.asarray(data).astype(self.dtype, copy=False).reshape(self.shape)
        elif ctx.dry:
            self.data = None
        else:
            fill = np.nan if np.issubdtype(self.dtype, np.floating) or self.dtype.kind == "V" else 4
            try:
                self.data = np.full(self.shape, fill, dtype=self.dtype)
            except (ValueError, OverflowError):
                self.data = np.zeros(self.shape, dtype=self.dtype)


def _normalize_key(key, ndim):
    if not isinstance(key, tuple):
        key = (key,)
    if any(k is Ellipsis for k in key):
        i = next(i for i, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (ndim - len(key) + 1) + key[i + 1 :]
    for k in key:
        if not isinstance(k, (int, np.integer, slice)):
            raise TypeError(f"tensor index: expected ints and slices (nl.ds), got {type(k).__name__}")
    return key + (slice(None),) * (ndim - len(key))


class Tensor:
    """A view of an allocation. Index with ints and slices (``nl.ds(start, size)`` is a slice)."""

    def __init__(self, alloc: Allocation, written: np.ndarray, data, partition_start: int = 0):
        self.alloc = alloc
        self._written = written
        self._data = data
        self.partition_start = partition_start

    # --- what NKI code sees
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._written.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.alloc.dtype

    @property
    def buffer(self) -> str:
        return self.alloc.buffer

    @property
    def name(self) -> str:
        return self.alloc.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"Tensor({self.name!r}, shape={self.shape}, dtype={dtype_name(self.dtype)}, buffer={self.buffer})"

    def __getitem__(self, key) -> "Tensor":
        key = _normalize_key(key, self.ndim)
        if self.buffer in ON_CHIP and isinstance(key[0], (int, np.integer)):
            raise TypeError(f"{self.name}: keep the partition axis of an on-chip tensor (index it with a slice)")
        p0 = self.partition_start
        if any(isinstance(k, slice) and (k.step or 1) < 0 for k in key):
            raise TypeError(f"{self.name}: negative slice steps are not supported")
        if self.buffer in ON_CHIP:
            r = range(self.shape[0])[key[0]]
            if r.step != 1:
                raise TypeError(f"{self.name}: partition slices must be contiguous")
            p0 += r.start if len(r) else 0
        data = None if self._data is None else self._data[key]
        return Tensor(self.alloc, self._written[key], data, p0)

    def __setitem__(self, key, value):
        raise TypeError("NKI tensors are written by ISA instructions (nisa.*, nl.store), not by assignment")

    def reshape(self, shape) -> "Tensor":
        if self.buffer not in HBM_BUFFERS:
            raise TypeError(f"{self.name}: reshape is for HBM tensors")
        w = self._written.reshape(shape)
        if not np.shares_memory(w, self.alloc.written):
            raise TypeError(f"{self.name}: reshape of a non-contiguous view")
        d = None if self._data is None else self._data.reshape(shape)
        return Tensor(self.alloc, w, d)

    # --- what instructions use
    @property
    def free_size(self) -> int:
        return math.prod(self.shape[1:])

    def region(self) -> tuple[int, int, int]:
        """(allocation id, lo, hi) byte bounds of this view inside its allocation (element units)."""
        lo, hi = _byte_bounds(self._written)
        base = _byte_bounds(self.alloc.written)[0]
        return (self.alloc.id, lo - base, hi - base)

    def free_offset_bytes(self) -> int:
        """Byte offset of this view's first element inside its partition."""
        lo = _byte_bounds(self._written)[0] - _byte_bounds(self.alloc.written)[0]
        per_partition = math.prod(self.alloc.shape[1:])
        return (lo % per_partition) * self.dtype.itemsize if per_partition else 0

    def check_written(self, instruction: str) -> None:
        if not self._written.all():
            missing = ~self._written
            first = tuple(int(i[0]) for i in np.nonzero(missing))
            raise UninitializedReadError(self.name, instruction, int(missing.sum()), missing.size, first)

    def read(self, instruction: str) -> np.ndarray | None:
        """The values as float32 (engines compute in fp32); checks every element was written."""
        self.check_written(instruction)
        return None if self._data is None else np.asarray(self._data, dtype=np.float32)

    def raw(self, instruction: str) -> np.ndarray | None:
        """The values in their own dtype (for bit-exact copies), checked like ``read``."""
        self.check_written(instruction)
        return None if self._data is None else np.asarray(self._data)

    def mask_view(self, base: np.ndarray) -> np.ndarray:
        """The view of ``base`` (a bool array shaped like the allocation) that this tensor covers."""
        off = _byte_bounds(self._written)[0] - _byte_bounds(self.alloc.written)[0]
        return np.lib.stride_tricks.as_strided(base.reshape(-1)[off:], shape=self._written.shape, strides=self._written.strides)

    def write(self, values, mask: np.ndarray | None = None, by_matmul: bool = False) -> None:
        """Cast fp32 (or same-dtype) ``values`` to this tensor's dtype and store them."""
        if self._data is not None and values is not None:
            v = np.broadcast_to(np.asarray(values), self.shape)
            if np.issubdtype(self.dtype, np.integer) and v.dtype.kind == "f":
                v = np.rint(v)
            cast = v.astype(self.dtype)
            if mask is None:
                self._data[...] = cast
            else:
                self._data[mask] = cast[mask]
        if mask is None:
            self._written[...] = True
        else:
            self._written[mask] = True
        if self.alloc.engine_written is not None:
            view = self.mask_view(self.alloc.engine_written)
            if mask is None:
                view[...] = not by_matmul
            else:
                view[mask] = not by_matmul

    def written_mask(self) -> np.ndarray:
        return self._written


def new(shape, dtype, buffer: str, name: str = "", data=None, written: bool = False) -> Tensor:
    alloc = Allocation(shape, dtype, buffer, name or f"t{state.current().next_id + 1}", data=data, written=written)
    return Tensor(alloc, alloc.written, alloc.data)
