"""A kernel's config as typed data: a point of its space on its target, resolved once per call by
:func:`resolve` (the implementation's heuristic, then the tuned tables' entries for the device and
the problem's features, then the caller's ``config=``, the result checked once against the space)
into a :class:`Config`: read-only, hashable, and printable as the JSON a custom op carries.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Iterator

from ceiling.errors import InputError


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    return value


class Config(Mapping):
    """A resolved config of one family on one target (its space), with where it came from.

    Reads like the nested dict the kernels always took (``config["fwd"]["block_m"]``), but
    cannot be changed: a launcher that needs another value asks for another config."""

    __slots__ = ("_values", "family", "target", "source", "_json")

    def __init__(self, values: Mapping[str, Any], family: str, target: str, source: str = ""):
        self._values = _freeze(values)
        self.family, self.target, self.source = family, target, source
        self._json = json.dumps({"family": family, "target": target, "source": source, "values": _thaw(values)},
                                sort_keys=True)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __hash__(self) -> int:
        return hash(self._json)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Config):
            return self._json == other._json
        return isinstance(other, Mapping) and self.as_dict() == _thaw(other)

    def __repr__(self) -> str:
        return f"Config({self.family}@{self.target}, {self.as_dict()}, from {self.source})"

    def as_dict(self) -> dict[str, Any]:
        """A plain, mutable copy."""
        return _thaw(self._values)

    def json(self) -> str:
        return self._json

    @staticmethod
    def from_json(text: str) -> "Config":
        return _from_json(text)


@functools.lru_cache(maxsize=1024)
def _from_json(text: str) -> Config:
    data = json.loads(text)
    return Config(data["values"], data["family"], data["target"], data["source"])


def resolve(family: str, target: str, heuristic: dict[str, Any], tuned: dict[str, Any], user: Any,
            features: dict[str, Any], source: str = "") -> Config:
    """``user`` over ``tuned`` over ``heuristic``, section by section, checked once against the
    space of ``family`` on ``target`` at the problem's ``features``."""
    from ceiling import spaces

    space = spaces.get(family, target)
    if user is not None and not isinstance(user, Mapping):
        raise InputError("config", f"a dict with keys among {space.keys()} (or None)", type(user).__name__)
    merged = spaces.merge(heuristic, tuned, _thaw(user) if user else None)
    space.check(merged, features)
    return Config(merged, family, target, source + (" + config=" if user else ""))
