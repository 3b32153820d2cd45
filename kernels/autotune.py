"""``config="autotune"``: time an implementation's candidate configs for one problem on this GPU by
CUDA-graph replay, keep the fastest, and remember it on disk, so a problem is tuned once per machine.
The candidates are a family's hand-picked lists (``kernels/spaces/candidates/<family>.<target>.json``)
less the configs that are not points of the space at the problem; the cache is a JSON file per family
and device under ``$CEILING_CACHE_DIR`` (default ``~/.cache/ceiling``); the winner comes back as a
``config=``, which the op validates like any other.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Callable

from ceiling import spaces, tables

_lock = threading.Lock()


def cache_path(device_name: str, family: str = "gemm") -> Path:
    root = Path(os.environ.get("CEILING_CACHE_DIR", Path.home() / ".cache" / "ceiling"))
    safe = "".join(ch if ch.isalnum() else "-" for ch in device_name)
    return root / f"{family}-autotune-{safe}.json"


def candidates(family: str, target: str, features: dict[str, Any]) -> list[dict[str, Any]]:
    """The candidate configs of ``family`` on ``target`` for a problem with ``features``: those of
    every list whose ``when`` holds, in order, without duplicates, that are points of the space."""
    data = json.loads(spaces.candidates_file(family, target).read_text())
    space = spaces.get(family, target)
    seen: dict[str, dict] = {}
    for group in data["lists"]:
        if tables.matches(group, features):
            for config in group["configs"]:
                seen.setdefault(json.dumps(config, sort_keys=True), config)
    return [c for c in seen.values() if not space.broken(c, features)]


def _load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _store(path: Path, entries: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(entries, indent=1, sort_keys=True))
    os.replace(tmp, path)


def best(family: str, device: str, device_name: str | None, key: str, configs: list[dict[str, Any]],
         run: Callable[[dict], Any], rep_ms: int = 40) -> dict[str, Any]:
    """The fastest of ``configs`` by ``run(config)`` on the GPU ``device`` ("cuda:0") named
    ``device_name``, from its cache under ``key`` when it was timed before; a config that fails to
    compile or run is skipped."""
    from ceiling.arrays import device_kind
    from ceiling.errors import BackendUnavailable
    from ceiling.timers import time_graph

    if device_kind(device) != "cuda":
        raise BackendUnavailable("config='autotune' times configs on a GPU; these tensors are on the CPU")
    path = cache_path(device_name, family)
    with _lock:
        cached = _load(path).get(key)
    if cached is not None:
        return cached["config"]
    timings = []
    for config in configs:
        try:
            ms, _, _ = time_graph(lambda: run(config), rep_ms)
        except Exception:  # noqa: BLE001 - a config the compiler rejects for this shape is skipped
            continue
        timings.append((ms, config))
    if not timings:
        raise RuntimeError(f"no candidate config compiled for {key}")
    ms, config = min(timings, key=lambda t: t[0])
    with _lock:
        entries = _load(path)
        entries[key] = {"config": config, "median_ms": ms}
        _store(path, entries)
    return config
