"""The JAX front end of every op: one ``jax.custom_vjp`` made from its :class:`Signature`. The
:class:`ceiling.op.Call` is a static argument (JAX traces with concrete shapes, so the problem and
configs are decided once per trace). Each direction runs where its implementation says: the
implementation's own JAX kernels where it has them (Pallas on TPU, jnp on the reference; on a JAX GPU
the Triton sources through jax-triton), else, on the CPU, its PyTorch launchers through a host
callback (the interpreted Triton kernels, the NKI emulator).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np

from ceiling import jax_bridge
from ceiling.errors import BackendUnavailable
from ceiling.frontends import Signature



def _native(module, direction: str):
    """The implementation's JAX launcher for ``direction`` where it runs here, else None."""
    fn = getattr(module, f"{direction}_jax", None)
    if fn is None:
        return None
    where = getattr(module, "JAX", "native")  # "native": anywhere; "gpu": on a JAX GPU (jax-triton)
    return fn if where == "native" or jax_bridge.on_gpu() else None


def _host(call: "Call", direction: str):
    if jax.default_backend() != "cpu":
        raise BackendUnavailable(
            f"{call.op} on {getattr(call, direction).implementation.label} from JAX arrays on "
            f"{jax.default_backend()} has no kernel here; use backend='reference'")


def _specs(specs) -> tuple:
    return tuple(jax.ShapeDtypeStruct(shape, np.dtype(jax.numpy.dtype(dtype))) for shape, dtype in specs)


def _forward(sig: Signature, call: "Call", arrays: tuple) -> tuple:
    module = call.forward.implementation.load()
    native = _native(module, "forward")
    if native is not None:
        return tuple(native(call.problem, call.forward.config, *arrays))
    _host(call, "forward")

    def host(*xs):
        tensors = [None if x is None else jax_bridge.to_torch(np.asarray(x)) for x in xs]
        return tuple(jax_bridge.to_numpy(o) for o in module.forward(call.problem, call.forward.config, *tensors))

    return tuple(jax.pure_callback(host, _specs(sig.specs(call.problem, lambda: call)), *arrays))


def _backward(sig: Signature, call: "Call", saved: dict[str, Any], grads: dict[str, Any]) -> dict[str, Any]:
    run = call.backward
    module = run.implementation.load()
    needs = {n: saved.get(n) is not None for n in sig.grads}
    native = _native(module, "backward")
    if native is not None:
        return dict(zip(sig.grads, native(call.problem, run.config, saved, grads, needs)))
    _host(call, "backward")
    wanted = [n for n in sig.grads if needs[n]]
    specs = _specs([(saved[n].shape, str(saved[n].dtype)) for n in wanted])

    def host(*xs):
        from ceiling.frontends.torch import _autograd_backward

        tensors = [None if x is None else jax_bridge.to_torch(np.asarray(x)) for x in xs]
        got_saved = dict(zip(sig.saved, tensors[:len(sig.saved)]))
        got_grads = dict(zip(sig.outputs, tensors[len(sig.saved):]))
        if hasattr(module, "backward"):
            got = module.backward(call.problem, run.config, got_saved, got_grads, needs)
        else:
            got = _autograd_backward(module, call, got_saved, got_grads, sig, needs)
        by_name = dict(zip(sig.grads, got))
        return tuple(jax_bridge.to_numpy(by_name[n]) for n in wanted)

    flat = jax.pure_callback(host, specs, *(saved[n] for n in sig.saved), *(grads[n] for n in sig.outputs))
    return dict(zip(wanted, flat))


@functools.lru_cache(maxsize=None)
def make(op):
    """The custom VJP function of ``op``: ``f(call, *arrays) -> outputs``; its backward is the
    op's ``jax_backward`` where it has one, else the backward implementation's."""
    sig = op.signature

    @functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
    def apply(call: "Call", *arrays):
        return _forward(sig, call, arrays)

    kept = tuple(dict.fromkeys([*sig.inputs, *sig.saved]))  # every input too: its cotangent's shape

    def fwd(call: "Call", *arrays):
        outs = _forward(sig, call, arrays)
        values = {**dict(zip(sig.inputs, arrays)), **dict(zip(sig.outputs, outs))}
        return outs, tuple(values[n] for n in kept)

    def bwd(call: "Call", residuals, cotangents):
        saved = dict(zip(kept, residuals))
        grads = {n: (None if n in sig.constant_outputs else g) for n, g in zip(sig.outputs, cotangents)}
        if op.jax_backward is not None:
            got = op.jax_backward(call, saved, grads, {n: saved.get(n) is not None for n in sig.grads})
        else:
            got = _backward(sig, call, saved, grads)
        out = []
        for n in sig.inputs:
            x = saved.get(n)
            if n in got and got[n] is not None:
                out.append(got[n])
            elif x is None:
                out.append(None)
            elif n in sig.grads:
                out.append(jax.numpy.zeros(x.shape, x.dtype))
            else:  # booleans and integers take no cotangent
                out.append(np.zeros(x.shape, dtype=jax.dtypes.float0))
        return tuple(out)

    apply.defvjp(fwd, bwd)
    return apply


def apply(op, call: "Call", *arrays) -> tuple:
    return make(op)(call, *arrays)
