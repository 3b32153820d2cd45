"""Counted work of a kernel launch: FLOPs and the bytes moved at each memory level.

The counts come from the problem shape and the kernel's tiling alone (no
profiler), so the same numbers serve the roofline placement, the performance
model and the templates' cost expressions:

* ``hbm``: compulsory traffic: every operand read once and the output written once;
* ``l2``: what the tiles request: an output tile of BM x BN streams a BM x K
  panel of A and a K x BN panel of B, so A is read ceil(N/BN) times and B
  ceil(M/BM) times (the grouped launch order turns most of it into L2 hits);
* ``smem``: each loaded tile is written to shared memory once and read by the
  tensor cores once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

DTYPE_BYTES = {"float64": 8, "float32": 4, "tf32": 4, "bfloat16": 2, "float16": 2, "float8": 1, "int8": 1}


@dataclass(frozen=True)
class Work:
    flops: float
    bytes: dict[str, float] = field(default_factory=dict)  # level -> bytes moved

    def intensity(self, level: str) -> float | None:
        b = self.bytes.get(level)
        return self.flops / b if b else None


def dtype_bytes(dtype: str | None) -> int:
    name = str(dtype or "bfloat16").removeprefix("torch.")
    return 1 if name.startswith("float8") else DTYPE_BYTES.get(name, 2)


_GEMM_AXES = {"m": "M", "n": "N", "k": "K", "b": "batch"}
GEMM_OPS = ("gemm", "scaled_gemm")  # ops counted as a GEMM (the scaled one with 1-byte operands)


def normalize_shape(op: str, shape: dict[str, Any]) -> dict[str, Any]:
    """GEMM axes as ``M``, ``N``, ``K`` whatever case the record used."""
    if op not in GEMM_OPS:
        return dict(shape)
    return {_GEMM_AXES.get(k, k): v for k, v in shape.items()}


def record_dtype(shape: dict, config: dict, extra: dict) -> str:
    return str(shape.get("dtype") or config.get("dtype") or extra.get("dtype") or "bfloat16")


def gemm(shape: dict[str, Any], config: dict[str, Any] | None = None, dtype: str | None = None) -> Work:
    shape = normalize_shape("gemm", shape)
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    batch = int(shape.get("batch") or 1)
    size = dtype_bytes(dtype or shape.get("dtype"))
    out = dtype_bytes(shape.get("out_dtype") or dtype or shape.get("dtype"))
    flops = 2.0 * batch * m * n * k
    levels = {"hbm": batch * (size * (m * k + k * n) + out * m * n)}
    split = int((config or {}).get("SPLIT_K") or 1)
    if split > 1:  # fp32 partial planes written by the slices and read back by the reduction
        levels["hbm"] += batch * 2 * 4 * m * n * split
    if config and "BLOCK_M" in config and "BLOCK_N" in config:
        bm, bn = int(config["BLOCK_M"]), int(config["BLOCK_N"])
        tiles_m, tiles_n = math.ceil(m / bm), math.ceil(n / bn)
        k_pad = math.ceil(k / int(config.get("BLOCK_K", 1))) * int(config.get("BLOCK_K", 1))
        panels = size * (tiles_m * tiles_n) * (bm * k_pad + k_pad * bn)
        levels["l2"] = batch * (panels + out * m * n + 2 * 4 * m * n * (split if split > 1 else 0))
        levels["smem"] = batch * 2 * panels
    return Work(flops, levels)


@dataclass(frozen=True)
class AttentionProblem:
    batch: int
    heads: int
    seq_q: int
    seq_k: int
    head_dim: int
    causal: bool
    backward: bool


def attention_problem(shape: dict[str, Any], config: dict[str, Any] | None = None) -> AttentionProblem:
    """An attention record's problem from its shape (and config: records keep causality and
    direction in one or the other)."""
    sq = int(shape.get("seq_q", shape.get("S", shape.get("seq", 1))))
    problem = {**(config or {}), **shape}
    return AttentionProblem(
        batch=int(shape.get("batch", shape.get("B", 1))),
        heads=int(shape.get("heads", shape.get("H", 1))),
        seq_q=sq,
        seq_k=int(shape.get("seq_k", sq)),
        head_dim=int(shape.get("head_dim", shape.get("D", 64))),
        causal=bool(problem.get("causal", False)),
        backward=str(problem.get("direction", "fwd")) == "bwd",
    )


def attention(shape: dict[str, Any], config: dict[str, Any] | None = None, dtype: str | None = None) -> Work:
    p = attention_problem(shape, config)
    size = dtype_bytes(dtype or shape.get("dtype"))
    pairs = p.seq_q * p.seq_k / (2 if p.causal else 1)
    flops = (10.0 if p.backward else 4.0) * p.batch * p.heads * pairs * p.head_dim  # fwd: QK^T and PV; bwd: 5 products
    tensors = (8 if p.backward else 4) * p.batch * p.heads * max(p.seq_q, p.seq_k) * p.head_dim
    return Work(flops, {"hbm": size * tensors})


COUNTERS = {"gemm": gemm, "scaled_gemm": gemm, "attention": attention, "attention_fwd": attention,
            "attention_bwd": attention}


def count(op: str, shape: dict[str, Any], config: dict[str, Any] | None = None, extra: dict | None = None) -> Work | None:
    """Work of one launch; ``extra`` may carry counted ``flops``/``bytes`` for ops without a counter."""
    extra = extra or {}
    counter = COUNTERS.get(op)
    if counter is not None:
        try:
            return counter(shape, config, record_dtype(shape, config or {}, extra))
        except (KeyError, TypeError, ValueError):
            pass
    if "flops" in extra and "bytes" in extra:
        b = extra["bytes"]
        return Work(float(extra["flops"]), dict(b) if isinstance(b, dict) else {"hbm": float(b)})
    return None
