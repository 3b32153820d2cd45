"""Named FP8 GEMM shape suites (M, N, K), shared by the benchmarks and the tuning sweep."""

from __future__ import annotations

from ceiling.scaled_gemm.spec import RECIPES

SUITES: dict[str, list[tuple[int, int, int]]] = {
    # Squares and the LLM projections of ceiling.gemm.shapes' gemm-llm, at FP8.
    "fp8-llm": [
        (8192, 8192, 8192),
        (4096, 4096, 4096),
        (8192, 12288, 4096),
        (8192, 14336, 4096),
        (8192, 4096, 14336),
        (4096, 28672, 8192),
    ],
    # Decode-sized M: a stream of one-byte weights, bound by HBM.
    "fp8-skinny": [(1, 8192, 8192), (16, 4096, 4096), (32, 8192, 8192), (64, 14336, 4096)],
    # What `ceiling device-check` times, and the device check tunes: the headline square, an MLP
    # projection, two decode shapes.
    "fp8-device": [(8192, 8192, 8192), (8192, 14336, 4096), (16, 4096, 4096), (64, 14336, 4096)],
}
SUITES["fp8-all"] = SUITES["fp8-llm"] + SUITES["fp8-skinny"]
SCALINGS = RECIPES  # the scalings benchmarked and tuned: ceiling.fp8_gemm's recipes


def suite(name: str) -> list[tuple[int, int, int]]:
    if name not in SUITES:
        raise ValueError(f"shapes: expected one of {sorted(SUITES)}, got {name!r}")
    return SUITES[name]
