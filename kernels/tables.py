"""Tuned configs as data: one file per device and kernel family
(``ceiling/<backend>/tables/<device>/<family>.json``, ``<device>`` a device model such as ``H200`` or a
compile target such as ``sm_90a``), one format, one lookup: the entries of the problem's target's
table, then of its device models', merged in order where their ``when`` holds. The format and the
merge are in ``docs/architecture.md`` ("Tables").
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ceiling.spaces import expressions, merge

ROOT = Path(__file__).parent


def path(backend: str, device: str, family: str) -> Path:
    return ROOT / backend / "tables" / device / f"{family}.json"


def devices(backend: str) -> list[str]:
    """The devices and targets that have tables on ``backend``."""
    base = ROOT / backend / "tables"
    return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


@functools.lru_cache(maxsize=None)
def _read(file: str, stamp: float) -> dict[str, Any]:
    return json.loads(Path(file).read_text())


def read(file: Path) -> dict[str, Any]:
    """A table file (re-read when it changed on disk, as a sweep's --apply changes it)."""
    return _read(str(file), file.stat().st_mtime)


def dumps(table: dict[str, Any]) -> str:
    """A table as the files keep it: the header keys one per line, then one entry per line."""
    head = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in table.items() if k != "entries"]
    entries = ",\n".join(f"  {json.dumps(e)}" for e in table.get("entries", []))
    return "{\n" + ",\n".join([*head, f' "entries": [\n{entries}\n ]']) + "\n}\n"


def write(file: Path, table: dict[str, Any]) -> None:
    """Write a table atomically (a sweep's --apply, ceiling import-point)."""
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(".json.tmp")
    tmp.write_text(dumps(table))
    tmp.replace(file)


def names(device: str, device_name: str) -> bool:
    """Whether the table folder ``device`` ("H200") names the device ``device_name`` ("NVIDIA
    H200"): a whole word of it, so that "H200" does not serve an "NVIDIA GH200"."""
    return re.search(rf"(?<![\w-]){re.escape(device)}(?![\w-])", device_name, re.IGNORECASE) is not None


def model(backend: str, device_name: str) -> str:
    """The folder the tables of the device named ``device_name`` ("NVIDIA H200") are filed under on
    ``backend``, where a sweep's --apply or an imported point goes: one that exists whose name is
    part of the device's ("H200"), else the device's model word (its first upper-case word with a
    digit in it: "MI300X" for "AMD Instinct MI300X")."""
    known = [d for d in devices(backend) if names(d, device_name)]
    if known:
        return known[0]
    words = device_name.replace("(", " ").replace(")", " ").split()
    return next((w for w in words if any(c.isdigit() for c in w) and w.upper() == w), device_name)


def chain(backend: str, family: str, device_name: str | None, target: str | None) -> list[str]:
    """The tables that serve ``device_name`` (a device model's full name, None off a GPU) on
    ``target``, least specific first, among those that exist for ``family``."""
    out = [target] if target else []
    if device_name:
        out += [d for d in devices(backend) if names(d, device_name) and d != target]
    return [d for d in out if path(backend, d, family).exists()]


@dataclass(frozen=True)
class Lookup:
    """What the tables gave a problem: the merged config and the entries it came from."""

    config: dict[str, Any]
    held: tuple[tuple[str, int], ...]  # (table, entry index) of each entry that held, in merge order
    default: dict[str, Any] | None = None  # the last entry that held with "default": true
    labels: tuple[str, ...] = ()  # the labels of the entries that held and have one, in merge order

    @property
    def source(self) -> str:
        if not self.held:
            return "heuristic"
        return "heuristic + " + ", ".join(f"{table}#{i}" for table, i in self.held)


def matches(entry: dict[str, Any], features: dict[str, Any]) -> bool:
    when = entry.get("when")
    return True if when is None else bool(expressions.evaluate(when, features))


def pinned(entry: dict[str, Any]) -> dict[str, Any]:
    """The features an entry's ``when`` fixes to one value (its ``name == constant`` terms joined
    by ``and``): the problem an exact-shape entry is for."""
    import ast

    when = entry.get("when")
    if when is None:
        return {}
    body = expressions.parse(when).body
    terms = body.values if isinstance(body, ast.BoolOp) and isinstance(body.op, ast.And) else [body]
    out = {}
    for term in terms:
        if (isinstance(term, ast.Compare) and len(term.ops) == 1 and isinstance(term.ops[0], ast.Eq)
                and isinstance(term.left, ast.Name) and isinstance(term.comparators[0], ast.Constant)):
            out[term.left.id] = term.comparators[0].value
    return out


def lookup(backend: str, family: str, device_name: str | None, target: str | None,
           features: dict[str, Any]) -> Lookup:
    held, configs, default, labels = [], [], None, []
    for device in chain(backend, family, device_name, target):
        for i, entry in enumerate(read(path(backend, device, family))["entries"]):
            if matches(entry, features):
                held.append((device, i))
                configs.append(entry.get("config"))
                default = entry if entry.get("default") else default
                labels += [entry["label"]] if "label" in entry else []
    return Lookup(merge({}, *configs), tuple(held), default, tuple(labels))
