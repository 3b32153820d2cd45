"""``nki.isa`` on the emulator: the instructions, with their NKI 0.6 signatures (explicit ``dst``).
Every instruction (1) checks the hardware rules for the active target, (2) checks that each element
it reads was written, (3) computes in float32 and casts to ``dst.dtype`` on output (skipped in dry
mode), and (4) appends itself to the trace with its engine and cost.
"""

from __future__ import annotations

import math
from enum import Enum

import numpy as np

from ceiling.trainium.emulator import cost, ops, rules, state
from ceiling.trainium.emulator.memory import Tensor, dtype_name


class engine(Enum):
    tensor = 1
    vector = 5
    scalar = 2
    gpsimd = 3
    dma = 4
    sync = 6
    unknown = 0


class reduce_cmd(Enum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class dge_mode(Enum):
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(Enum):
    error = 0
    skip = 1


class matmul_perf_mode(Enum):
    none = 0
    double_row = 1


class nc_version(Enum):
    gen2 = 2
    gen3 = 3
    gen4 = 4


tensor_engine, vector_engine, scalar_engine, gpsimd_engine, unknown_engine = (
    engine.tensor,
    engine.vector,
    engine.scalar,
    engine.gpsimd,
    engine.unknown,
)


def get_nc_version() -> nc_version:
    return nc_version(state.current().target.nc_version)


def _engine(requested, default: str, allowed: tuple[str, ...], instruction: str) -> str:
    name = default if requested in (None, engine.unknown) else requested.name
    if name not in allowed:
        rules.fail("engine", instruction, f"engine {name} cannot run it; allowed: {allowed}")
    return name


def _scalar_or_column(x, data: Tensor, instruction: str, role: str):
    """A Python scalar, or an [P, 1] tile broadcast along the free axes (fp32)."""
    if isinstance(x, Tensor):
        rules.engine_operand(x, instruction, role, "vector")
        if x.shape[0] != data.shape[0] or x.free_size != 1:
            rules.fail("shape", instruction, f"{role} must be a scalar or a [{data.shape[0]}, 1] tile, got {x.shape}")
        v = x.read(instruction)
        return None if v is None else v.reshape((data.shape[0],) + (1,) * (data.ndim - 1))
    return np.float32(x)


def _reads(*tensors):
    return [t.region() for t in tensors if isinstance(t, Tensor)]


def _record(op, eng, cycles=0.0, nbytes=0, reads=(), writes=()):
    state.current().record(op, eng, cycles, nbytes, _reads(*reads), _reads(*writes))


# ----------------------------------------------------------------------------- TensorE


def nc_matmul(
    dst,
    stationary,
    moving,
    is_stationary_onezero=False,
    is_moving_onezero=False,
    is_transpose=False,
    accumulate=None,
    tile_position=(),
    tile_size=(),
    perf_mode=matmul_perf_mode.none,
    name=None,
):
    """``dst = stationary.T @ moving`` on TensorE, fp32 accumulation in PSUM.

    ``accumulate=None``: each PSUM element's first write overwrites and later writes add
    (one accumulation group per fresh PSUM tile); ``True`` adds; ``False`` overwrites.
    """
    ins = "nisa.nc_matmul"
    for t, role in ((dst, "dst"), (stationary, "stationary"), (moving, "moving")):
        rules.tensor(t, ins, role)
    if tile_position or tile_size or perf_mode not in (None, matmul_perf_mode.none):
        rules.fail("matmul-mode", ins, "tiling and perf modes are not emulated")
    rules.matmul(dst, stationary, moving, ins)
    s, m = stationary.read(ins), moving.read(ins)
    if accumulate is True:
        dst.check_written(ins)
    if accumulate is not False and (dst.mask_view(dst.alloc.engine_written) & dst.written_mask()).any():
        rules.fail(
            "matmul-accumulate-engine-write",
            ins,
            f"dst {dst.name!r} holds values written by an engine other than TensorE (memset, tensor_copy...); "
            "accumulating a matmul onto them is undefined on NeuronCore-v2/-v3: pass accumulate=False or start from a fresh tile",
        )
    if s is not None:
        # Products of the stored (already rounded) inputs, summed in fp32.
        prod = s.T @ m
        old = dst._data
        if accumulate is True:
            new = old + prod
        elif accumulate is False:
            new = prod
        else:
            new = np.where(dst.written_mask(), old, np.float32(0)) + prod
        dst.write(new.astype(np.float32), by_matmul=True)
    else:
        dst.write(None, by_matmul=True)
    fp32 = dtype_name(stationary.dtype) == "float32"
    _record("nc_matmul", "tensor", cost.matmul_cycles(moving.shape[1], fp32), reads=(stationary, moving) + ((dst,) if accumulate is not False else ()), writes=(dst,))


def nc_transpose(dst, data, engine=engine.unknown, name=None):
    """Transpose a 2-D tile: on TensorE (<= [128, 128], SBUF to PSUM) or VectorE (<= [32, 32])."""
    ins = "nisa.nc_transpose"
    rules.tensor(dst, ins, "dst")
    rules.tensor(data, ins, "data")
    eng = _engine(engine, "tensor" if data.buffer == "sbuf" and dst.buffer == "psum" else "vector", ("tensor", "vector"), ins)
    if eng == "tensor":
        rules.transpose_tensor_engine(dst, data, ins)
    else:
        rules.transpose_vector_engine(dst, data, ins)
    raw = data.raw(ins)
    dst.write(None if raw is None else raw.T)
    cycles = cost.matmul_cycles(data.shape[0], dtype_name(data.dtype) == "float32") if eng == "tensor" else cost.vector_cycles(state.current().target, data.free_size, 1)
    _record("nc_transpose", eng, cycles, reads=(data,), writes=(dst,))


# ----------------------------------------------------------------------------- Vector / Scalar / GpSimd


def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None):
    """``dst = op(data1, data2)`` element-wise (VectorE by default; GpSimd on request)."""
    ins = "nisa.tensor_tensor"
    eng = _engine(engine, "vector", ("vector", "gpsimd"), ins)
    for t, role in ((dst, "dst"), (data1, "data1"), (data2, "data2")):
        rules.tensor(t, ins, role)
        rules.engine_operand(t, ins, role, eng)
    if data1.buffer == "psum" and data2.buffer == "psum":
        rules.fail("tensor-tensor-psum", ins, f"data1 {data1.name!r} and data2 {data2.name!r} are both in PSUM")
    rules.same_layout(data1, data2, ins, "data1 and data2")
    rules.same_layout(dst, data1, ins, "dst and data1")
    f = ops.resolve(op, ("binary",))
    a, b = data1.read(ins), data2.read(ins)
    dst.write(None if a is None else f(a.reshape(dst.shape), b.reshape(dst.shape)))
    tgt = state.current().target
    cycles = cost.vector_cycles(tgt, dst.free_size, 2) if eng == "vector" else cost.gpsimd_cycles(tgt, 2 * dst.free_size)
    _record("tensor_tensor", eng, cycles, reads=(data1, data2), writes=(dst,))


