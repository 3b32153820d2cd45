"""A config for a newer generation of a target, derived from the older one's: the older target's
heuristic and target-wide table entries for the problem, kept where they satisfy every constraint
of the new target's space (and the search-only ones it adds: spills and lost tensor-core
instructions the compiler showed there), otherwise moved, section by section, to the nearest
point of that section's search grid that does. No entry of a device's own table is carried over: a device's
entry is a measurement on that device."""

from __future__ import annotations

import math
from typing import Any

from ceiling import spaces, tables
from ceiling.spaces import expressions


def _distance(a: Any, b: Any) -> float:
    """How far apart two values of a knob are: doublings for sizes, 1 for any other change."""
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int) or not isinstance(b, int):
        return 0.0 if a == b else 1.0
    if a <= 0 or b <= 0:
        return float(abs(a - b))
    return abs(math.log2(a / b))


def _reads(constraint, section: str) -> bool:
    return not section or any(n.startswith(f"{section}.") for n in expressions.names(constraint.expr))


def breaks(family: str, target: str, config: dict[str, Any], context: dict[str, Any], base_target: str | None = None,
           section: str = "") -> list[str]:
    """Ids of the constraints of ``family``'s space on ``target`` that ``config`` breaks at
    ``context`` (those reading ``section``'s knobs, when given): every hard one, and every
    search-only one except those ``base_target``'s space already has (a tuner's filter there, which
    its own tables may break: the new target's are what its compiler showed)."""
    space = spaces.get(family, target)
    inherited = {c.id for c in spaces.get(family, base_target).flat_constraints()} if base_target else set()
    return [c.id for c, _ in space.broken(config, context, search=True)
            if (not c.search_only or c.id not in inherited) and _reads(c, section)]


def fit(family: str, target: str, config: dict[str, Any], context: dict[str, Any],
        base_target: str | None = None) -> dict[str, Any]:
    """``config`` where it breaks nothing :func:`breaks` names; otherwise each section that does
    moved to the nearest point of its search grid that does not (nearest: the fewest doublings
    and halvings of its knobs)."""
    space = spaces.get(family, target)
    out = spaces.merge(config)
    for section in list(space.sections) or [""]:
        if not breaks(family, target, out, context, base_target, section):
            continue
        current = out.get(section, {}) if section else out

        def valid(point: dict[str, Any]) -> bool:
            trial = spaces.merge(out, {section: point} if section else point)
            return not breaks(family, target, trial, context, base_target, section)

        grid = [p for p in space.grid(section) if valid(p)]
        if not grid:
            continue  # nothing in the grid fits: left for the space's check to name what breaks
        best = min(grid, key=lambda p: sum(_distance(v, current.get(k, v)) for k, v in p.items()))
        out = spaces.merge(out, {section: best} if section else best)
    return out


def derived(backend: str, family: str, base_target: str, target: str, heuristic: dict[str, Any],
            features: dict[str, Any]) -> dict[str, Any]:
    """The config ``target`` runs a problem with when nothing of its own is tuned: ``base_target``'s
    table entries for the problem's ``features`` over its ``heuristic``, fitted to ``target``."""
    found = tables.lookup(backend, family, None, base_target, features).config
    return fit(family, target, spaces.merge(heuristic, found), features, base_target)
