"""Correctness smoke checks: one small random problem per (op, backend), against float64.

Used by ``ceiling run`` (every backend that runs here, interpreted or emulated
included) and by the device check (on the GPU). Each check draws fresh random
inputs, poisons nothing it does not own, and returns its measured error next to
the bound it was held to (the error-ratio rule: at most twice the error of the
framework's own computation at the same precision, plus a small atol).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import torch

from kernels import backends


@dataclass
class SmokeResult:
    op: str
    backend: str
    mode: str
    case: str
    error: float
    bound: float
    passed: bool
    detail: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _err(x: torch.Tensor, ref: torch.Tensor) -> float:
    if torch.isnan(x).any():
        return float("nan")
    return (x.double() - ref.double()).abs().max().item()


# Small tiles for interpreted runs: the interpreter's cost grows with tile count and size.
_INTERPRETED_GEMM_CONFIG = {
    "nvidia": dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, GROUP_M=2, num_stages=2, num_warps=4),
}


def gemm_smoke(backend: str, device: str, seed: int) -> list[SmokeResult]:
    import kernels
    from kernels.gemm.reference import gemm as reference

    mode = backends.op_availability("gemm", backend).mode
    gen = torch.Generator().manual_seed(seed)
    big = device != "cpu"
    m, n, k = (1031, 777, 515) if big else (37, 45, 29)
    results = []
    for dtype in (torch.bfloat16, torch.float16):
        a = torch.randn(m, k, dtype=dtype, generator=gen).to(device)
        b = torch.randn(n, k, dtype=dtype, generator=gen).to(device).mT  # an nn.Linear weight
        bias = torch.randn(n, dtype=dtype, generator=gen).to(device)
        config = None if big else _INTERPRETED_GEMM_CONFIG.get(backend)
        out = kernels.gemm(a, b, bias=bias, activation="gelu", backend=backend, config=config)
        ref = reference(a.double(), b.double(), bias.double(), "gelu", torch.float64, compute_dtype=torch.float64)
        framework = reference(a, b, bias, "gelu", dtype, compute_dtype=dtype if big else torch.float32)
        if not big:  # CPU matmul in low precision accumulates in fp32 anyway; round the result as the GPU would
            framework = framework.to(dtype)
        bound = 2 * _err(framework, ref) + 1e-2
        error = _err(out, ref)
        results.append(SmokeResult("gemm", backend, mode, f"{m}x{n}x{k} {str(dtype)[6:]} bias+gelu, b transposed",
                                   error, bound, error <= bound))
    return results


SMOKES: dict[str, Callable[[str, str, int], list[SmokeResult]]] = {"gemm": gemm_smoke}


def run_all(device: str = "cpu", seed: int = 0, ops: list[str] | None = None) -> list[SmokeResult]:
    """Every op's smoke check on every backend that can run it here."""
    results: list[SmokeResult] = []
    for op, smoke in SMOKES.items():
        if ops and op not in ops:
            continue
        for backend in backends.OPS[op]:
            avail = backends.op_availability(op, backend)
            if not avail.runs or backend == "reference":
                continue
            if device != "cpu" and avail.mode != "native":
                continue
            try:
                results.extend(smoke(backend, device, seed))
            except Exception as exc:  # noqa: BLE001 - a failing backend is reported, the rest go on
                results.append(SmokeResult(op, backend, avail.mode, "run", float("nan"), 0.0, False,
                                           f"{type(exc).__name__}: {exc}"[:500]))
    return results
