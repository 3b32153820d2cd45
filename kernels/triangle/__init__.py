"""AlphaFold 3 pair kernels: triangle attention and the triangle multiplicative update
(``ceiling.triangle_attention``, ``ceiling.triangle_multiplicative_update``) on PyTorch tensors or JAX
arrays in cuEquivariance's argument forms, the modules that load Boltz/OpenFold weights strictly
(:mod:`ceiling.triangle.modules`) and :func:`patch`, which swaps them into a model. The conventions
are in ``CONVENTIONS.md`` next to this file, the rest in ``docs/triangle.md``.
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
