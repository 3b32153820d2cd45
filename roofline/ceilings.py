"""Roofline ceilings per device: fit from microbenchmark records, else published.

A ceiling is the best sustained rate a microbenchmark reached on a device: the
highest median bandwidth per memory level, the highest median FLOP/s per dtype
(an achievable roof, not the datasheet peak). Where a device was never measured
at a level, the published figure from ``ceiling.roofline.devices`` fills in, marked
``published`` with its source.

Microbenchmark records are recognised by their fields, so each suite only has to
name what it measured:

* bandwidth: ``metric == "bandwidth"`` (unit ``B/s``); the level is
  ``extra["level"]``, or read from the op name (``hbm``/``dram``, ``l2``,
  ``smem``/``shared``/``lds``, ``l1``);
* compute: ``metric`` ``flops`` or ``peak-flops`` (unit ``FLOP/s``); the dtype
  is ``extra["dtype"]`` or ``config["dtype"]``, else read from the name
  (``bf16``, ``f16``, ``fp8``, ``tf32``), else ``float32``.

Both GPU microbenchmarks (``kind="microbench"``) and host ones (``kind="host"``)
count; a host's main memory is the ``dram`` level.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Mapping

from ceiling.microbench.records import Record
from ceiling.roofline import devices

_LEVEL_WORDS = (
    ("dram", ("host-memory",)),  # a host's main memory
    ("hbm", ("hbm", "dram", "global-memory", "stream")),
    ("l2", ("l2",)),
    ("l1", ("l1",)),
    ("smem", ("smem", "shared", "lds")),
    ("vmem", ("vmem",)),
    ("sbuf", ("sbuf",)),
)


@dataclass(frozen=True)
class Ceiling:
    name: str  # "hbm", "l2", "smem" or a dtype for compute
    value: float  # B/s or FLOP/s
    unit: str
    source: str  # "measured" or "published"
    detail: str  # the record (op/name) it came from, or the published citation
    record: Record | None = field(default=None, compare=False, repr=False)  # the measurement, when measured

    def provenance(self, origins: Mapping[int, str] | None = None) -> str:
        """Where the figure comes from, for a reader: measured here, measured on a device at a date and
        commit (from which records), or published (with the source). ``origins`` maps ``id(record)``
        to "here" for records this run took, or to a name for where the others were read from."""
        if self.source != "measured" or self.record is None:
            return f"{self.source}: {self.detail}"
        return measured_where(self.record, (origins or {}).get(id(self.record)))


@dataclass
class DeviceCeilings:
    device: str  # as reported (provenance.device) or the published name
    key: str | None  # published device key, if the device is known
    bandwidth: dict[str, Ceiling] = field(default_factory=dict)
    compute: dict[str, Ceiling] = field(default_factory=dict)

    def measured(self) -> bool:
        return any(c.source == "measured" for c in (*self.bandwidth.values(), *self.compute.values()))

    def peak(self, dtype: str = "bfloat16") -> Ceiling | None:
        if dtype in self.compute:
            return self.compute[dtype]
        return max(self.compute.values(), key=lambda c: c.value, default=None)

    def rows(self, origins: Mapping[int, str] | None = None) -> list[dict]:
        out = []
        for kind, table in (("bandwidth", self.bandwidth), ("compute", self.compute)):
            for c in table.values():
                out.append(dict(device=self.device, kind=kind, name=c.name, value=c.value, unit=c.unit,
                                source=c.source, detail=c.detail, provenance=c.provenance(origins)))
        return out


def measured_where(record: Record, origin: str | None = None) -> str:
    """"measured here (host, date)" for a record this run took (``origin == "here"``), else
    "measured on <device>, <date>, commit <c> (<origin>)"."""
    p = record.provenance
    commit = (p.git_commit or "unknown")[:7]
    if origin == "here":
        return f"measured here ({p.host or 'this machine'}, {p.timestamp[:10]}, commit {commit})"
    return f"measured on {p.device}, {p.timestamp[:10]}, commit {commit}" + (f" ({origin})" if origin else "")


def level_of(record: Record) -> str | None:
    level = record.extra.get("level")
    if level:
        return str(level).lower()
    text = f"{record.op} {record.name}".lower()
    for level, words in _LEVEL_WORDS:
        if any(re.search(rf"(^|[^a-z0-9]){w}", text) for w in words):
            return level
    return None


_DTYPE_WORDS = (("bfloat16", ("bf16", "bfloat16")), ("float16", ("f16", "fp16", "float16")),
                ("float8", ("fp8", "e4m3", "e5m2")), ("tf32", ("tf32",)), ("float64", ("f64", "fp64", "float64")))


def dtype_of(record: Record) -> str:
    dtype = record.extra.get("dtype") or record.config.get("dtype")
    if dtype:
        return str(dtype)
    text = f"{record.op} {record.name}".lower()
    for name, words in _DTYPE_WORDS:
        if any(re.search(rf"(^|[^a-z0-9]){w}([^a-z0-9]|$)", text) for w in words):
            return name
    return "float32"


def _rate(record: Record) -> float:
    return float(record.median if record.median is not None else record.value)


def fit(records: Iterable[Record], include_published: bool = True) -> dict[str, DeviceCeilings]:
    """Ceilings for every measured device and (optionally) every published one.

    Keyed by the published device key where the device is known, else by its
    reported name (a CPU host, an unlisted GPU).
    """
    out: dict[str, DeviceCeilings] = {}
    for r in records:
        if r.kind not in ("microbench", "host") or r.metric not in ("bandwidth", "flops", "peak-flops"):
            continue
        spec = devices.match(r.provenance.device)
        key = spec.key if spec else r.provenance.device
        dc = out.setdefault(key, DeviceCeilings(spec.name if spec else r.provenance.device, spec.key if spec else None))
        detail = f"{r.op}/{r.name} ({r.provenance.timestamp[:10]})"
        if r.metric == "bandwidth":
            level = level_of(r)
            if level is None:
                continue
            best = dc.bandwidth.get(level)
            if best is None or _rate(r) > best.value:
                dc.bandwidth[level] = Ceiling(level, _rate(r), "B/s", "measured", detail, r)
        else:
            dtype = dtype_of(r)
            best = dc.compute.get(dtype)
            if best is None or _rate(r) > best.value:
                dc.compute[dtype] = Ceiling(dtype, _rate(r), "FLOP/s", "measured", detail, r)
    if include_published:
        for spec in devices.PUBLISHED.values():
            dc = out.setdefault(spec.key, DeviceCeilings(spec.name, spec.key))
            _fill_published(dc, spec)
    else:
        for dc in out.values():
            if dc.key:
                _fill_published(dc, devices.PUBLISHED[dc.key])
    return out


def _fill_published(dc: DeviceCeilings, spec: devices.DeviceSpec) -> None:
    for level, value in spec.bandwidth.items():
        if level not in dc.bandwidth:
            dc.bandwidth[level] = Ceiling(level, value, "B/s", "published", spec.sources.get(level, "published"))
    for dtype, value in spec.peak_flops.items():
        if dtype not in dc.compute:
            dc.compute[dtype] = Ceiling(dtype, value, "FLOP/s", "published", spec.sources.get("peak_flops", "published"))


def for_device(records: Iterable[Record], device: str) -> DeviceCeilings:
    """Ceilings of one device (a published key or a reported name)."""
    table = fit(records, include_published=False)
    spec = devices.match(device) if device not in devices.PUBLISHED else devices.PUBLISHED[device]
    key = spec.key if spec else device
    if key in table:
        return table[key]
    if spec is None:
        raise KeyError(f"no measurements and no published figures for {device!r}")
    dc = DeviceCeilings(spec.name, spec.key)
    _fill_published(dc, spec)
    return dc
