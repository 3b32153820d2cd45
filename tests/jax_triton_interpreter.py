"""A stand-in for ``jax_triton.triton_call`` that runs the kernel under the Triton interpreter.

The ops' JAX-on-GPU launchers reach jax-triton through ``ceiling.jax_bridge.triton_call``.
Patching that one function with :func:`interpreted_triton_call` (and ``on_gpu`` to True)
runs the whole GPU code path on the CPU: the launcher's configs, grids, padding, dummy
operands, zeroed outputs and post-processing, and the jax-order wrapper kernels themselves,
interpreted on torch tensors inside a ``jax.pure_callback``. Only jax-triton's lowering is
left out. Arguments are checked the way jax-triton reads them: positional inputs, then one
pointer per output, then the constexprs by name; integer and ``np.float32`` scalars only
(a Python float would reach the kernel as fp64). Outputs start as NaN, except the
``zeroed_outputs``, so an element no program writes fails the NaN checks.
"""

from __future__ import annotations

import numpy as np
import pytest


def _is_scalar(x) -> bool:
    return isinstance(x, (bool, int, float, np.generic))


def _check_call(kernel, args, outs, meta):
    for i, a in enumerate(args):
        if _is_scalar(a) and not isinstance(a, (bool, int, np.float32)):
            raise TypeError(f"argument {i} of {kernel.__name__}: {type(a).__name__} is not a jax-triton scalar "
                            "(int, bool or np.float32)")
    names = kernel.arg_names
    constexprs = {names[i] for i in kernel.constexprs}
    runtime = [n for n in names if n not in constexprs]
    if len(args) + len(outs) != len(runtime):
        raise TypeError(f"{kernel.__name__}: {len(args)} inputs + {len(outs)} outputs for {len(runtime)} "
                        f"runtime parameters {runtime}")
    if names[:len(runtime)] != runtime:
        raise TypeError(f"{kernel.__name__}: constexpr parameters must follow the inputs and outputs")
    missing, unknown = constexprs - set(meta), set(meta) - constexprs
    if missing or unknown:
        raise TypeError(f"{kernel.__name__}: constexprs missing {sorted(missing)}, unknown {sorted(unknown)}")


CALLS: list[str] = []  # the kernels launched, by name, since the fixture started


def interpreted_triton_call(*args, kernel, out_shape, grid, num_warps=None, num_stages=None, zeroed_outputs=(),
                            **meta):
    import jax
    import torch

    from ceiling.jax_bridge import to_numpy, to_torch
    from ceiling.triton_runtime import interpreted

    single = not isinstance(out_shape, (tuple, list))
    outs = (out_shape,) if single else tuple(out_shape)
    _check_call(kernel, args, outs, meta)
    CALLS.append(kernel.__name__)
    arrays = [a for a in args if not _is_scalar(a)]

    def host(*values):
        it = iter(values)
        targs = [(float(a) if isinstance(a, np.float32) else a) if _is_scalar(a) else to_torch(np.asarray(next(it)))
                 for a in args]
        touts = []
        for i, s in enumerate(outs):
            t = torch.empty(s.shape, dtype=getattr(torch, np.dtype(s.dtype).name))
            touts.append(t.zero_() if i in zeroed_outputs or not t.is_floating_point() else t.fill_(float("nan")))
        interpreted(kernel)[tuple(grid)](*targs, *touts, **meta)
        return tuple(to_numpy(t) for t in touts)

    result = jax.pure_callback(host, outs, *arrays)
    return result[0] if single else result


@pytest.fixture
def jax_triton_interpreted(monkeypatch):
    """Run the JAX-on-GPU launchers on the CPU, their kernels interpreted; yields the list of
    kernels launched."""
    from ceiling import jax_bridge

    CALLS.clear()
    monkeypatch.setattr(jax_bridge, "on_gpu", lambda: True)
    monkeypatch.setattr(jax_bridge, "triton_call", interpreted_triton_call)
    monkeypatch.setattr(jax_bridge, "device_key", lambda vendor: "gfx942" if vendor == "amd" else "sm90")
    monkeypatch.setattr(jax_bridge, "device_name", lambda: "NVIDIA H200")
    return CALLS
