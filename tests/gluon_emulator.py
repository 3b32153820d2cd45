"""Run the Gluon attention kernels' own source on the CPU: an emulation of their program logic.

Gluon has no interpreter, and the device is the judge of the kernels. This module is a check
before it: it executes the kernels' Python source with ``gl`` (and the Hopper operations the
kernels use) bound to PyTorch, so every line of the producer and the consumers runs - their
tile and block arithmetic, the ring counters and mbarrier phases, the ping-pong turns, the TMA
coordinates and bounds, the masks, the online softmax, the five backward products, the
epilogues - and the results can be compared with the float64 reference.

What is emulated, and how:

* each partition of ``gl.warp_specialize`` runs in its own thread; an mbarrier is a counter of
  arrivals and transaction bytes with a phase, and ``mbarrier.wait(bar, parity)`` blocks until
  the phase of that parity has completed (a fresh barrier counts the phase before its first as
  complete), so a wrong phase or a missing arrive deadlocks (a timeout, reported) and a slot
  refilled too early hands a consumer the wrong tile;
* a TMA copy moves its box at once (zero-filled past the tensor's bounds on load, clipped on
  store and on reduction) and then completes its bytes on the barrier; ``mbarrier.expect``
  arrives once and adds the bytes it expects, as the hardware's ``arrive.expect_tx``;
* ``warpgroup_mma`` is a float32 product of its operands (shared memory or registers);
  waits, fences and layouts do nothing; shared memory starts as NaN;
* scalars are 0-d int64 tensors, so index arithmetic wraps only where Python's would.

What it cannot see: the hardware's timing and memory ordering, register and shared-memory
limits, layouts. Those are the static check's (``ceiling.nvidia.gluon.static_check``) and the
device's.
"""

from __future__ import annotations

import functools
import threading
import types
import torch
import triton.language as tl
from triton.runtime.jit import JITFunction

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "int32": torch.int32,
           "int64": torch.int64, "int8": torch.int8, "int1": torch.bool}
TIMEOUT_S = 30.0


def _torch_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    return _DTYPES[str(dtype)]


class _TypeInfo:
    """``x.type`` of a kernel value: ``.layout`` (nothing, here) and still callable as torch's."""

    def __init__(self, tensor):
        self.tensor, self.layout = tensor, None

    def __call__(self, *args, **kwargs):
        return torch.Tensor.type(self.tensor, *args, **kwargs)


class T(torch.Tensor):
    """A register tensor or scalar of the emulated kernel."""

    def to(self, dtype, bitcast: bool = False):  # noqa: D102 - the Gluon signature
        dtype = _torch_dtype(dtype)
        return self.view(dtype) if bitcast else torch.Tensor.to(self, dtype)

    @property
    def type(self):
        return _TypeInfo(self)


def t(x) -> T:
    return torch.as_tensor(x).as_subclass(T)


def scalar(x) -> T:
    return t(torch.tensor(x, dtype=torch.float32 if isinstance(x, float) else torch.int64))


# ----------------------------------------------------------------------------------------------
# Shared memory, mbarriers, descriptors, pointers
# ----------------------------------------------------------------------------------------------


class Smem:
    def __init__(self, data: torch.Tensor, barriers=None):
        self.data, self.barriers = data, barriers

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def shape(self):
        return list(self.data.shape)

    def index(self, i):
        i = int(i)
        if not 0 <= i < self.data.shape[0]:  # no wrap-around: a slot index out of range is a bug
            raise IndexError(f"shared-memory index {i} outside [0, {self.data.shape[0]})")
        return Smem(self.data[i], None if self.barriers is None else self.barriers[i])

    def reshape(self, shape):
        return Smem(self.data.reshape([int(s) for s in shape]))

    def permute(self, order):
        return Smem(self.data.permute(*order))

    def slice(self, start, length, dim=0):
        return Smem(self.data.narrow(int(dim), int(start), int(length)))

    def load(self, layout=None):
        return t(self.data.clone())

    def store(self, value):
        self.data.copy_(value)


