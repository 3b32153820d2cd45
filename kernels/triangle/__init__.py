"""AlphaFold 3 pair kernels: triangle attention and the triangle multiplicative update.

    import ceiling
    out = ceiling.triangle_attention(q, k, v, bias, mask=mask)
    z = ceiling.triangle_multiplicative_update(x, "outgoing", mask=m, p_in_weight=..., ...)

    ceiling.triangle.patch(boltz_or_openfold_model)   # their triangle layers -> ours, same weights

Both ops accept PyTorch tensors (a ``torch.library`` custom op with autograd) or JAX
arrays (a ``jax.custom_vjp`` function), in cuEquivariance's argument forms. Modules
that load Boltz/OpenFold weights strictly are in :mod:`ceiling.triangle.modules`;
:func:`patch` swaps them into a model. The direction conventions, the swap that
AlphaFold 3's released weights need and what padded positions get are in
``CONVENTIONS.md`` next to this file.
"""

from __future__ import annotations

from ceiling.triangle.ops import triangle_attention, triangle_multiplicative_update
from ceiling.triangle.spec import DIRECTIONS, TRIMUL_WEIGHTS

__all__ = ["triangle_attention", "triangle_multiplicative_update", "patch", "DIRECTIONS", "TRIMUL_WEIGHTS"]


def patch(model, backend: str | None = None):
    """Replace every Boltz/OpenFold triangle layer inside ``model`` with ours, in place; see
    :func:`ceiling.triangle.patching.patch` (returns (qualified name, replaced class, new module))."""
    from ceiling.triangle.patching import patch as _patch

    return _patch(model, backend)
