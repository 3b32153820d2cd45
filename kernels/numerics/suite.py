"""Run the probes (``probes.json``) on a backend, read each feature from the outcomes, and compare
with the published feature table of a target. A backend is a function ``(kind, a, b, c) -> d``: a
(P, LENGTH), b (LENGTH, P) and c (P,) hold one probe per row and column, and d (P,) is each probe's
float32 result (the diagonal of ``a @ b + diag(c)``); the model is one backend
(:func:`model_backend`), a GPU's tensor cores through Triton another (:mod:`ceiling.numerics.device`).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ceiling.numerics import probes
from ceiling.numerics.model import mma
from ceiling.numerics.parameters import lookup

Backend = Callable[[str, np.ndarray, np.ndarray, np.ndarray], np.ndarray]
FEATURES = tuple(probes.FEATURES)


def model_backend(target: str) -> Backend:
    def run(kind: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        return np.diagonal(mma(a, b, np.diag(c).astype(np.float32), kind, target)).copy()
    return run


def inputs(kind: str) -> tuple[list[dict[str, Any]], np.ndarray, np.ndarray, np.ndarray]:
    """The probes of ``kind`` and their stacked (a, b, c)."""
    entries = probes.load()["kinds"][kind]
    rows = [probes.vectors(p) for p in entries]
    a = np.array([r[0] for r in rows])
    b = np.array([r[1] for r in rows]).T.copy()
    c = np.array([r[2] for r in rows], dtype=np.float32)
    return entries, a, b, c


def outcomes(kind: str, backend: Backend) -> dict[str, str]:
    """probe id -> the float32 bits the backend gave."""
    entries, a, b, c = inputs(kind)
    d = np.asarray(backend(kind, a, b, c), dtype=np.float32)
    return {p["id"]: probes.bits(float(x)) for p, x in zip(entries, d)}


def _matched(probe: dict[str, Any], got: str) -> str | None:
    hits = [h for h, want in probe["outcomes"].items() if want == got]
    return hits[0] if len(hits) == 1 else ("|".join(hits) if hits else None)


def read(kind: str, got: dict[str, str]) -> dict[str, Any]:
    """Each feature's value from the outcomes; 'unexplained (...)' where no hypothesis fits."""
    by_feature: dict[str, list[tuple[dict[str, Any], str | None]]] = {f: [] for f in FEATURES}
    for p in probes.load()["kinds"][kind]:
        by_feature[p["feature"]].append((p, _matched(p, got[p["id"]])))

    def unexplained(feature: str) -> str:
        bad = [f"{p['id']}={got[p['id']]}" for p, h in by_feature[feature] if h is None]
        return f"unexplained ({', '.join(bad[:3])})"

    result: dict[str, Any] = {}
    for feature in ("subnormal_inputs", "subnormal_outputs", "accumulator_order"):
        (p, hit), = by_feature[feature]
        result[feature] = hit if hit else unexplained(feature)
    # accumulator_bits' last probe is float32's own 23 fraction bits: all kept is exactly 23.
    for feature, offset in (("alignment_bits", 23), ("accumulator_bits", 0)):
        hits = [h for _, h in by_feature[feature]]
        if None in hits:
            result[feature] = unexplained(feature)
            continue
        kept = hits.index("dropped") if "dropped" in hits else len(hits)
        if "kept" in hits[kept:]:
            result[feature] = "unexplained (kept after dropped)"
        elif kept == len(hits) and feature == "alignment_bits":
            result[feature] = f">={kept - offset}"  # the aligned sum may hold more than the probes reach
        else:
            result[feature] = kept - offset
    hits = [h for _, h in by_feature["block"]]
    first = hits.index("later block") if "later block" in hits else None
    if None in hits:
        result["block"] = unexplained("block")
    elif first is None:
        result["block"] = f">={probes.LENGTH}"
    elif any(h != "later block" for h in hits[first:]):
        result["block"] = "unexplained (same block after a later one)"
    else:
        result["block"] = probes.BLOCK_PROBES[first]
    pair = [set((h or "").split("|")) for _, h in by_feature["rounding"]]
    common = sorted(pair[0] & pair[1] - {""})
    result["rounding"] = common[0] if len(common) == 1 else unexplained("rounding")
    return result


def published(target: str, kind: str) -> dict[str, Any]:
    """The feature table the published parameters of ``kind`` on ``target`` state, in the probes' terms."""
    p = lookup(target, kind)
    return {
        "subnormal_inputs": "kept" if p.subnormal_inputs else "flushed",
        "subnormal_outputs": "kept" if p.subnormal_outputs else "flushed",
        "accumulator_order": "with the products",
        "alignment_bits": p.extra_alignment_bits,
        "accumulator_bits": p.result_fraction_bits,
        "block": p.block,
        "rounding": p.rounding,
    }


def table(target: str, backend: Backend, kinds: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per kind: the features read from ``backend`` and whether they equal the published ones."""
    from ceiling.numerics.parameters import kinds as target_kinds

    rows = []
    for kind in kinds or target_kinds(target):
        got = read(kind, outcomes(kind, backend))
        want = published(target, kind)
        rows.append({"kind": kind, "features": got, "published": want,
                     "differs": [f for f in FEATURES if got[f] != want[f]]})
    return rows