def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, engine=engine.unknown, name=None):
    """``dst = (data op0 operand0) op1 operand1``; operands are scalars or [P, 1] tiles."""
    ins = "nisa.tensor_scalar"
    eng = _engine(engine, "vector", ("vector", "scalar", "gpsimd"), ins)
    for t, role in ((dst, "dst"), (data, "data")):
        rules.tensor(t, ins, role)
        rules.engine_operand(t, ins, role, eng)
    rules.same_layout(dst, data, ins, "dst and data")
    s0 = _scalar_or_column(operand0, data, ins, "operand0")
    s1 = _scalar_or_column(operand1, data, ins, "operand1") if op1 is not None else None
    x = data.read(ins)
    if x is not None:
        f0 = ops.resolve(op0, ("binary",))
        y = f0(s0, x) if reverse0 else f0(x, s0)
        if op1 is not None:
            f1 = ops.resolve(op1, ("binary",))
            y = f1(s1, y) if reverse1 else f1(y, s1)
        dst.write(y.reshape(dst.shape))
    else:
        dst.write(None)
    tgt = state.current().target
    cycles = {"vector": cost.vector_cycles(tgt, data.free_size, 1), "scalar": cost.scalar_cycles(tgt, data.free_size), "gpsimd": cost.gpsimd_cycles(tgt, data.free_size)}[eng]
    _record("tensor_scalar", eng, cycles, reads=(data,) + tuple(o for o in (operand0, operand1) if isinstance(o, Tensor)), writes=(dst,))


