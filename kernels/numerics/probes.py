"""The feature-revealing probes, written out as data (``probes.json``): each probe is one dot
product of length ``LENGTH``, ``D = sum_i a_i * b_i + c``, run as the first row and column of a
tensor-core MMA (every other element zero), and carries, for each hypothesis of its feature, the
float32 bits that hypothesis predicts, derived here in closed form (exact binary fractions), never by
the model, so the model and a device are both judged by them. The method is Fasi et al.'s (2021) and
Khattak and Mikaitis' (HPEC 2025); ``FEATURES`` says what each probe holds and how a feature is read.
"""

from __future__ import annotations

import json
import struct
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any

PATH = Path(__file__).with_name("probes.json")
LENGTH = 64
KINDS = ("fp16", "bf16", "tf32", "e4m3", "e5m2")
ALIGN_PROBES = range(1, 27)
ACC_PROBES = range(1, 24)
BLOCK_PROBES = range(2, LENGTH)
BIG, TINY = 16, -12  # exponents of +-B and t: 28 binades apart, beyond any aligned sum probed

FEATURES = {
    "subnormal_inputs": {
        "hypotheses": ["kept", "flushed"], "read": "the hypothesis matched",
        "probe": "the smallest subnormal operand times a power of two"},
    "subnormal_outputs": {
        "hypotheses": ["kept", "flushed"], "read": "the hypothesis matched",
        "probe": "a subnormal accumulator (2^-127) through a block of zero products"},
    "alignment_bits": {
        "hypotheses": ["kept", "dropped"],
        "read": "w - 23 for the largest w whose probes 1..w are all kept (extra alignment bits)",
        "probe": "w: c = 2^E beside products 2^(E-w) (2^(w-23) of them past 23) summing to 2^(E-min(w,23)): "
                 "kept when the aligned sum holds w bits below the largest exponent"},
    "accumulator_bits": {
        "hypotheses": ["kept", "dropped"],
        "read": "the largest k whose probes 1..k are all kept (fraction bits of the block result)",
        "probe": "k: c = 2^16 (1 + 2^-k) beside one tiny product: the bits of the accumulator a block keeps"},
    "block": {
        "hypotheses": ["same block", "later block"],
        "read": "the first j in a later block, every later j too (the block FMA size)",
        "probe": "j: products +B and -B at positions 0 and 1 and a tiny t at position j: t survives only when "
                 "summed in a later block than the cancelling pair"},
    "rounding": {
        "hypotheses": ["rz", "rne", "ru", "rd"], "read": "the hypothesis both probes match",
        "probe": "c = 2^E with products 0.75 ulp(c) above it, and the negated probe"},
    "accumulator_order": {
        "hypotheses": ["with the products", "after the products"], "read": "the hypothesis matched",
        "probe": "c = t beside +B and -B in one block: c aligned with the products loses t (0), added after "
                 "them keeps it"},
}


def bits(x: Fraction | float) -> str:
    """float32 bits of an exactly representable value, as 0x........"""
    return "0x%08x" % struct.unpack("<I", struct.pack("<f", float(x)))[0]


def _factor(e: int, kind: str) -> tuple[float, float]:
    """Two normal operands of ``kind`` whose product is 2**e."""
    lo = {"e4m3": -6, "e5m2": -14, "fp16": -14}.get(kind, -126)
    first = e // 2
    second = e - first
    assert first >= lo and second >= lo, (kind, e)
    return 2.0 ** first, 2.0 ** second


def _probe(pid: str, feature: str, kind: str, terms: list[tuple[int, int, int]], c: Fraction,
           outcomes: dict[str, Fraction], raw: list[tuple[int, float, float]] = ()) -> dict[str, Any]:
    """terms: (position, sign, exponent) products made of normal factors; raw: explicit (position, a, b)."""
    entries = [[pos, sign * _factor(e, kind)[0], _factor(e, kind)[1]] for pos, sign, e in terms]
    entries += [[pos, a, b] for pos, a, b in raw]
    return {"id": pid, "feature": feature, "terms": sorted(entries), "c": float(c),
            "outcomes": {h: bits(v) for h, v in outcomes.items()}}


