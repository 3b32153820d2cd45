"""``ceiling::<op>``: one ``torch.library`` custom op per op, made from its :class:`Signature`. It takes
the op's tensors and the :class:`ceiling.op.Call` as a string key, so dispatch and config resolution
happen once, in the public function, and ``torch.compile`` sees one opaque node with a fake
implementation; its autograd rule calls ``ceiling::<op>_backward`` unless the op gives a backward of
its own. Implementations run with autocast off: they compute in the precision they define.
"""

from __future__ import annotations

from typing import Any

import torch

from ceiling.frontends import Signature


_EMPTY = (0,)  # the shape of the placeholder a backward returns for a gradient nobody asked for


def _schema(names: tuple[str, ...], optional: frozenset[str]) -> str:
    return ", ".join(f"Tensor{'?' if n in optional else ''} {n}" for n in names)


def _returns(names: tuple[str, ...]) -> str:
    """A schema's return type: one Tensor, or a tuple of them (a custom op returns one tensor bare)."""
    return "Tensor" if len(names) == 1 else f"({', '.join('Tensor' for _ in names)})"


def _returned(tensors: tuple) -> Any:
    return tensors[0] if len(tensors) == 1 else tensors


def _tuple(result: Any) -> tuple:
    return (result,) if isinstance(result, torch.Tensor) else tuple(result)


def _device(tensors) -> torch.device:
    return next(t.device for t in tensors if t is not None)


def _autograd_backward(module, call: "Call", saved: dict[str, Any], grads: dict[str, Any], signature: Signature,
                       needs: dict[str, bool]) -> tuple:
    """The gradients of a ``forward`` with no ``backward`` of its own, by PyTorch's autograd (run
    here, in the autograd rule: inside a custom op autograd records nothing)."""
    run = call.backward
    inputs = {n: saved[n] for n in signature.inputs}
    wanted = [n for n in signature.grads if needs[n] and inputs[n] is not None]
    with torch.enable_grad(), _own_precision(saved.values()):
        leaves = {n: inputs[n].detach().requires_grad_(n in wanted) if inputs[n] is not None else None
                  for n in signature.inputs}
        outs = module.forward(call.problem, run.config, *(leaves[n] for n in signature.inputs))
        pairs = [(o, grads[n]) for o, n in zip(outs, signature.outputs)
                 if n not in signature.constant_outputs and grads[n] is not None and o.requires_grad]
        got = torch.autograd.grad([o for o, _ in pairs], [leaves[n] for n in wanted], [g for _, g in pairs],
                                  allow_unused=True) if pairs and wanted else [None] * len(wanted)
    found = dict(zip(wanted, got))
    return tuple(found.get(n) if found.get(n) is not None or n not in wanted else torch.zeros_like(leaves[n])
                 for n in signature.grads)


def _own_precision(tensors):
    """Autocast off: an implementation computes in the precision it defines (the reference's
    float32 math included), the same in eager mode, where autocast would reach the torch ops
    inside a custom op, and under ``torch.compile``, where it does not."""
    return torch.autocast(_device(tensors).type, enabled=False)


def _has_backward(call) -> bool:
    return hasattr(call.backward.implementation.load(), "backward")