def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None):
    """``dst = (data op0 operand0) op1 operand1`` with a scalar/[P,1] ``operand0`` and a tile ``operand1`` (VectorE)."""
    ins = "nisa.scalar_tensor_tensor"
    for t, role in ((dst, "dst"), (data, "data"), (operand1, "operand1")):
        rules.tensor(t, ins, role)
        rules.engine_operand(t, ins, role, "vector")
    if data.buffer == "psum" and operand1.buffer == "psum":
        rules.fail("tensor-tensor-psum", ins, "data and operand1 are both in PSUM")
    rules.same_layout(dst, data, ins, "dst and data")
    rules.same_layout(dst, operand1, ins, "dst and operand1")
    s0 = _scalar_or_column(operand0, data, ins, "operand0")
    x, t1 = data.read(ins), operand1.read(ins)
    if x is not None:
        f0, f1 = ops.resolve(op0, ("binary",)), ops.resolve(op1, ("binary",))
        y = f0(s0, x) if reverse0 else f0(x, s0)
        t1 = t1.reshape(y.shape)
        y = f1(t1, y) if reverse1 else f1(y, t1)
        dst.write(y.reshape(dst.shape))
    else:
        dst.write(None)
    _record("scalar_tensor_tensor", "vector", cost.vector_cycles(state.current().target, dst.free_size, 2), reads=(data, operand1), writes=(dst,))


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle, name=None):
    """``dst = op(data * scale + bias)`` on ScalarE; bias is [P, 1] (or a scalar from trn2),
    scale a scalar or [P, 1]. With ``reduce_res``, also ``reduce_res = sum over free axes of dst``."""
    ins = "nisa.activation"
    for t, role in ((dst, "dst"), (data, "data")):
        rules.tensor(t, ins, role)
        rules.engine_operand(t, ins, role, "scalar")
    rules.same_layout(dst, data, ins, "dst and data")
    rules.bias_vector(bias, data, ins)
    f = ops.resolve(op, ("unary",))
    if reduce_res is not None:
        rules.tensor(reduce_res, ins, "reduce_res")
        rules.engine_operand(reduce_res, ins, "reduce_res", "scalar")
        if reduce_op is not None and ops.resolve(reduce_op, ("binary",)).name != "add":
            rules.fail("activation-reduce-op", ins, f"reduce_op must be add, got {reduce_op!r}")
        if reduce_res.shape[0] != data.shape[0] or reduce_res.free_size != 1:
            rules.fail("shape", ins, f"reduce_res must be [{data.shape[0]}, 1], got {reduce_res.shape}")
    sc = _scalar_or_column(scale, data, ins, "scale")
    bi = _scalar_or_column(bias, data, ins, "bias") if bias is not None else np.float32(0)
    x = data.read(ins)
    if x is not None:
        y = f(x * sc + bi)
        dst.write(y)
        if reduce_res is not None:
            stored = np.asarray(dst._data, dtype=np.float32)
            reduce_res.write(stored.reshape(stored.shape[0], -1).sum(axis=1, dtype=np.float32).reshape(reduce_res.shape))
    else:
        dst.write(None)
        if reduce_res is not None:
            reduce_res.write(None)
    cycles = cost.scalar_cycles(state.current().target, data.free_size, reduce=reduce_res is not None)
    _record("activation", "scalar", cycles, reads=(data,) + tuple(t for t in (bias, scale) if isinstance(t, Tensor)), writes=(dst,) + ((reduce_res,) if reduce_res is not None else ()))


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    """``activation`` with its free-axis sum written to ``reduce_res``."""
    activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res, reduce_cmd=reduce_cmd.reset_reduce)


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    """Reduce ``data`` over trailing free axes with ``op`` (add, maximum, minimum, multiply) on VectorE, in fp32."""
    ins = "nisa.tensor_reduce"
    for t, role in ((dst, "dst"), (data, "data")):
        rules.tensor(t, ins, role)
        rules.engine_operand(t, ins, role, "vector")
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    rules.axis(data, axes, ins)
    nd = data.ndim
    axes = tuple(sorted(a % nd for a in axes))
    kept = tuple(1 if i in axes else s for i, s in enumerate(data.shape)) if keepdims else tuple(s for i, s in enumerate(data.shape) if i not in axes)
    if dst.shape[0] != data.shape[0] or math.prod(dst.shape) != math.prod(kept):
        rules.fail("shape", ins, f"dst {dst.shape} does not hold the reduction of {data.shape} over {axes}")
    f = ops.resolve(op, ("binary",))
    x = data.read(ins)
    if x is not None:
        reducer = {"add": np.add, "maximum": np.maximum, "minimum": np.minimum, "multiply": np.multiply}.get(f.name)
        if reducer is None:
            rules.fail("reduce-op", ins, f"op {f.name} cannot reduce")
        y = reducer.reduce(x, axis=axes).astype(np.float32)
        dst.write((-y if negate else y).reshape(dst.shape))
    else:
        dst.write(None)
    _record("tensor_reduce", "vector", cost.vector_cycles(state.current().target, data.free_size, 1), reads=(data,), writes=(dst,))


