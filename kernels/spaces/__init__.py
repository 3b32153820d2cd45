"""One search space per kernel family and target, as data (``kernels/spaces/<family>.json``, the
targets' limits in ``targets.json``), and its validator: :func:`check`, and :func:`resolve`, which
merges a partial config over the table's entry first, raise :class:`ConfigError`, an ``InputError``
naming the key, the value and what is allowed. What else the data drives is in the README ("Search
spaces").
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from ceiling.spaces.schema import ConfigError, Constraint, Family, Parameter, Section, Space, flatten, nest

__all__ = ["ConfigError", "Constraint", "Family", "Parameter", "Section", "Space", "families", "family", "get",
           "targets", "target_limits", "target_info", "check", "resolve", "merge", "flatten", "nest", "candidates_file"]

DIR = Path(__file__).parent
NOT_FAMILIES = ("targets",)


@functools.cache
def _targets_file() -> dict[str, Any]:
    return json.loads((DIR / "targets.json").read_text())["targets"]


def target_limits(target: str) -> dict[str, float]:
    """The resource limits of a compile target (``targets.json``)."""
    return dict(_targets_file()[target]["limits"])


def target_info(target: str) -> dict[str, Any]:
    """A target's entry in ``targets.json``: backend, devices, the device templates describe, limits."""
    return dict(_targets_file()[target])


def families() -> list[str]:
    return sorted(p.stem for p in DIR.glob("*.json") if p.stem not in NOT_FAMILIES)


@functools.cache
def _raw(name: str) -> dict[str, Any]:
    path = DIR / f"{name}.json"
    if not path.exists():
        raise KeyError(f"no search space for {name!r}; known: {families()}")
    return json.loads(path.read_text())


def _resolved_target(name: str, target: str, seen: tuple = ()) -> dict[str, Any]:
    """A target's raw entry with ``like`` (another target of this family, or ``family:target``)
    taken as its base: the keys it gives replace the base's; ``extend`` adds constraints to the
    base's (``{"constraints": [...], "sections": {"fwd": [...]}}``: a newer generation's limits
    on the same kernels) and ``drop`` removes parameters (a key whose kernels it lacks)."""
    raw = dict(_raw(name)["targets"][target])
    like = raw.pop("like", None)
    extend, drop = raw.pop("extend", {}), raw.pop("drop", [])
    if like is None:
        return raw
    base_family, base_target = like.split(":") if ":" in like else (name, like)
    if (base_family, base_target) in seen:
        raise ValueError(f"{name}/{target}: 'like' loops through {seen}")
    out = {**_resolved_target(base_family, base_target, (*seen, (name, target))), **raw}
    if drop:
        out["parameters"] = {k: v for k, v in out.get("parameters", {}).items() if k not in drop}
    if extend.get("constraints"):
        out["constraints"] = [*out.get("constraints", []), *extend["constraints"]]
    for section, extra in extend.get("sections", {}).items():
        out["sections"] = {**out["sections"], section: {**out["sections"][section],
                                                        "constraints": [*out["sections"][section].get("constraints", []), *extra]}}
    return out


@functools.cache
def family(name: str) -> Family:
    raw = _raw(name)
    spaces = {}
    for target in raw["targets"]:
        entry = _resolved_target(name, target)
        info = target_info(target)
        entry.setdefault("backend", info["backend"])
        entry.setdefault("device", info["device"])
        entry["limits"] = {**info["limits"], **entry.get("limits", {})}
        spaces[target] = Space(family=name, target=target, **entry)
        spaces[target]._nested = {key: get(p.space, target) for key, p in spaces[target].parameters.items() if p.space}
    return Family(**{**raw, "targets": spaces})


def targets(name: str) -> list[str]:
    return list(family(name).targets)


def get(name: str, target: str) -> Space:
    fam = family(name)
    if target not in fam.targets:
        raise KeyError(f"{name} has no space for target {target!r}; known: {list(fam.targets)}")
    return fam.targets[target]


def merge(base: dict[str, Any], *overrides: dict[str, Any] | None) -> dict[str, Any]:
    """``base`` with each override applied, section by section for dict values."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for override in overrides:
        for key, value in (override or {}).items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key].update(value)
            else:
                out[key] = dict(value) if isinstance(value, dict) else value
    return out


def check(name: str, target: str, config: Any, context: dict[str, Any] | None = None, partial: bool = False) -> None:
    """:meth:`Space.check` of the family's space on ``target``."""
    get(name, target).check(config, context, partial)


def resolve(name: str, target: str, base: dict[str, Any], config: dict[str, Any] | None,
            context: dict[str, Any] | None = None) -> dict[str, Any]:
    """A partial ``config`` checked (keys and values), merged over ``base`` (the table's or the
    heuristic's entry for this problem), and the result checked whole (constraints included)."""
    space = get(name, target)
    if config is not None:
        space.check(config, partial=True)
    merged = merge(base, config)
    space.check(merged, context)
    return merged


def candidates_file(name: str, target: str) -> Path:
    """The statically filtered candidate lists of a family's sweep on ``target`` (generated by
    ``python -m ceiling.tuning.space``)."""
    return DIR / "candidates" / f"{name}.{target}.json"