class Barrier:
    """One mbarrier: arrivals and transaction bytes outstanding in the current phase."""

    def __init__(self, cond: threading.Condition):
        self.cond, self.count, self.pending, self.tx, self.phase = cond, 0, 0, 0, 0

    def init(self, count: int):
        self.count = self.pending = int(count)

    def _settle(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count
            self.cond.notify_all()

    def arrive(self, n: int = 1, tx: int = 0):
        with self.cond:
            self.pending -= n
            self.tx += tx
            if self.pending < 0:
                raise RuntimeError("mbarrier: more arrivals than its count in one phase")
            self._settle()

    def complete_tx(self, nbytes: int):
        with self.cond:
            self.tx -= nbytes
            self._settle()

    def wait(self, parity: int):
        with self.cond:
            if not self.cond.wait_for(lambda: (self.phase & 1) != int(parity), timeout=TIMEOUT_S):
                raise TimeoutError(f"mbarrier.wait(parity={int(parity)}) never completed (phase {self.phase}, "
                                   f"{self.pending} arrivals and {self.tx} bytes outstanding): a deadlock")


class Desc:
    """A TMA descriptor over a torch tensor (built from the host's ``TensorDescriptor``)."""

    def __init__(self, host):
        self.base = host.base.reshape([int(s) for s in host.shape])
        self.block = [int(b) for b in host.block_shape]
        self.layout = host.layout
        self.dtype = self.base.dtype
        nbytes = self.base.element_size()
        for b in self.block:
            nbytes *= b
        self.block_type = types.SimpleNamespace(shape=list(self.block), nbytes=nbytes)

    def window(self, coord):
        """(slices into the tensor, slices into the block) of the box at ``coord``, clipped."""
        src, dst = [], []
        for c, b, n in zip((int(x) for x in coord), self.block, self.base.shape):
            lo, hi = max(c, 0), min(c + b, n)
            hi = max(hi, lo)
            src.append(slice(lo, hi))
            dst.append(slice(lo - c, hi - c))
        return tuple(src), tuple(dst)


class Pointer:
    """A pointer into a flat tensor, plus offsets (a tensor of them after pointer arithmetic)."""

    def __init__(self, flat: torch.Tensor, offsets=None):
        self.flat, self.offsets = flat, torch.zeros((), dtype=torch.int64) if offsets is None else offsets
        self.dtype = types.SimpleNamespace(element_ty=flat.dtype)

    def __add__(self, other):
        return Pointer(self.flat, self.offsets + torch.as_tensor(other, dtype=torch.int64))

    __radd__ = __add__


# ----------------------------------------------------------------------------------------------
# gl and the Hopper operations, on PyTorch
# ----------------------------------------------------------------------------------------------


class _Layouts:
    """Layout constructors: the emulation has no layouts."""

    def __init__(self, *args, **kwargs):
        pass

    @staticmethod
    def get_default_for(*args, **kwargs):
        return None


def _num(x):
    return x if isinstance(x, torch.Tensor) else torch.as_tensor(x)


def _minmax(op):
    def f(a, b, propagate_nan=None):
        a, b = _num(a), _num(b)
        dtype = torch.promote_types(a.dtype, b.dtype)
        return t(op(a.to(dtype), b.to(dtype)))
    return f


class _Program:
    local = threading.local()


def _make_gl():
    def full(shape, value, dtype, layout=None):
        return t(torch.full([int(s) for s in shape], value, dtype=_torch_dtype(dtype)))

    def zeros(shape, dtype, layout=None):
        return full(shape, 0, dtype)

    def store(ptr, value, mask=None):
        offsets = ptr.offsets
        value = torch.as_tensor(value).to(ptr.flat.dtype).expand(offsets.shape)
        if mask is None:
            ptr.flat[offsets.reshape(-1)] = value.reshape(-1)
            return
        keep = torch.as_tensor(mask).expand(offsets.shape)
        ptr.flat[offsets[keep]] = value[keep]

    def allocate_shared_memory(dtype, shape, layout, value=None):
        dtype = _torch_dtype(dtype)
        shape = [int(s) for s in shape]
        if dtype == torch.int64:  # mbarriers
            cond = threading.Condition()
            count = 1
            for s in shape[:-1]:
                count *= s
            bars = [Barrier(cond) for _ in range(count)]
            return Smem(torch.zeros(shape, dtype=dtype), bars if len(shape) > 1 else bars[0])
        return Smem(torch.full(shape, float("nan"), dtype=dtype))

    def warp_specialize(functions_and_args, worker_num_warps, worker_num_regs=None):
        errors, threads = [], []
        program, grid = _Program.local.program, _Program.local.grid

        def run(fn, args):
            _Program.local.program, _Program.local.grid = program, grid
            try:
                fn(*args)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the launching thread
                errors.append(exc)

        for fn, args in functions_and_args:
            threads.append(threading.Thread(target=run, args=(fn, args), daemon=True))
        for th in threads:
            th.start()
        for th in threads:
            th.join(TIMEOUT_S * 4)
        if errors:
            raise errors[0]
        if any(th.is_alive() for th in threads):
            raise TimeoutError("a partition never finished: a deadlock")

    ns = types.SimpleNamespace(
        constexpr=lambda x: x, float32=torch.float32, float16=torch.float16, bfloat16=torch.bfloat16,
        int32=torch.int32, int64=torch.int64,
        NVMMADistributedLayout=_Layouts, DotOperandLayout=_Layouts, SliceLayout=_Layouts, BlockedLayout=_Layouts,
        NVMMASharedLayout=_Layouts,
        full=full, zeros=zeros, zeros_like=lambda x: t(torch.zeros_like(x)),
        arange=lambda start, end, layout=None: t(torch.arange(int(start), int(end), dtype=torch.int64)),
        expand_dims=lambda x, axis: t(_num(x).unsqueeze(axis)),
        where=lambda c, a, b: t(torch.where(_num(c), _num(a), _num(b))),
        maximum=_minmax(torch.maximum), minimum=_minmax(torch.minimum),
        max=lambda x, axis: t(_num(x).amax(axis)), sum=lambda x, axis: t(_num(x).sum(axis)),
        exp2=lambda x: t(torch.exp2(x)), log2=lambda x: t(torch.log2(x)),
        split=lambda x: (t(x[..., 0]), t(x[..., 1])), join=lambda a, b: t(torch.stack([a, b], -1)),
        reshape=lambda x, shape: t(x.reshape([int(s) for s in shape])),
        convert_layout=lambda x, layout, assert_trivial=False: x,
        cdiv=lambda a, b: (a + b - 1) // b,
        program_id=lambda axis: scalar(_Program.local.program[int(axis)]),
        num_programs=lambda axis: scalar(_Program.local.grid[int(axis)]),
        static_range=lambda *a: range(*(int(x) for x in a)),
        static_assert=lambda cond, msg="": None,
        store=store, allocate_shared_memory=allocate_shared_memory, warp_specialize=warp_specialize,
    )
    return ns


def _operand(x) -> torch.Tensor:
    return (x.data if isinstance(x, Smem) else x).to(torch.float32)


def warpgroup_mma(a, b, acc, *, use_acc=True, precision=None, max_num_imprecise_acc=None, is_async=False):
    out = _operand(a) @ _operand(b)
    if bool(use_acc):
        out = out + acc
    return t(out)


def warpgroup_mma_wait(num_outstanding=0, deps=None):
    return deps[0] if len(deps) == 1 else tuple(deps)


def tma_load(desc, coord, bar, smem):
    src, dst = desc.window(coord)
    smem.data.zero_()
    smem.data[dst] = desc.base[src]
    bar.barriers.complete_tx(desc.block_type.nbytes) if isinstance(bar.barriers, Barrier) else None


def tma_store(desc, coord, smem):
    src, dst = desc.window(coord)
    desc.base[src] = smem.data[dst].to(desc.dtype)


# A TMA reduction is atomic in the hardware; partitions here are threads, and two in-place adds to
# the same rows (both backward consumers add to every dQ row of their query block) race without it.
_REDUCTIONS = threading.Lock()


def tma_atomic_add(desc, coord, smem):
    src, dst = desc.window(coord)
    with _REDUCTIONS:
        desc.base[src] += smem.data[dst].to(desc.dtype)


class _Mbarrier:
    @staticmethod
    def MBarrierLayout(*args, **kwargs):
        return None

    @staticmethod
    def init(bar, count):
        bar.barriers.init(count)

    @staticmethod
    def expect(bar, nbytes, pred=True):
        bar.barriers.arrive(1, int(nbytes))

    @staticmethod
    def arrive(bar, *, count=1, pred=True):
        bar.barriers.arrive(int(count))

    @staticmethod
    def wait(bar, phase, pred=True, deps=()):
        bar.barriers.wait(int(phase))


_TMA = types.SimpleNamespace(store_wait=lambda pendings, read_only=True: None)


@functools.cache
def _namespace(module_name: str) -> dict:
    """The globals the emulated functions of ``module_name`` run with: its own, with every Gluon
    function replaced by its emulated twin and the Gluon API by the emulation."""
    import importlib

    module = importlib.import_module(module_name)
    ns = dict(vars(module))
    ns.update(gl=_make_gl(), tl=types.SimpleNamespace(PropagateNan=tl.PropagateNan), mbarrier=_Mbarrier, tma=_TMA,
              tma_load=tma_load, tma_store=tma_store, tma_atomic_add=tma_atomic_add, warpgroup_mma=warpgroup_mma,
              warpgroup_mma_wait=warpgroup_mma_wait, fence_async_shared=lambda cluster=False: None)
    for name, value in list(ns.items()):
        if isinstance(value, tl.constexpr):
            ns[name] = value.value
    for name, value in list(ns.items()):
        if isinstance(value, JITFunction):
            ns[name] = _twin(value, ns)
    return ns


def _twin(fn: JITFunction, ns: dict):
    py = fn.fn
    if py.__module__ != ns["__name__"]:  # a helper imported from another kernel module
        ns_other = _namespace(py.__module__)
        return ns_other[py.__name__]
    return types.FunctionType(py.__code__, ns, py.__name__, py.__defaults__, py.__closure__)


def _argument(value):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    if isinstance(value, TensorDescriptor):
        return Desc(value)
    if isinstance(value, torch.Tensor):
        return Pointer(value.view(-1))
    if isinstance(value, (bool, int, float)) and not isinstance(value, bool):
        return scalar(value)
    return value


class Emulated:
    """Stands in for a Gluon kernel: ``kernel[grid](*args, **constexprs)`` runs each program of
    the grid, one after another, through the emulated source."""

    def __init__(self, kernel: JITFunction):
        self.kernel = kernel
        self.fn = _namespace(kernel.fn.__module__)[kernel.fn.__name__]

    def __getitem__(self, grid):
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))

        def launch(*args, num_warps=4, **kwargs):
            values = dict(zip(self.kernel.arg_names, args))
            values.update(kwargs)
            constexprs = {self.kernel.arg_names[i] for i in self.kernel.constexprs}
            call = {k: v if k in constexprs else _argument(v) for k, v in values.items()}
            _Program.local.grid = grid
            for z in range(grid[2]):
                for y in range(grid[1]):
                    for x in range(grid[0]):
                        _Program.local.program = (x, y, z)
                        self.fn(**call)
        return launch


def install(monkeypatch) -> None:
    """Replace both Gluon attention kernels by their emulations for one test."""
    from ceiling.nvidia.gluon import attention_bwd, attention_fwd

    monkeypatch.setattr(attention_fwd, "attention_fwd_kernel", Emulated(attention_fwd.attention_fwd_kernel))
    monkeypatch.setattr(attention_bwd, "attention_bwd_kernel", Emulated(attention_bwd.attention_bwd_kernel))


__all__ = ["Emulated", "install", "T", "t", "scalar"]
