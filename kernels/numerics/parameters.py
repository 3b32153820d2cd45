"""The published parameters of each tensor core (``parameters.json``), looked up by target and kind.
A target or kind without a published bit-level model is refused with what is missing, never filled
in: the CDNA3 MFMA and the block-scaled MX kinds are known and named as such.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ceiling.errors import InputError

PATH = Path(__file__).with_name("parameters.json")


class Unpublished(InputError):
    """A target or kind whose arithmetic no published model gives; the message says what is missing."""

    def __init__(self, argument: str, name: str, missing: str):
        super().__init__(argument, "a target and kind with a published model", f"{name!r}: {missing}")


@dataclass(frozen=True)
class Parameters:
    target: str
    kind: str
    block: int
    extra_alignment_bits: int
    alignment: str
    rounding: str
    min_exponent: int
    subnormal_inputs: bool
    subnormal_outputs: bool
    provenance: dict

    @property
    def result_fraction_bits(self) -> int:
        """Fraction bits of a block's rounded result: float32's 23, narrowed by negative extra bits."""
        return 23 + min(self.extra_alignment_bits, 0)


@lru_cache(maxsize=1)
def data() -> dict[str, Any]:
    return json.loads(PATH.read_text())


def targets() -> list[str]:
    return list(data()["targets"])


def kinds(target: str) -> list[str]:
    return list(data()["targets"][canonical_target(target)]["kinds"])


def canonical_target(target: str) -> str:
    if not isinstance(target, str):
        raise InputError("target", "a target name", type(target).__name__)
    name = target.strip().lower()
    for key, entry in data()["targets"].items():
        if name in entry["names"]:
            return key
    for key, entry in data()["unpublished"]["targets"].items():
        if name in entry["names"]:
            raise Unpublished("target", target, entry["missing"])
    known = sorted(n for e in data()["targets"].values() for n in e["names"])
    raise InputError("target", f"one of {known}", repr(target))


def lookup(target: str, kind: str) -> Parameters:
    """The parameters of ``kind`` on ``target``; InputError (or Unpublished) naming what is wrong."""
    key = canonical_target(target)
    entry = data()["targets"][key]
    if not isinstance(kind, str):
        raise InputError("kind", "a kind name", type(kind).__name__)
    if kind in data()["unpublished"]["kinds"]:
        raise Unpublished("kind", kind, data()["unpublished"]["kinds"][kind])
    if kind not in entry["kinds"]:
        raise InputError("kind", f"one of {list(entry['kinds'])} on {key}", repr(kind))
    p = entry["kinds"][kind]
    return Parameters(target=key, kind=kind, block=p["block"], extra_alignment_bits=p["extra_alignment_bits"],
                      alignment=p["alignment"], rounding=p["rounding"], min_exponent=p["min_exponent"],
                      subnormal_inputs=p["subnormal_inputs"], subnormal_outputs=p["subnormal_outputs"],
                      provenance=p["provenance"])
