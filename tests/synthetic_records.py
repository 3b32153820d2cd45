"""Synthetic kernel records for testing the fitting machinery (never committed as measurements).

The times follow a known law built from the model's terms with chosen weights
plus log-normal noise, so a correct fit must recover them within the noise.
"""

from __future__ import annotations

import random
import zlib

from ceiling.microbench.records import Provenance, Record
from ceiling.roofline import model
from ceiling.roofline.machine import published
from ceiling.roofline.templates import export

LAW = {"launch": 1.0, "roof": 1.15, "pipe": 0.7, "tiles": 0.4, "smem": 0.2}
SHAPES = [
    {"M": 4096, "N": 4096, "K": 4096},
    {"M": 8192, "N": 8192, "K": 2048},
    {"M": 2048, "N": 6144, "K": 4096},
    {"M": 1024, "N": 1024, "K": 8192},
    {"M": 4096, "N": 14336, "K": 4096},
    {"M": 3000, "N": 5000, "K": 1000},
    {"M": 512, "N": 8192, "K": 8192},
    {"M": 6144, "N": 2048, "K": 6144},
]


def gemm_records(device: str = "h200", target: str = "sm_90a", shapes=SHAPES, per_shape: int | None = None,
                 noise: float = 0.03, seed: int = 0) -> list[Record]:
    rng = random.Random(seed)
    machine = published(device)
    template = export.build("gemm", target, [], machine=machine)
    prov = Provenance(device=machine.name, host="synthetic", versions={"law": "tests.synthetic_records"})
    out = []
    for shape in shapes:
        points = template.valid_points(shape)
        if per_shape:
            points = rng.sample(points, min(per_shape, len(points)))
        for config in points:
            t = model.terms("gemm", {**shape, "dtype": "bfloat16"}, config, machine, "bfloat16")
            seconds = sum(LAW.get(k, 0.0) * v for k, v in t.items()) * rng.lognormvariate(0.0, noise)
            out.append(Record(kind="kernel", op="gemm", name=template.backend, backend=template.backend,
                              metric="time", value=seconds, unit="s", shape={**shape, "dtype": "bfloat16"},
                              config=config, method="synthetic", repetitions=1, median=seconds,
                              p20=seconds * 0.99, p80=seconds * 1.01, provenance=prov))
    return out


ATTENTION_SHAPE = {"batch": 4, "heads": 32, "seq": 4096, "head_dim": 128}


def attention_seconds(template, shape: dict, section: str, point: dict, machine) -> float:
    """A known law for one attention kernel's time: the model's terms of its tiles (the backward's
    for dkdv and dq) with LAW's weights, times a fixed factor per value of the section's other knobs
    (warps, stages, switches) so that every parameter matters."""
    config = template.nest({**template.default_point(), **point})
    direction = "fwd" if section == "fwd" else "bwd"
    t = model.terms("attention", {**shape, "direction": direction, "dtype": "bfloat16"}, config, machine, "bfloat16")
    base = sum(LAW.get(k, 0.0) * v for k, v in t.items())
    knobs = sorted((k, v) for k, v in point.items() if not k.endswith((".block_m", ".block_n")))
    factor = 1.0 + (sum(zlib.crc32(f"{k}={v}".encode()) % 7 for k, v in knobs) % 11) / 20  # in [1, 1.5], fixed
    return base * factor


def attention_records(shape: dict = ATTENTION_SHAPE, section: str = "fwd", per_shape: int | None = None,
                      noise: float = 0.03, seed: int = 0, device: str = "h200") -> list[Record]:
    """Timings of one attention kernel (a section of the sm_90a template) at ``shape``, every valid
    point of the section (or ``per_shape`` of them), by :func:`attention_seconds` with log-normal noise."""
    rng = random.Random(seed)
    machine = published(device)
    template = export.build("attention", "sm_90a", [], machine=machine)
    prov = Provenance(device=machine.name, host="synthetic", versions={"law": "tests.synthetic_records"})
    points = template.valid_points(shape, section)
    if per_shape:
        points = rng.sample(points, min(per_shape, len(points)))
    out = []
    for point in points:
        seconds = attention_seconds(template, shape, section, point, machine) * rng.lognormvariate(0.0, noise)
        out.append(Record(kind="kernel", op="attention", name="nvidia", backend="nvidia", metric="time",
                          value=seconds, unit="s", shape={**shape, "dtype": "bfloat16"},
                          config=template.nest(point), method="synthetic", repetitions=1, median=seconds,
                          p20=seconds * 0.99, p80=seconds * 1.01, provenance=prov,
                          extra={"kernel": section}))
    return out
