"""``ceiling.triangle.patch(model)``: swap a Boltz or OpenFold model's triangle layers, found by class,
for this library's, holding the same parameter tensors. Which classes it finds, and when an
optimizer must be built after it, are in ``docs/triangle.md`` ("Patching").
"""

from __future__ import annotations

from torch import nn

from ceiling.triangle.modules import TriangleAttention, TriangleMultiplication

# (defining module, class name) -> the kind of layer, and for the multiplicative update the
# direction the class fixes (None: read from the instance).
KNOWN: dict[tuple[str, str], tuple[str, str | None]] = {
    ("boltz.model.layers.triangular_mult", "TriangleMultiplicationOutgoing"): ("trimul", "outgoing"),
    ("boltz.model.layers.triangular_mult", "TriangleMultiplicationIncoming"): ("trimul", "incoming"),
    ("boltz.model.layers.triangular_attention.attention", "TriangleAttention"): ("attention", None),
    ("openfold.model.triangular_multiplicative_update", "TriangleMultiplicativeUpdate"): ("trimul", None),
    ("openfold.model.triangular_multiplicative_update", "FusedTriangleMultiplicativeUpdate"): ("trimul", None),
    ("openfold.model.triangular_attention", "TriangleAttention"): ("attention", None),
}


def recognise(module: nn.Module) -> tuple[str, str | None] | None:
    """``KNOWN``'s entry for the first class of ``module``'s MRO that it lists, else None."""
    for cls in type(module).__mro__:
        found = KNOWN.get((cls.__module__, cls.__qualname__))
        if found is not None:
            return found
    return None


def _eps(*norms: nn.Module) -> float:
    eps = {float(n.eps) for n in norms}
    if len(eps) != 1:
        raise ValueError(f"model: the layer's LayerNorms use different eps {sorted(eps)}; ours takes one")
    return eps.pop()


def replacement(module: nn.Module, backend: str | None = None) -> nn.Module:
    """Our layer computing what ``module`` (a Boltz/OpenFold triangle layer) computes, holding its weights."""
    kind, direction = recognise(module) or (None, None)
    state = module.state_dict(keep_vars=True)
    if kind == "trimul":
        if direction is None:  # OpenFold's classes keep the direction in an attribute
            direction = "outgoing" if module._outgoing else "incoming"
        boltz = hasattr(module, "norm_in")
        norms = (module.norm_in, module.norm_out) if boltz else (module.layer_norm_in, module.layer_norm_out)
        new = TriangleMultiplication.from_state_dict(state, direction, eps=_eps(*norms), backend=backend, assign=True)
    elif kind == "attention":
        new = TriangleAttention.from_state_dict(state, bool(module.starting), eps=_eps(module.layer_norm),
                                                backend=backend, assign=True)
        new.inf = module.inf
    else:
        raise ValueError(f"module: expected a Boltz or OpenFold triangle layer, got {type(module).__qualname__}")
    if not any(p.requires_grad for p in module.parameters()):
        new.requires_grad_(False)  # a frozen layer stays frozen (the stacked OpenFold projections included)
    return new.train(module.training)


def patch(model: nn.Module, backend: str | None = None) -> list[tuple[str, type, nn.Module]]:
    """Replace, in place, every Boltz/OpenFold triangle layer inside ``model`` with ours.

    Returns one ``(qualified name, replaced class, new module)`` per layer, in the
    order ``named_modules`` visits them. ``backend`` is passed to every new layer
    (None: the device's vendor at each call, the reference on the CPU).
    """
    if recognise(model) is not None:
        raise ValueError(f"model: a {type(model).__qualname__} is itself a triangle layer and cannot be replaced in "
                         "place; use ceiling.triangle.patching.replacement(model) for a new module")
    replaced: list[tuple[str, type, nn.Module]] = []
    for name, module in list(model.named_modules()):
        if any(name.startswith(done + ".") for done, _, _ in replaced):
            continue  # inside a layer already replaced
        if recognise(module) is None:
            continue
        parent_name, _, leaf = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        new = replacement(module, backend)
        setattr(parent, leaf, new)
        replaced.append((name, type(module), new))
    return replaced