def _kind_probes(kind: str) -> list[dict[str, Any]]:
    two = Fraction(2)
    scale = 14 if kind == "e4m3" else 0  # e4m3's products reach only 2^-12 as normal numbers
    sub = {"fp16": (-24, 0), "bf16": (-133, 64), "tf32": (-136, 64), "e4m3": (-9, 0), "e5m2": (-16, 0)}[kind]
    out: list[dict[str, Any]] = []
    p = sub[0] + sub[1]
    out.append(_probe("subnormal_inputs", "subnormal_inputs", kind, [], Fraction(0),
                      {"kept": two ** p, "flushed": Fraction(0)}, raw=[(0, 2.0 ** sub[0], 2.0 ** sub[1])]))
    out.append(_probe("subnormal_outputs", "subnormal_outputs", kind, [], two ** -127,
                      {"kept": two ** -127, "flushed": Fraction(0)}))
    big = two ** scale
    for w in ALIGN_PROBES:
        count = 2 ** max(w - 23, 0)
        terms = [(i, 1, scale - w) for i in range(count)]
        out.append(_probe(f"alignment_bits/{w}", "alignment_bits", kind, terms, big,
                          {"kept": big * (1 + two ** -min(w, 23)), "dropped": big}))
    for k in ACC_PROBES:
        c = two ** BIG * (1 + two ** -k)
        out.append(_probe(f"accumulator_bits/{k}", "accumulator_bits", kind, [(0, 1, TINY)], c,
                          {"kept": c, "dropped": two ** BIG}))
    for j in BLOCK_PROBES:
        terms = [(0, 1, BIG), (1, -1, BIG), (j, 1, TINY)]
        out.append(_probe(f"block/{j}", "block", kind, terms, Fraction(0),
                          {"same block": Fraction(0), "later block": two ** TINY}))
    ulp = two ** (scale - 23)
    for sign, name in ((1, "rounding/+"), (-1, "rounding/-")):
        terms = [(0, sign, scale - 24), (1, sign, scale - 25)]
        down, up = sign * big, sign * (big + ulp)  # toward zero, away from zero
        lower, upper = (down, up) if sign > 0 else (up, down)
        out.append(_probe(name, "rounding", kind, terms, sign * big,
                          {"rz": down, "rne": up, "ru": upper, "rd": lower}))
    out.append(_probe("accumulator_order", "accumulator_order", kind, [(0, 1, BIG), (1, -1, BIG)], two ** TINY,
                      {"with the products": Fraction(0), "after the products": two ** TINY}))
    return out


def build() -> dict[str, Any]:
    return {"about": " ".join(__doc__.split()), "length": LENGTH, "features": FEATURES,
            "kinds": {kind: _kind_probes(kind) for kind in KINDS}}


@lru_cache(maxsize=1)
def load() -> dict[str, Any]:
    return json.loads(PATH.read_text())


def vectors(probe: dict[str, Any], length: int = LENGTH) -> tuple[list[float], list[float], float]:
    """(a, b, c) of one probe as dense lists."""
    a = [0.0] * length
    b = [0.0] * length
    for pos, x, y in probe["terms"]:
        a[pos], b[pos] = x, y
    return a, b, probe["c"]


def dumps(data: dict[str, Any]) -> str:
    """The probes file: one probe a line, so a diff shows which probe changed."""
    head = {k: v for k, v in data.items() if k != "kinds"}
    lines = json.dumps(head, indent=1)[:-2] + ',\n "kinds": {\n'
    kinds = []
    for kind, probes in data["kinds"].items():
        body = ",\n".join("   " + json.dumps(p) for p in probes)
        kinds.append(f'  "{kind}": [\n{body}\n  ]')
    return lines + ",\n".join(kinds) + "\n }\n}\n"


def main() -> None:
    PATH.write_text(dumps(build()))


if __name__ == "__main__":
    main()