def make(op):
    """The custom op ``ceiling::<op.name>`` with its fake and autograd registrations.

    ``op.torch_backward(call, saved, grads, needs) -> dict``, where the op has one, replaces the
    backward custom op: it is written in terms of other custom ops, so ``torch.compile`` still
    sees no graph break."""
    name, sig, backward = op.name, op.signature, op.torch_backward

    def forward(*args):
        *tensors, key = args
        call = op.call_for(key, tuple(tensors))
        with _own_precision(tensors):
            outs = call.forward.implementation.load().forward(call.problem, call.forward.config, *tensors)
        return _returned(tuple(o.contiguous() for o in outs))

    fwd = torch.library.custom_op(f"ceiling::{name}", forward, mutates_args=(),
                                  schema=f"({_schema(sig.inputs, sig.optional)}, str call) -> {_returns(sig.outputs)}")

    @fwd.register_fake
    def _(*args):
        *tensors, key = args
        device = _device(tensors)
        return _returned(tuple(torch.empty(shape, dtype=getattr(torch, dtype), device=device)
                               for shape, dtype in sig.specs(op.problem_for(key, tuple(tensors)),
                                                             lambda: op.call_for(key, tuple(tensors)))))

    bwd = None
    if backward is None and sig.grads:
        grad_names = tuple(f"grad_{n}" for n in sig.outputs)

        def backward_impl(*args):
            *tensors, needs, key = args
            saved_inputs = dict(zip(sig.saved, tensors[:len(sig.saved)]))
            call = op.call_for(key, tuple(saved_inputs.get(n) for n in sig.inputs))
            saved = dict(zip(sig.saved, tensors[:len(sig.saved)]))
            grads = dict(zip(sig.outputs, tensors[len(sig.saved):]))
            wanted = dict(zip(sig.grads, (c == "1" for c in needs)))
            with _own_precision(tensors):
                got = call.backward.implementation.load().backward(call.problem, call.backward.config, saved, grads,
                                                                   wanted)
            device = _device(tensors)
            return _returned(tuple(g.contiguous() if g is not None else torch.empty(_EMPTY, device=device)
                                   for g in got))

        bwd = torch.library.custom_op(
            f"ceiling::{name}_backward", backward_impl, mutates_args=(),
            schema=f"({_schema(sig.saved, sig.optional)}, "
                   f"{_schema(grad_names, frozenset(grad_names))}, str needs, str call) -> {_returns(sig.grads)}")

        @bwd.register_fake
        def _(*args):
            *tensors, needs, key = args
            saved = dict(zip(sig.saved, tensors[:len(sig.saved)]))
            out = []
            for n, want in zip(sig.grads, needs):
                t = saved[n]
                out.append(torch.empty_like(t, memory_format=torch.contiguous_format)
                           if want == "1" and t is not None else torch.empty(_EMPTY, device=_device(tensors)))
            return _returned(tuple(out))

    def setup_context(ctx, inputs, output):
        *tensors, key = inputs
        output = _tuple(output)
        values = {**dict(zip(sig.inputs, tensors)), **dict(zip(sig.outputs, output))}
        ctx.save_for_backward(*(values[n] for n in sig.saved))
        ctx.key = key
        # the problem, from the inputs (a deferred call's is checked now), for a backward of the op's own
        # that saves other tensors than its inputs
        ctx.problem = op.problem_for(key, tuple(tensors)) if backward is not None else None
        ctx.needs = {n: bool(ctx.needs_input_grad[sig.inputs.index(n)]) and values[n] is not None for n in sig.grads}
        ctx.mark_non_differentiable(*(values[n] for n in sig.constant_outputs))

    def autograd_backward(ctx, *grads):
        saved = dict(zip(sig.saved, ctx.saved_tensors))
        by_output = dict(zip(sig.outputs, grads))
        if backward is not None:
            got = backward(op.call_for(ctx.key, tuple(saved.get(n) for n in sig.inputs), ctx.problem), saved,
                           by_output, ctx.needs)
        elif not any(ctx.needs.values()):
            got = {}
        elif not _has_backward(call := op.call_for(ctx.key, tuple(saved.get(n) for n in sig.inputs))):
            flat = _autograd_backward(call.backward.implementation.load(), call, saved, by_output, sig, ctx.needs)
            got = {n: g for n, g in zip(sig.grads, flat) if ctx.needs[n]}
        else:
            needs = "".join("1" if ctx.needs[n] else "0" for n in sig.grads)
            flat = _tuple(bwd(*(saved[n] for n in sig.saved),
                              *(g.contiguous() if g is not None else None for g in grads), needs, ctx.key))
            got = {n: g for n, g, want in zip(sig.grads, flat, needs) if want == "1"}
        return (*(got.get(n) if ctx.needs.get(n) else None for n in sig.inputs), None)

    fwd.register_autograd(autograd_backward, setup_context=setup_context)
    return fwd


_OPS: dict[str, Any] = {}


def prepare(op) -> Any:
    """``ceiling::<op.name>``, made on first use."""
    if op.name not in _OPS:
        _OPS[op.name] = make(op)
    return _OPS[op.name]


def apply(op, key: str, *tensors) -> tuple:
    """Run the call ``key`` names on ``tensors`` through ``ceiling::<op.name>``."""
    return _tuple(prepare(op)(*tensors, key))
