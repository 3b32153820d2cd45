"""``config="autotune"`` for the Hopper GEMM: time the candidate configs on this
device for this problem, keep the fastest, and remember it on disk. The GEMM front end
(``kernels.gemm.torch_op``) asks :func:`best_config` and passes the config it returns to
``kernels.nvidia.gemm``, which knows nothing of this cache.

The cache is a JSON file per device under ``$CEILING_CACHE_DIR`` (default
``~/.cache/ceiling``), keyed by dtype, shape, layouts and epilogue, so a
problem is tuned once per machine. Timing is the tuning sweep's
(CUDA-graph replay, median), so a pick reflects device time.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import torch

from kernels.nvidia.gemm import GemmConfig, SMEM_LIMIT_SM90, _config_table

_lock = threading.Lock()


def cache_path(device_name: str) -> Path:
    root = Path(os.environ.get("CEILING_CACHE_DIR", Path.home() / ".cache" / "ceiling"))
    safe = "".join(ch if ch.isalnum() else "-" for ch in device_name)
    return root / f"gemm-autotune-{safe}.json"


SKINNY_M = 256  # at or below this M the skinny candidates (split-K, narrow tiles) are timed too


def candidates(dtype: str, m: int | None = None) -> list[GemmConfig]:
    """The candidate configs for ``dtype`` (and, given ``m``, its shape class), without duplicates."""
    table = _config_table()["candidates"]["float32" if dtype == "float32" else "16bit"]
    entries = table["large"] + (table["skinny"] if m is None or m <= SKINNY_M else [])
    item = 4 if dtype == "float32" else 2
    configs = dict.fromkeys(GemmConfig.from_dict(c) for c in entries)
    return [c for c in configs if c.shared_memory_bytes(item, item) <= SMEM_LIMIT_SM90]


def problem_key(a, b, bias, activation, out_dtype) -> str:
    layout = lambda x: "T" if x.stride(-1) != 1 else "N"  # noqa: E731
    return "|".join(
        [str(a.dtype), str(out_dtype), "x".join(map(str, a.shape)), "x".join(map(str, b.shape)),
         layout(a) + layout(b), str(activation), "bias" if bias is not None else "nobias"]
    )


def _load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _store(path: Path, entries: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(entries, indent=1, sort_keys=True))
    os.replace(tmp, path)


def best_config(a, b, bias, activation, out_dtype) -> GemmConfig:
    """The fastest candidate for this problem on this GPU (cached)."""
    from kernels.errors import BackendUnavailable

    if not a.is_cuda:
        raise BackendUnavailable("config='autotune' times configs on a GPU; these tensors are on the CPU")
    from kernels.nvidia.gemm import gemm
    from kernels.tuning.timers import time_graph

    device_name = torch.cuda.get_device_name(a.device)
    path = cache_path(device_name)
    key = problem_key(a, b, bias, activation, out_dtype)
    with _lock:
        cached = _load(path).get(key)
    if cached is not None:
        return GemmConfig.from_dict(cached["config"])
    dtype = str(a.dtype).removeprefix("torch.")
    timings = []
    for cfg in candidates(dtype, a.shape[-2] if a.dim() == 2 else None):
        try:
            ms, _, _ = time_graph(lambda: gemm(a, b, bias, activation, out_dtype, cfg.as_dict()), 40)
        except Exception:  # noqa: BLE001 - a config the compiler rejects for this shape is skipped
            continue
        timings.append((ms, cfg))
    if not timings:
        raise RuntimeError(f"no candidate config compiled for {key}")
    ms, cfg = min(timings, key=lambda t: t[0])
    with _lock:
        entries = _load(path)
        entries[key] = {"config": cfg.as_dict(), "median_ms": ms}
        _store(path, entries)
    return cfg
