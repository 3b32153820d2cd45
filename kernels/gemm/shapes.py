"""Named GEMM shape suites (M, N, K), shared by the benchmarks, the tuning sweep and CI smoke runs."""

from __future__ import annotations

SUITES: dict[str, list[tuple[int, int, int]]] = {
    # Squares, LLM projections (tokens x hidden -> 3*hidden, MLP up/down for 4096- and
    # 8192-wide models), and skinny decode-style M against square weights.
    "gemm-llm": [
        (4096, 4096, 4096),
        (8192, 8192, 8192),
        (8192, 12288, 4096),   # fused QKV, hidden 4096
        (8192, 14336, 4096),   # MLP up, hidden 4096
        (8192, 4096, 14336),   # MLP down
        (4096, 28672, 8192),   # MLP up, hidden 8192
        (16, 4096, 4096),
        (32, 8192, 8192),
        (64, 14336, 4096),
        (128, 4096, 14336),
    ],
    # Decode-style skinny M against the LLM weights above: the shape class where B
    # streaming and tile count decide, used to tune and to fit the performance model.
    "gemm-skinny": [
        (16, 14336, 4096), (16, 4096, 14336), (32, 4096, 4096), (32, 12288, 4096),
        (64, 4096, 4096), (64, 8192, 8192), (128, 8192, 8192), (128, 14336, 4096),
        (256, 4096, 4096), (256, 4096, 14336), (48, 4096, 4096), (96, 12288, 4096),
    ],
    # Interpreter-sized shapes for CI smoke runs: none a multiple of a block.
    "tiny": [(37, 45, 29), (64, 33, 48)],
}


# The benchmark suite's own skinny shapes (M <= 128): what to re-tune when the skinny path changes.
SUITES["gemm-llm-skinny"] = [s for s in SUITES["gemm-llm"] if s[0] <= 128]
# ... and its decode shapes (M <= 64), the stream-K schedule's.
SUITES["gemm-llm-decode"] = [s for s in SUITES["gemm-llm"] if s[0] <= 64]


def suite(name: str) -> list[tuple[int, int, int]]:
    if name not in SUITES:
        raise ValueError(f"shapes: expected one of {sorted(SUITES)}, got {name!r}")
    return SUITES[name]
