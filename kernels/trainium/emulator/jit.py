"""``nki.jit`` on the emulator: numpy arrays in, numpy arrays out, one trace per call."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ceiling.trainium.emulator import memory, rules, state
from ceiling.trainium.emulator.memory import Tensor


@dataclass(frozen=True)
class ShapeDtype:
    """A kernel argument known only by shape and dtype (for dry runs of large shapes)."""

    shape: tuple[int, ...]
    dtype: object


def _to_hbm(x, name: str):
    if isinstance(x, Tensor):
        return x
    if isinstance(x, ShapeDtype):
        return memory.new(x.shape, memory.np_dtype(x.dtype), "hbm", name, written=True)
    if isinstance(x, np.ndarray):
        data = None if state.current().dry else x
        return memory.new(x.shape, x.dtype, "hbm", name, data=data, written=True)
    return x  # Python values: shapes, flags, configs


def _from_hbm(t):
    if isinstance(t, Tensor):
        rules.hbm_output(t)
        t.check_written("nki.jit (kernel output)")
        return None if t._data is None else np.array(t._data)
    if isinstance(t, (tuple, list)):
        return type(t)(_from_hbm(x) for x in t)
    return t


class Kernel:
    """A kernel function run on the emulator.

    Call it inside ``emulate(target=...)`` (then the trace lands in that context), or pass
    ``target=`` (and optionally ``dry=True``) to the call. ``last_context`` keeps the most
    recent run's context (its ``trace`` feeds ``cost.estimate``).
    """

    def __init__(self, fn, target: str | None = None, dry: bool = False):
        self.fn, self.target, self.dry = fn, target, dry
        self.last_context: state.Context | None = None
        functools.update_wrapper(self, fn)

    def _run(self, args, kwargs):
        names = self.fn.__code__.co_varnames
        hbm_args = [_to_hbm(a, names[i] if i < len(names) else f"arg{i}") for i, a in enumerate(args)]
        hbm_kwargs = {k: _to_hbm(v, k) for k, v in kwargs.items()}
        return _from_hbm(self.fn(*hbm_args, **hbm_kwargs))

    def __call__(self, *args, target: str | None = None, dry: bool | None = None, **kwargs):
        target = target or self.target
        ctx = state.active()
        if ctx is not None and (target is None or target == ctx.target.name) and dry in (None, ctx.dry):
            self.last_context = ctx
            return self._run(args, kwargs)
        if target is None:
            state.current()  # raises NoTargetError
        with state.emulate(target, dry=self.dry if dry is None else dry) as ctx:
            self.last_context = ctx
            return self._run(args, kwargs)

    def __getitem__(self, grid):
        if grid not in (1, (1,)):
            raise NotImplementedError("the emulator runs one logical NeuronCore (LNC=1)")
        return self


def jit(fn=None, *, target: str | None = None, dry: bool = False, **kwargs):
    """``@nki.jit`` or ``@nki.jit(target="trn2")``. Other NKI options are accepted and ignored."""
    if fn is None:
        return lambda f: Kernel(f, target, dry)
    return Kernel(fn, target, dry)
