"""The probes and a bit-equality check on a GPU's tensor cores, through Triton's ``tl.dot``. One
kernel serves both: ``D = A @ B + C`` over 64 x 64 output tiles (one Hopper warpgroup's wgmma shape
with four warps), the K loop accumulating in the tensor core's own accumulator (``acc = tl.dot(a, b,
acc)``, Triton's default of no extra float32 promotion for FP8). Every tile is computed (a GEMM) or
only the diagonal ones (the probes, one per row and column). Off a GPU the same kernel runs under
the Triton interpreter, whose ``tl.dot`` follows the model inside
:func:`ceiling.triton_runtime.tensor_core_numerics`, which is how the CPU tests check this path.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl

from ceiling.numerics.model import mma
from ceiling.triton_runtime import launcher

TILE = 64
TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32,
                "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
BIT_EQUALITY_KINDS = ("e4m3", "e5m2", "bf16", "fp16")
# Device names (torch.cuda.get_device_name) -> the target whose published model they should follow.
DEVICE_TARGETS = {"H100": "h100", "H200": "h100", "GH200": "h100", "B200": "b200", "GB200": "b200"}


@triton.jit
def mma_kernel(a_ptr, b_ptr, c_ptr, d_ptr, M, N, K,
               DIAGONAL: tl.constexpr, TF32: tl.constexpr, TILE_M: tl.constexpr, TILE_N: tl.constexpr,
               TILE_K: tl.constexpr):
    """d = a @ b.T + c for a (M, K), b (N, K) row-major and c, d (M, N) float32."""
    pid_m = tl.program_id(0)
    if DIAGONAL:
        pid_n = pid_m
    else:
        pid_n = tl.program_id(1)
    rm = pid_m * TILE_M + tl.arange(0, TILE_M)
    rn = pid_n * TILE_N + tl.arange(0, TILE_N)
    rk = tl.arange(0, TILE_K)
    out = (rm[:, None] < M) & (rn[None, :] < N)
    acc = tl.load(c_ptr + rm[:, None] * N + rn[None, :], mask=out, other=0.0)
    for k0 in range(0, K, TILE_K):
        ks = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * K + ks[None, :], mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rn[:, None] * K + ks[None, :], mask=(rn[:, None] < N) & (ks[None, :] < K), other=0.0)
        if TF32:
            acc = tl.dot(a, b.T, acc, input_precision="tf32")
        else:
            acc = tl.dot(a, b.T, acc)
    tl.store(d_ptr + rm[:, None] * N + rn[None, :], acc, mask=out)


def run(kind: str, a: np.ndarray, b: np.ndarray, c: np.ndarray, *, device: str, diagonal: bool = False) -> np.ndarray:
    """``a @ b + c`` (float32) on ``device``'s tensor cores; only diagonal tiles when ``diagonal``."""
    dtype = TORCH_DTYPES[kind]
    m, k = a.shape
    n = b.shape[1]
    ta = torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=torch.float64).to(dtype)
    tb = torch.from_numpy(np.ascontiguousarray(b.T)).to(device=device, dtype=torch.float64).to(dtype)
    tc = torch.from_numpy(np.ascontiguousarray(c, dtype=np.float32)).to(device)
    td = torch.zeros((m, n), dtype=torch.float32, device=device)
    grid = (triton.cdiv(m, TILE),) if diagonal else (triton.cdiv(m, TILE), triton.cdiv(n, TILE))
    launcher(mma_kernel, on_gpu=td.is_cuda)[grid](
        ta, tb, tc, td, m, n, k, DIAGONAL=diagonal, TF32=kind == "tf32", TILE_M=TILE, TILE_N=TILE, TILE_K=TILE,
        num_warps=4)
    return td.cpu().numpy()


def backend(device: str):
    """A suite backend (``ceiling.numerics.suite``) running the probes on ``device``."""
    def probe(kind: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        return np.diagonal(run(kind, a, b, np.diag(c), device=device, diagonal=True)).copy()
    return probe


def random_operands(kind: str, m: int, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random a (m, k), b (k, n) exactly in ``kind`` (mixed signs and magnitudes), and a float32 c."""
    rng = np.random.default_rng(seed)
    dtype = TORCH_DTYPES[kind]

    def values(shape):
        x = rng.standard_normal(shape) * np.exp2(rng.integers(-4, 4, shape))
        return torch.from_numpy(x).to(dtype).double().numpy()

    return values((m, k)), values((k, n)), (rng.standard_normal((m, n)) * 8).astype(np.float32)


def bit_equality(target: str, device: str, *, kinds=BIT_EQUALITY_KINDS, m: int = 128, n: int = 128,
                 k: int = 1024, seed: int = 0) -> list[dict[str, Any]]:
    """Random GEMMs on ``device`` against the model of ``target``, every bit of every output."""
    rows = []
    for i, kind in enumerate(kinds):
        a, b, c = random_operands(kind, m, n, k, seed + i)
        got = run(kind, a, b, c, device=device).view(np.uint32)
        want = mma(a, b, c, kind, target).view(np.uint32)
        bad = np.argwhere(got != want)
        row: dict[str, Any] = {"kind": kind, "shape": [m, n, k], "elements": int(got.size),
                               "mismatches": int(len(bad))}
        if len(bad):
            i0, j0 = (int(x) for x in bad[0])
            row["first"] = {"at": [i0, j0], "device": "0x%08x" % got[i0, j0], "model": "0x%08x" % want[i0, j0]}
        rows.append(row)
    return rows


def target_of(device_name: str) -> str | None:
    """The published target a GPU (by its name) should follow, or None."""
    for key, target in sorted(DEVICE_TARGETS.items(), key=lambda kv: -len(kv[0])):
        if key in device_name.upper():
            return target
    return None


def summary(report: dict[str, Any]) -> str:
    """One line of a ``numerics-device --json`` report, for a log."""
    return (f"numerics: {report['device']} | model {report['target']} | follows the published features: "
            f"{report['follows_published']} | bit-equal GEMMs: {report['bit_equal']}")


if __name__ == "__main__":
    import json
    import sys

    print(summary(json.loads(open(sys.argv[1]).read())))
