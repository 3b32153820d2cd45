"""Correctness smoke checks: one small random problem per (op, backend), its output and every gradient
checked against float64 by the error-ratio rule (:mod:`ceiling.testing.numerics`), each returning its
measured error next to its bound. ``ceiling run`` runs ``cases("cpu")`` (every backend that runs
here, interpreted or emulated included), one ``run_one`` per worker task; ``run_all(device="cuda")``
checks the native backends on a GPU at larger, odd sizes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import torch

from ceiling import backends
from ceiling.testing.numerics import check


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

    @classmethod
    def of(cls, op: str, backend: str, mode: str, case: str, ours, framework, exact, **kw) -> "SmokeResult":
        """``ours`` held to the error-ratio rule against ``exact``, next to ``framework``."""
        c = check(case, ours, framework, exact, **kw)
        return cls(op, backend, mode, case, c.error, c.bound, c.passed, "" if c.passed else c.rule)


def _err(x: torch.Tensor, ref: torch.Tensor) -> float:
    if torch.isnan(x).any():
        return float("nan")
    return (x.double() - ref.double()).abs().max().item()


# Small tiles for interpreted runs: the interpreter's cost grows with tile count and size.
_INTERPRETED_GEMM_CONFIG = {
    "nvidia": dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, GROUP_M=2, num_stages=2, num_warps=4),
}


def gemm_smoke(backend: str, device: str, seed: int) -> list[SmokeResult]:
    import ceiling
    from ceiling.gemm.reference import gemm as reference

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
        out = ceiling.gemm(a, b, bias=bias, activation="gelu", backend=backend, config=config)
        ref = reference(a.double(), b.double(), bias.double(), "gelu", torch.float64, compute_dtype=torch.float64)
        framework = reference(a, b, bias, "gelu", dtype, compute_dtype=dtype if big else torch.float32)
        results.append(SmokeResult.of("gemm", backend, mode, f"{m}x{n}x{k} {str(dtype)[6:]} bias+gelu, b transposed",
                                      out, framework, ref))
    return results


# Small tiles for the interpreted Triton attention kernels (several blocks and ragged tails per sequence).
_INTERPRETED_ATTENTION_CONFIG = {
    "nvidia": {"fwd": {"block_m": 32, "block_n": 16}, "dkdv": {"block_m": 16, "block_n": 32},
               "dq": {"block_m": 32, "block_n": 16}},
    "amd": {"fwd": {"block_m": 32, "block_n": 16}, "dkdv": {"block_m": 16, "block_n": 32},
            "dq": {"block_m": 32, "block_n": 16}},
}


def attention_smoke(backend: str, device: str, seed: int) -> list[SmokeResult]:
    """Forward and every gradient (the bias's included) of causal GQA attention with a bias and a mask
    holding a fully masked row, bf16, q_len != k_len."""
    import ceiling
    from ceiling.attention.reference import attention_bwd, attention_fwd

    mode = backends.op_availability("attention", backend).mode
    gen = torch.Generator().manual_seed(seed)
    big = device != "cpu"
    B, SQ, SK, H, HK, D = (2, 300, 457, 4, 2, 128) if big else (1, 19, 45, 2, 1, 32)
    q = torch.randn(B, SQ, H, D, generator=gen).to(device, torch.bfloat16)
    k, v = (torch.randn(B, SK, HK, D, generator=gen).to(device, torch.bfloat16) for _ in range(2))
    dout = torch.randn(B, SQ, H, D, generator=gen).to(device, torch.bfloat16)
    bias = torch.randn(B, H, SQ, SK, generator=gen).to(device)
    mask = (torch.rand(B, 1, SQ, SK, generator=gen) > 0.2).to(device)
    mask[:, :, 3] = False  # a query that sees no key: zeros out, zero gradients
    scale = D ** -0.5

    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v, bias)]
    config = None if big else _INTERPRETED_ATTENTION_CONFIG.get(backend)
    out = ceiling.attention(*leaves[:3], causal=True, bias=leaves[3], mask=mask, backend=backend, config=config)
    ours = (out, *torch.autograd.grad(out, leaves, dout))

    def closed_form(compute):
        o, lse = attention_fwd(q, k, v, bias.to(compute), mask, True, scale, compute_dtype=compute)
        return (o, *attention_bwd(dout, q, k, v, o, lse, bias.to(compute), mask, True, scale, True,
                                  compute_dtype=compute))

    exact, framework = closed_form(torch.float64), closed_form(torch.bfloat16)
    return [SmokeResult.of("attention", backend, mode, f"q_len={SQ} k_len={SK} H={H}/{HK} D={D} causal bias+mask "
                           f"bf16 {name}", o, f, e) for name, o, e, f in zip(("out", "dq", "dk", "dv", "dbias"),
                                                                              ours, exact, framework)]


def triangle_attention_smoke(backend: str, device: str, seed: int) -> list[SmokeResult]:
    """Forward and every gradient (the bias's included) of triangle attention, bf16, a fully masked row."""
    import ceiling
    from ceiling.triangle.attention_reference import attention

    mode = backends.op_availability("triangle_attention", backend).mode
    gen = torch.Generator().manual_seed(seed)
    B, N, H, D = (1, 129, 4, 32) if device != "cpu" else (1, 9, 2, 32)  # D >= 32: the TPU kernel's minimum
    q, k, v, dout = (torch.randn(B, N, H, N, D, generator=gen).to(device, torch.bfloat16) for _ in range(4))
    bias = torch.randn(B, 1, H, N, N, generator=gen).to(device)
    mask = (torch.rand(B, N, 1, 1, N, generator=gen) > 0.2).to(device)
    mask[:, 1] = False

    def grads(compute, run):
        leaves = [t.detach().to(compute).requires_grad_() for t in (q, k, v, bias)]
        out = run(*leaves)
        return (out.detach(), *torch.autograd.grad(out, leaves, dout.to(out.dtype)))

    ours = grads(torch.bfloat16, lambda *t: ceiling.triangle_attention(*t[:3], t[3].float(), mask, backend=backend))
    exact = grads(torch.float64, lambda *t: attention(*t, mask=mask, compute_dtype=torch.float64)[0])
    framework = grads(torch.bfloat16, lambda *t: attention(*t, mask=mask, compute_dtype=torch.bfloat16)[0])
    return [SmokeResult.of("triangle_attention", backend, mode, f"N={N} H={H} D={D} bf16 {name}", o, f, e,
                           atol=2e-2, absolute=True)
            for name, o, e, f in zip(("out", "dq", "dk", "dv", "dbias"), ours, exact, framework)]


def trimul_smoke(backend: str, device: str, seed: int) -> list[SmokeResult]:
    """Forward and dx of the triangle multiplicative update, both directions, bf16."""
    import ceiling
    from ceiling.triangle.trimul_reference import trimul

    mode = backends.op_availability("triangle_multiplicative_update", backend).mode
    gen = torch.Generator().manual_seed(seed)
    N, CZ, C = (97, 128, 128) if device != "cpu" else (9, 16, 8)
    x = torch.randn(1, N, N, CZ, generator=gen).to(device, torch.bfloat16)
    mask = (torch.rand(1, N, N, generator=gen) > 0.2).to(device, torch.bfloat16)
    w = {"p_in_weight": (2 * C, CZ), "g_in_weight": (2 * C, CZ), "p_out_weight": (CZ, C), "g_out_weight": (CZ, CZ)}
    w = {n: (torch.randn(*s, generator=gen) * s[1] ** -0.5).to(device, torch.bfloat16) for n, s in w.items()}
    dout = torch.randn(1, N, N, CZ, generator=gen).to(device, torch.bfloat16)
    results = []
    for direction in ("outgoing", "incoming"):
        def run(compute, fn):
            xl = x.to(compute).requires_grad_()
            out = fn(xl, {n: t.to(compute) for n, t in w.items()})
            return out.detach(), torch.autograd.grad(out, xl, dout.to(out.dtype))[0]

        def ref(compute):
            return lambda xl, ws: trimul(xl, direction, mask, None, None, ws["p_in_weight"], None, ws["g_in_weight"],
                                         None, None, None, ws["p_out_weight"], None, ws["g_out_weight"], None,
                                         compute_dtype=compute)

        ours = run(torch.bfloat16, lambda xl, ws: ceiling.triangle_multiplicative_update(
            xl, direction, mask, **ws, backend=backend))
        exact, framework = run(torch.float64, ref(torch.float64)), run(torch.bfloat16, ref(torch.bfloat16))
        results += [SmokeResult.of("triangle_multiplicative_update", backend, mode,
                                   f"N={N} c_z={CZ} c={C} {direction} bf16 {name}", o, f, e, atol=3e-2, absolute=True)
                    for name, o, e, f in zip(("out", "dx"), ours, exact, framework)]
    return results


def scaled_gemm_smoke(backend: str, device: str, seed: int) -> list[SmokeResult]:
    """The FP8 GEMM with each scaling on an odd shape, against float64 of the dequantized inputs;
    bounded by twice the error of the same dequantized product in float32 rounded to bf16."""
    import ceiling
    from ceiling import fp8
    from ceiling.scaled_gemm import RECIPES
    from ceiling.scaled_gemm.reference import scaled_gemm as reference

    mode = backends.op_availability("scaled_gemm", backend).mode
    gen = torch.Generator().manual_seed(seed)
    m, n, k = (1000, 1000, 1000) if device != "cpu" else (37, 45, 130)
    x, w = torch.randn(m, k, generator=gen).to(device), torch.randn(n, k, generator=gen).to(device)
    dtype = torch.float8_e4m3fnuz if backend == "amd" else torch.float8_e4m3fn
    results = []
    for recipe, (ka, kb) in RECIPES.items():
        aq, a_s = fp8.quantize(x, ka, dtype)
        wq, w_s = fp8.quantize(w, kb, dtype)
        b_s = w_s if kb == "tensor" else w_s.mT
        out = ceiling.scaled_gemm(aq, wq.mT, a_s, b_s, backend=backend)
        exact = reference(aq, wq.mT, a_s, b_s, None, None, torch.float64, compute_dtype=torch.float64)
        results.append(SmokeResult.of("scaled_gemm", backend, mode, f"{m}x{n}x{k} {recipe} scales, e4m3 -> bf16", out,
                                      reference(aq, wq.mT, a_s, b_s), exact, atol=1e-2 / 128))
    return results


def fp8_gemm_smoke(backend: str, device: str, seed: int) -> list[SmokeResult]:
    """The trainable FP8 GEMM (block recipe, bf16 backward) on an odd shape: its output and both
    operand gradients, with a random output gradient, against float64 of the dequantized operands
    the forward saved, next to the same products in float32 rounded to bf16."""
    import ceiling
    from ceiling import fp8
    from ceiling.fp8.reference import dequantize

    mode = backends.op_availability("fp8_gemm", backend).mode
    gen = torch.Generator().manual_seed(seed)
    m, n, k = (1000, 1000, 1000) if device != "cpu" else (37, 45, 130)
    x = torch.randn(m, k, generator=gen).to(device, torch.bfloat16)
    w = torch.randn(n, k, generator=gen).to(device, torch.bfloat16)
    dout = torch.randn(m, n, generator=gen).to(device, torch.bfloat16)
    dtype = torch.float8_e4m3fnuz if backend == "amd" else torch.float8_e4m3fn

    def run(on):
        a, b = x.clone().requires_grad_(), w.clone().requires_grad_()
        out = ceiling.fp8_gemm(a, b.mT, recipe="block", backend=on)
        return (out, *torch.autograd.grad(out, (a, b), dout))

    ours = run(backend)
    aq, a_s = fp8.quantize(x, "1x128", dtype)
    wq, w_s = fp8.quantize(w, "128x128", dtype)
    a64, w64 = dequantize(aq, a_s, "1x128").double(), dequantize(wq, w_s, "128x128").double()
    d64 = dout.double()
    exact = (a64 @ w64.T, d64 @ w64, d64.T @ a64)
    framework = tuple(e.float().bfloat16() for e in exact)  # the same products in float32, rounded to bf16
    case = f"{m}x{n}x{k} block recipe e4m3, bf16 backward"
    return [SmokeResult.of("fp8_gemm", backend, mode, f"{case} {name}", o, f, e, atol=1e-2 / 128)
            for name, o, f, e in zip(("out", "da", "db"), ours, framework, exact)]


def fp8_quantize_smoke(backend: str, device: str, seed: int) -> list[SmokeResult]:
    """The FP8 quantizers on an odd shape with outliers, every granularity (the row quantizer
    transposed too), against the float32 oracle (ceiling.fp8.reference): codes and scales are
    bit for bit the oracle's, so the bound is 0 (the error is the largest difference of a
    scale or of a dequantized value)."""
    from ceiling import fp8
    from ceiling.fp8 import reference

    mode = backends.op_availability("fp8_quantize", backend).mode
    gen = torch.Generator().manual_seed(seed)
    rows, cols = (1000, 1000) if device != "cpu" else (37, 300)
    x = (torch.randn(rows, cols, generator=gen) * torch.logspace(-3, 3, cols)).to(torch.bfloat16).to(device)
    dtype = torch.float8_e4m3fnuz if backend == "amd" else torch.float8_e4m3fn
    results = []
    for granularity, transpose in (("tensor", False), ("row", False), ("row", True), ("1x128", False),
                                   ("128x128", False)):
        q, scale = fp8.quantize(x, granularity, dtype, transpose=transpose, backend=backend)
        q_ref, scale_ref = reference.quantize(x, granularity, dtype, transpose=transpose)
        case = f"{rows}x{cols} bf16 -> {str(dtype)[6:]} {granularity}" + (" transposed" if transpose else "")
        results.append(SmokeResult.of("fp8_quantize", backend, mode, case,
                                      (scale, reference.dequantize(q, scale, granularity)), None,
                                      (scale_ref, reference.dequantize(q_ref, scale_ref, granularity)), atol=0.0))
    return results


SMOKES: dict[str, Callable[[str, str, int], list[SmokeResult]]] = {
    "gemm": gemm_smoke,
    "scaled_gemm": scaled_gemm_smoke,
    "fp8_quantize": fp8_quantize_smoke,
    "fp8_gemm": fp8_gemm_smoke,
    "attention": attention_smoke,
    "triangle_attention": triangle_attention_smoke,
    "triangle_multiplicative_update": trimul_smoke,
}


def cases(device: str = "cpu", ops: list[str] | None = None) -> list[tuple[str, str]]:
    """The (op, backend) pairs a smoke run checks here: every vendor backend that can run the op
    (interpreted or emulated included on the CPU; only native ones on a device)."""
    pairs = []
    for op in SMOKES:
        if ops and op not in ops:
            continue
        for backend in backends.ops_by_name()[op].backends():
            avail = backends.op_availability(op, backend)
            if not avail.runs or backend == "reference":
                continue
            if device != "cpu" and avail.mode != "native":
                continue
            pairs.append((op, backend))
    return pairs


def run_one(op: str, backend: str, device: str = "cpu", seed: int = 0) -> list[SmokeResult]:
    """One op's smoke check on one backend; a crash is a failed result, not an exception."""
    try:
        return SMOKES[op](backend, device, seed)
    except Exception as exc:  # noqa: BLE001 - a failing backend is reported, the rest go on
        mode = backends.op_availability(op, backend).mode
        return [SmokeResult(op, backend, mode, "run", float("nan"), 0.0, False, f"{type(exc).__name__}: {exc}"[:500])]


def run_all(device: str = "cpu", seed: int = 0, ops: list[str] | None = None) -> list[SmokeResult]:
    """Every op's smoke check on every backend that can run it here."""
    return [r for op, backend in cases(device, ops) for r in run_one(op, backend, device, seed)]
