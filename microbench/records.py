"""One schema for every measurement, with its provenance, and an append-only store.

A :class:`Record` is one measured (or statically derived) quantity: a kernel's
median time on a shape, a microbenchmark's bandwidth, a compiled kernel's
register count. Records are stored as a Parquet dataset: each append writes one
new part file atomically (temporary name, then ``os.replace``), so a store is
never rewritten and a crash leaves no half-written file. Invalid records are
refused one by one with the reason; the valid ones are kept.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import platform
import re
import socket
import subprocess
import uuid
from pathlib import Path
from typing import Any, Iterable, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

SCHEMA_VERSION = 1

Kind = Literal["kernel", "microbench", "static", "correctness", "host"]


class Provenance(BaseModel):
    """Where and how a record was taken."""

    device: str  # "NVIDIA H200", "cpu: AMD EPYC ...", "target sm_90a"
    device_count: int = 1
    driver: str | None = None
    clocks_mhz: dict[str, float] = Field(default_factory=dict)  # sampled during the run: sm, mem
    throttle_reasons: list[str] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)
    runtime: str | None = None  # the library that ran the GPU work: "cupy 14.0.1", "pycuda 2026.1"
    git_commit: str | None = None  # a commit hash (7 to 40 hex digits), never a ref such as "HEAD"
    host: str = ""
    timestamp: str = Field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat())

    @field_validator("git_commit")
    @classmethod
    def _a_hash(cls, v: str | None) -> str | None:
        if v is not None and not is_commit_hash(v):
            raise ValueError(f"git_commit must be a commit hash (7 to 40 hex digits), not {v!r}")
        return v


def is_commit_hash(text: str) -> bool:
    return re.fullmatch(r"[0-9a-f]{7,40}", text) is not None


class Record(BaseModel):
    kind: Kind
    op: str  # "gemm", "attention", "hbm-bandwidth", "bank-conflicts", ...
    name: str  # the implementation or case: "nvidia", "torch.matmul", "stride-33-b32"
    metric: str  # "time", "bandwidth", "flops", "registers", "cycles-per-access", ...
    value: float
    unit: str  # "s", "B/s", "FLOP/s", "count", "cycles", ...
    backend: str | None = None
    shape: dict[str, Any] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    method: str | None = None  # "cuda-events", "cuda-graph", "clock64", "host-timer", "static"
    repetitions: int | None = None
    median: float | None = None
    p20: float | None = None
    p80: float | None = None
    extra: dict[str, Any] = Field(default_factory=dict)
    provenance: Provenance
    schema_version: int = SCHEMA_VERSION

    @field_validator("value")
    @classmethod
    def _finite(cls, v: float) -> float:
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError("value must be finite")
        return v

    def row(self) -> dict[str, Any]:
        """A flat row for the Parquet store: nested fields as JSON text."""
        d = self.model_dump()
        for key in ("shape", "config", "extra"):
            d[key] = json.dumps(d[key], sort_keys=True, default=str)
        prov = d.pop("provenance")
        for key, value in prov.items():
            d[f"prov_{key}"] = json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value
        return d

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "Record":
        d = dict(row)
        prov = {}
        for key in list(d):
            if key.startswith("prov_"):
                value = d.pop(key)
                name = key.removeprefix("prov_")
                if name in ("clocks_mhz", "throttle_reasons", "versions") and isinstance(value, str):
                    value = json.loads(value)
                prov[name] = value
        for key in ("shape", "config", "extra"):
            if isinstance(d.get(key), str):
                d[key] = json.loads(d[key])
        d = {k: (None if _is_nan(v) else v) for k, v in d.items()}
        return cls(provenance=Provenance(**prov), **d)


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and v != v


@functools.cache
def _git_commit() -> str | None:
    """The checkout's commit; ``CEILING_GIT_COMMIT`` names it where the tree was copied without .git."""
    if os.environ.get("CEILING_GIT_COMMIT"):
        commit = os.environ["CEILING_GIT_COMMIT"].strip().lower()
        if not is_commit_hash(commit):
            raise ValueError(f"CEILING_GIT_COMMIT: expected a commit hash (git rev-parse HEAD), got {commit!r}")
        return commit
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and is_commit_hash(commit) else None


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in ("torch", "triton", "jax", "numpy", "cupy", "pycuda"):
        try:
            module = __import__(name)
        except Exception:  # noqa: BLE001 - a broken optional install is not our failure
            continue
        versions[name] = str(getattr(module, "__version__", None) or getattr(module, "VERSION_TEXT", "?"))
    try:
        import torch

        if torch.version.cuda:
            versions["cuda"] = torch.version.cuda
        if getattr(torch.version, "hip", None):
            versions["hip"] = torch.version.hip
    except Exception:  # noqa: BLE001
        pass
    return versions


def host_provenance(device: str | None = None, **fields: Any) -> Provenance:
    """Provenance for a measurement taken now on this machine."""
    return Provenance(
        device=device or f"cpu: {platform.processor() or platform.machine()}",
        versions=library_versions(),
        git_commit=_git_commit(),
        host=socket.gethostname(),
        **fields,
    )


def validate(items: Iterable[Record | dict[str, Any]]) -> tuple[list[Record], list[tuple[int, str]]]:
    """Split into valid records and (index, reason) for the refused ones."""
    good: list[Record] = []
    refused: list[tuple[int, str]] = []
    for i, item in enumerate(items):
        if isinstance(item, Record):
            good.append(item)
            continue
        try:
            good.append(Record.model_validate(item))
        except ValidationError as exc:
            refused.append((i, "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())))
    return good, refused


def append(store: str | os.PathLike, items: Iterable[Record | dict[str, Any]]) -> tuple[int, list[tuple[int, str]]]:
    """Append records to the Parquet dataset at ``store`` (a folder), atomically.

    Returns the number written and the refused items with their reasons.
    """
    import pandas as pd

    good, refused = validate(items)
    if not good:
        return 0, refused
    folder = Path(store)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    final = folder / f"part-{stamp}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = folder / f".{final.name}.tmp"
    pd.DataFrame([r.row() for r in good]).to_parquet(tmp, index=False)
    os.replace(tmp, final)
    return len(good), refused


COMMITS = "commits.json"  # in a store: {"parts": {part file: {value it names: the commit hash}}}


def load(store: str | os.PathLike) -> list[Record]:
    """Every record in a store (all part files, in name order). A part whose records name their commit
    by something other than a hash ("HEAD", from a tree copied without .git) is read through the store's
    ``commits.json``, which maps that value to the hash; without an entry there it is refused."""
    import pandas as pd

    folder = Path(store)
    commits = json.loads((folder / COMMITS).read_text())["parts"] if (folder / COMMITS).exists() else {}
    records: list[Record] = []
    for part in sorted(folder.glob("part-*.parquet")):
        named = commits.get(part.name, {})
        for row in pd.read_parquet(part).to_dict("records"):
            commit = row.get("prov_git_commit")
            if isinstance(commit, str) and not is_commit_hash(commit):
                if commit not in named:
                    raise ValueError(f"{part}: git_commit {commit!r} is not a commit hash; name the commit it "
                                     f"stands for in {folder / COMMITS}")
                row = {**row, "prov_git_commit": named[commit]}
            records.append(Record.from_row(row))
    return records


def frame(store: str | os.PathLike):
    """The store as one pandas DataFrame (flat rows)."""
    import pandas as pd

    parts = sorted(Path(store).glob("part-*.parquet"))
    if not parts:
        return pd.DataFrame()
    return pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
