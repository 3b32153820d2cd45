"""The framework front ends every op shares: a ``torch.library`` custom op with fake and autograd
registrations (:mod:`~ceiling.frontends.torch`) and a ``jax.custom_vjp`` function
(:mod:`~ceiling.frontends.jax`), both made from an op's :class:`Signature` and a :class:`ceiling.op.Call`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Signature:
    """The arrays an op takes and gives, by name.

    ``inputs`` in call order (those in ``optional`` may be None); ``outputs`` likewise; ``grads``:
    the inputs that get a gradient (a backward returns one array or None per name, in this
    order); ``saved``: the inputs and outputs the backward reads, in the order it gets them;
    ``constant_outputs``: outputs no gradient flows into (a log-sum-exp). ``output_specs(problem)``
    gives each output's (shape, dtype name) from the problem alone: the fake tensors of
    ``torch.compile`` and the result types of a JAX host callback. ``kept``: outputs an
    implementation returns only under some configs (intermediates kept for the backward), empty
    (shape (0,)) otherwise; ``keeps(call)`` says whether a call returns them."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    output_specs: Callable[[Any], tuple[tuple[tuple[int, ...], str], ...]]
    optional: frozenset[str] = frozenset()
    grads: tuple[str, ...] = ()
    saved: tuple[str, ...] = ()
    constant_outputs: frozenset[str] = frozenset()
    kept: frozenset[str] = frozenset()
    keeps: Callable[[Any], bool] | None = None

    def specs(self, problem: Any, call: Callable[[], Any]) -> tuple[tuple[tuple[int, ...], str], ...]:
        """:attr:`output_specs`, the ``kept`` outputs empty where the call (``call()``, asked only
        when the op has such outputs) does not keep them."""
        specs = self.output_specs(problem)
        if not self.kept or self.keeps(call()):
            return specs
        return tuple(((0,), dtype) if n in self.kept else (shape, dtype)
                     for n, (shape, dtype) in zip(self.outputs, specs))
