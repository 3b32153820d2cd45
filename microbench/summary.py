"""Headline rows for a run's records: one line per ceiling, and model agreement for the model checks."""

from __future__ import annotations

from collections import defaultdict

from .records import Record

_SCALES = {"B/s": [(1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s")],
           "FLOP/s": [(1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s")]}


def human(value: float, unit: str) -> str:
    for scale, label in _SCALES.get(unit, []):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {label}"
    if unit == "fraction":
        return f"{100 * value:.1f}%"
    return f"{value:.4g} {unit}"


def within(measured: float, model: float, tolerance: float = 0.25) -> bool:
    return abs(measured - model) <= tolerance * model


def rows(records: list[Record]) -> list[tuple[str, str, str]]:
    """(what, case, value) rows; bank-conflict and resident-block cases are folded into agreement counts."""
    out: list[tuple[str, str, str]] = []
    bank = defaultdict(lambda: [0, 0])
    resident = [0, 0]
    for r in records:
        if r.op == "bank-conflicts":
            fam = r.config.get("family", "?")
            bank[fam][1] += 1
            bank[fam][0] += within(r.value, r.extra.get("model_wavefronts", 0))
        elif r.op == "occupancy" and r.metric == "resident-blocks":
            resident[1] += 1
            resident[0] += r.value == r.extra.get("model_blocks")
        else:
            out.append((r.op, r.name, human(r.value, r.unit)))
    for fam, (ok, n) in sorted(bank.items()):
        out.append(("bank-conflicts", f"{fam}: cycles/access within 25% of model wavefronts", f"{ok}/{n}"))
    if resident[1]:
        out.append(("occupancy", "resident blocks counted on device == calculator", f"{resident[0]}/{resident[1]}"))
    return out