def tensor_copy(dst, src, engine=engine.unknown, name=None):
    """Copy between on-chip tiles on VectorE (default), ScalarE or GpSimd; casts via fp32."""
    ins = "nisa.tensor_copy"
    eng = _engine(engine, "vector", ("vector", "scalar", "gpsimd"), ins)
    tgt = state.current().target
    if eng == "scalar" and tgt.nc_version == 2:
        rules.fail("engine", ins, "ScalarE has no tensor_copy on NeuronCore-v2; use nisa.activation(op=nl.copy)")
    for t, role in ((dst, "dst"), (src, "src")):
        rules.tensor(t, ins, role)
        rules.engine_operand(t, ins, role, eng)
    rules.same_layout(dst, src, ins, "dst and src")
    raw = src.raw(ins)
    if raw is not None:
        dst.write(raw.reshape(dst.shape) if raw.dtype == dst.dtype else raw.astype(np.float32).reshape(dst.shape))
    else:
        dst.write(None)
    cycles = {"vector": cost.vector_cycles(tgt, src.free_size, 1), "scalar": cost.scalar_cycles(tgt, src.free_size), "gpsimd": cost.gpsimd_cycles(tgt, src.free_size)}[eng]
    _record("tensor_copy", eng, cycles, reads=(src,), writes=(dst,))


def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    """``dst = src`` where the uint ``predicate`` is nonzero (zero with ``reverse_pred``, which
    takes a scalar ``src`` only), ``dst`` unchanged elsewhere, on VectorE: a select, which unlike
    an added penalty leaves no NaN behind."""
    ins = "nisa.tensor_copy_predicated"
    tgt = state.current().target
    rules.tensor(dst, ins, "dst")
    rules.tensor(predicate, ins, "predicate")
    for t, role in ((dst, "dst"), (predicate, "predicate")):
        rules.engine_operand(t, ins, role, "vector")
    rules.same_layout(dst, predicate, ins, "dst and predicate")
    if dtype_name(predicate.dtype) not in ("uint8", "uint16", "uint32"):
        rules.fail("dtype", ins, f"predicate must be uint8, uint16 or uint32, got {dtype_name(predicate.dtype)}")
    if isinstance(src, Tensor):
        rules.engine_operand(src, ins, "src", "vector")
        rules.same_layout(dst, src, ins, "dst and src")
        if src.dtype != dst.dtype:
            rules.fail("dtype", ins, f"src and dst must share a dtype, got {dtype_name(src.dtype)} and {dtype_name(dst.dtype)}")
        if reverse_pred:
            rules.fail("operand", ins, "reverse_pred takes a scalar src only")
        if src.buffer == "psum" and predicate.buffer == "psum":
            rules.fail("psum", ins, "src and predicate cannot both be in PSUM")
    old, pred = dst.raw(ins), predicate.raw(ins)
    values = src.raw(ins) if isinstance(src, Tensor) else src
    if old is not None:
        take = (pred.reshape(dst.shape) != 0) ^ bool(reverse_pred)
        dst.write(np.where(take, np.broadcast_to(values, dst.shape) if not isinstance(src, Tensor) else values.reshape(dst.shape), old))
    else:
        dst.write(None)
    both_sbuf = dst.buffer == "sbuf" and predicate.buffer == "sbuf" and (not isinstance(src, Tensor) or src.buffer == "sbuf")
    _record("tensor_copy_predicated", "vector", cost.vector_cycles(tgt, dst.free_size, 2 if both_sbuf else 1),
            reads=(predicate, dst, *((src,) if isinstance(src, Tensor) else ())), writes=(dst,))


def memset(dst, value, engine=engine.unknown, name=None):
    """Fill ``dst`` with a constant (VectorE by default, or GpSimd)."""
    ins = "nisa.memset"
    eng = _engine(engine, "vector", ("vector", "gpsimd"), ins)
    rules.tensor(dst, ins, "dst")
    rules.engine_operand(dst, ins, "dst", eng)
    dst.write(None if state.current().dry else np.full(dst.shape, value, dtype=np.float32))
    tgt = state.current().target
    cycles = cost.vector_cycles(tgt, dst.free_size, 1) if eng == "vector" else cost.gpsimd_cycles(tgt, dst.free_size)
    _record("memset", eng, cycles, writes=(dst,))


