"""The error of the FP8 GEMM's promotion interval, measured with the tensor-core model. The Hopper
FP8 kernel (``ceiling.nvidia.gemm_fp8``) sums ``BLOCK_K * PROMOTE_STEPS`` of K in the wgmma
accumulator, whose published model keeps 13 fraction bits, and then adds that partial into a float32
accumulator (``PROMOTE_STEPS = 0``: all of K in the wgmma accumulator). Here each interval's
accumulation is run through :func:`ceiling.numerics.mma` on random e4m3 operands and compared with
the exact float64 product of the same operands, so what is measured is the accumulation alone (the
operands' own quantisation is not in it). ``python -m ceiling.numerics.promotion`` writes the table
(``roofline/data/numerics/fp8_promotion.json``) that the FP8 search template carries, with the
largest run of K the narrowed accumulator may sum before its error passes the tolerance
(``max_unpromoted_k``, read by the template's constraint).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ceiling.numerics.model import mma
from ceiling.numerics.parameters import lookup



def default_path() -> Path:
    """``roofline/data/numerics/fp8_promotion.json`` in the installed ``ceiling.roofline``."""
    import importlib.util

    (folder,) = importlib.util.find_spec("ceiling.roofline").submodule_search_locations
    return Path(folder) / "data" / "numerics" / "fp8_promotion.json"

INTERVALS = (32, 64, 128, 256, 512, 1024, 2048, 4096)  # K summed in the wgmma accumulator per promotion
KS = (256, 512, 1024, 2048, 4096, 8192, 16384)
# The accumulation may add at most a quarter of bf16's unit roundoff (2^-8), the rounding every
# output of the FP8 GEMM gets (bf16 out): beyond that the promotion setting, not the output
# format, sets the result's accuracy.
TOLERANCE = 2.0 ** -10
SHAPE = (32, 32)  # outputs per measurement: 1024 dot products


def operands(k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Standard normal values rounded to e4m3 (unit scale: the quantiser's job is done)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(SHAPE[0], k, generator=g).to(torch.float8_e4m3fn).double().numpy()
    b = torch.randn(k, SHAPE[1], generator=g).to(torch.float8_e4m3fn).double().numpy()
    return a, b


def accumulate(a: np.ndarray, b: np.ndarray, interval: int | None, target: str, checkpoints: tuple[int, ...]
               ) -> dict[int, np.ndarray]:
    """The kernel's float32 result at each K in ``checkpoints``: promoted every ``interval`` of K
    (None: never), each partial a chain of MMAs on the tensor core."""
    out: dict[int, np.ndarray] = {}
    step = interval or max(checkpoints)
    acc = np.zeros(SHAPE, np.float32)
    for k0 in range(0, max(checkpoints), step):
        for cut in (x for x in checkpoints if k0 < x <= k0 + step):
            part = mma(a[:, k0:cut], b[k0:cut], None if interval else acc, "e4m3", target)
            out[cut] = (acc + part).astype(np.float32) if interval else part
        part = mma(a[:, k0:k0 + step], b[k0:k0 + step], None if interval else acc, "e4m3", target)
        acc = (acc + part).astype(np.float32) if interval else part
    return out


def errors(target: str = "h100", seed: int = 0) -> list[dict[str, Any]]:
    """One row per (interval, K): normwise and largest elementwise relative error against float64."""
    a, b = operands(max(KS), seed)
    rows = []
    for interval in (None, *INTERVALS):
        got = accumulate(a, b, interval, target, KS)
        for k in KS:
            exact = a[:, :k] @ b[:k]  # exact: every product and partial sum fits float64's 53 bits
            diff = got[k].astype(np.float64) - exact
            rows.append({"interval": interval or "never", "K": k,
                         "normwise": float(np.linalg.norm(diff) / np.linalg.norm(exact)),
                         "median": float(np.median(np.abs(diff) / np.maximum(np.abs(exact), 1e-30)))})
    return rows


def max_unpromoted_k(rows: list[dict[str, Any]]) -> int:
    """The largest run of K in the wgmma accumulator, among those measured, whose error (at every K
    measured with that run: never promoting over K, or every ``interval``) stays within TOLERANCE."""
    worst: dict[int, float] = {}
    for r in rows:
        run = r["K"] if r["interval"] == "never" else min(r["K"], r["interval"])
        worst[run] = max(worst.get(run, 0.0), r["normwise"])
    ok = [run for run in sorted(worst) if all(worst[x] <= TOLERANCE for x in worst if x <= run)]
    return max(ok) if ok else 0


def _git_commit() -> str | None:
    """The commit the table was measured at (kernels sit below microbench, whose records helper says the same)."""
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def table(target: str = "h100", seed: int = 0) -> dict[str, Any]:
    p = lookup(target, "e4m3")
    rows = errors(target, seed)
    return {
        "about": "Relative error of the FP8 GEMM's accumulation per promotion interval (K summed in the wgmma "
                 "accumulator before the float32 add), modelled, against float64 of the same e4m3 operands",
        "how": f"python -m ceiling.numerics.promotion (ceiling.numerics.promotion.errors): {SHAPE[0]}x{SHAPE[1]} "
               f"outputs of standard normal operands rounded to e4m3 (seed {seed}), each interval's chain of "
               "MMAs through ceiling.numerics.mma, partials added in float32; 'normwise' is "
               "||D - D64||_F / ||D64||_F, 'median' the median elementwise relative error",
        "model": {"target": target, "kind": "e4m3", "provenance": p.provenance,
                  "status": "modelled with published parameters, not measured on a device"},
        "tolerance": TOLERANCE,
        "tolerance_why": "a quarter of bf16's unit roundoff (2^-8): the accumulation adds no more than a small "
                         "part of the output's own rounding",
        "max_unpromoted_k": max_unpromoted_k(rows),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git_commit(),
        "rows": rows,
    }


def load(path: Path | None = None) -> dict[str, Any]:
    return json.loads((path or default_path()).read_text())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="h100")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.out = args.out or default_path()
    data = table(args.target, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    for r in data["rows"]:
        print(f"{str(r['interval']):>6} K={r['K']:>6}  normwise {r['normwise']:.3e}  median {r['median']:.3e}")
    print(f"max_unpromoted_k = {data['max_unpromoted_k']} (tolerance {TOLERANCE:.3e}) -> {args.out}")


if __name__ == "__main__":
    main()