def _affine(pattern, offset, channel_multiplier, partitions: int) -> np.ndarray:
    """offset + p * channel_multiplier + sum(step_i * idx_i) over a [[step, num], ...] pattern."""
    values = np.arange(partitions, dtype=np.int64)[:, None] * int(channel_multiplier) + int(offset)
    free = np.zeros((1,), dtype=np.int64)
    for step, num in pattern:
        free = (free[:, None] + np.arange(int(num), dtype=np.int64)[None, :] * int(step)).reshape(-1)
    return values + free[None, :]


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    """Integer pattern ``offset + p*channel_multiplier + sum(step*i)`` into SBUF on GpSimd."""
    ins = "nisa.iota"
    rules.tensor(dst, ins, "dst")
    rules.buffer_in(dst, ("sbuf",), ins, "dst")
    rules.engine_operand(dst, ins, "dst", "gpsimd")
    if math.prod(int(n) for _, n in pattern) != dst.free_size:
        rules.fail("shape", ins, f"pattern {pattern} has {math.prod(int(n) for _, n in pattern)} elements, dst has {dst.free_size} per partition")
    if not state.current().dry:
        dst.write(_affine(pattern, offset, channel_multiplier, dst.shape[0]).astype(np.float64).reshape(dst.shape))
    else:
        dst.write(None)
    _record("iota", "gpsimd", cost.gpsimd_cycles(state.current().target, dst.free_size), writes=(dst,))


def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=None, offset=0, name=None):
    """``dst = on_true_tile where cmp_op(offset + p*channel_multiplier + sum(step*i), 0) else on_false_value`` (GpSimd)."""
    ins = "nisa.affine_select"
    for t, role in ((dst, "dst"), (on_true_tile, "on_true_tile")):
        rules.tensor(t, ins, role)
        rules.buffer_in(t, ("sbuf",), ins, role)
        rules.engine_operand(t, ins, role, "gpsimd")
    rules.same_layout(dst, on_true_tile, ins, "dst and on_true_tile")
    if math.prod(int(n) for _, n in pattern) != dst.free_size:
        rules.fail("shape", ins, f"pattern {pattern} does not cover {dst.free_size} elements per partition")
    cmp = ops.resolve(cmp_op if cmp_op is not None else "equal", ("binary",))
    x = on_true_tile.read(ins)
    if x is not None:
        pred = cmp(_affine(pattern, offset, channel_multiplier, dst.shape[0]).astype(np.float32), np.float32(0)).astype(bool)
        y = np.where(pred, x.reshape(pred.shape), np.float32(on_false_value))
        dst.write(y.reshape(dst.shape))
    else:
        dst.write(None)
    _record("affine_select", "gpsimd", cost.gpsimd_cycles(state.current().target, dst.free_size), reads=(on_true_tile,), writes=(dst,))


# ----------------------------------------------------------------------------- DMA


def dma_copy(dst, src, priority=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown, engine=engine.unknown, name=None):
    """Copy between HBM and SBUF (either direction, or SBUF to SBUF); casts via fp32."""
    ins = "nisa.dma_copy"
    rules.tensor(dst, ins, "dst")
    rules.tensor(src, ins, "src")
    rules.dma(dst, src, ins)
    raw = src.raw(ins)
    if raw is not None:
        dst.write(raw.reshape(dst.shape) if raw.dtype == dst.dtype else raw.astype(np.float32).reshape(dst.shape))
    else:
        dst.write(None)
    nbytes = max(math.prod(src.shape) * src.dtype.itemsize, math.prod(dst.shape) * dst.dtype.itemsize)
    _record("dma_copy", "dma", nbytes=nbytes, reads=(src,), writes=(dst,))


__all__ = [
    "engine", "reduce_cmd", "dge_mode", "oob_mode", "matmul_perf_mode", "nc_version", "get_nc_version",
    "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine", "unknown_engine",
    "nc_matmul", "nc_transpose", "tensor_tensor", "tensor_scalar", "scalar_tensor_tensor", "activation",
    "activation_reduce", "tensor_reduce", "tensor_copy", "tensor_copy_predicated", "memset", "iota", "affine_select", "dma_copy",
]  # fmt: skip
