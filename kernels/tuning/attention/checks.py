"""Whether a candidate computes the right thing: float32 and framework references, the error
check, and the check each worker process runs on a small problem (compiling the candidate)."""

from __future__ import annotations

import math
import time

from ceiling.tuning.attention.problems import (
    Group,
    attention_inputs,
    attention_saved,
    outputs_of,
    thunk,
    triangle_inputs,
    triangle_saved,
)

def references(group: Group, x: dict, saved) -> dict:
    """kernel -> (float32 reference outputs, the framework's own bf16 outputs)."""
    import torch

    if group.op == "attention":
        import torch.nn.functional as F

        from ceiling.attention import reference as R

        d = x["q"].shape[-1]
        scale = 1.0 / math.sqrt(d)
        f32 = {n: x[n].float() for n in ("q", "k", "v", "do")}
        o32, lse32 = R.attention_fwd(f32["q"], f32["k"], f32["v"], None, None, group.causal, scale)
        dq32, dk32, dv32, _ = R.attention_bwd(f32["do"], f32["q"], f32["k"], f32["v"], o32, lse32, None, None,
                                              group.causal, scale, False)
        leaves = [x[n].detach().transpose(1, 2).requires_grad_() for n in ("q", "k", "v")]
        with torch.enable_grad():
            o16 = F.scaled_dot_product_attention(*leaves, is_causal=group.causal, scale=scale)
            g16 = torch.autograd.grad(o16, leaves, x["do"].transpose(1, 2))
        o16 = o16.detach().transpose(1, 2)
        dq16, dk16, dv16 = (g.transpose(1, 2) for g in g16)
        return {"fwd": ((o32, lse32), (o16, None)), "dkdv": ((dk32, dv32), (dk16, dv16)), "dq": ((dq32,), (dq16,)),
                "dkdv_dq": ((dq32, dk32, dv32), (dq16, dk16, dv16))}
    from ceiling.triangle.attention_reference import attention
    from ceiling.triangle.bench import eager_triangle_attention

    scale = 1.0 / math.sqrt(x["q"].shape[-1])
    f32 = [x[n].detach().float().requires_grad_() for n in ("q", "k", "v", "bias")]
    with torch.enable_grad():
        o32, lse32 = attention(*f32, x["mask"], scale)
        dq32, dk32, dv32, db32 = torch.autograd.grad(o32, f32, x["do"].float())
    o32 = o32.detach()
    leaves = [x[n].detach().requires_grad_() for n in ("q", "k", "v", "bias")]
    with torch.enable_grad():
        o16 = eager_triangle_attention(*leaves, x["mask"])
        g16 = torch.autograd.grad(o16, leaves, x["do"])
    fwd = ((o32, lse32), (o16.detach(), None))
    return {"fwd": fwd, "fwd_rows": fwd, "bwd_dkdv": ((dk32, dv32), (g16[1], g16[2])),
            "bwd_dq": ((dq32,), (g16[0],)), "bwd_dbias": ((db32,), (g16[3],)),
            "bwd_dkdv_dq": ((dq32, dk32, dv32), (g16[0], g16[1], g16[2]))}


def error_check(ours: tuple, ref32: tuple, ref16: tuple) -> dict:
    """Worst error of each output against float32, against 2x the framework's bf16 error plus a
    floor of 1e-3 of the reference's scale; NaN never passes. The LSE (no bf16 counterpart) must
    agree within 1e-3 of its scale."""
    import torch

    worst, bound, ok = 0.0, 0.0, True
    for mine, r32, r16 in zip(ours, ref32, ref16):
        finite = torch.isfinite(r32)
        mine = mine.float()
        err = (mine - r32).abs()[finite].max().item() if finite.any() else 0.0
        if not torch.equal(torch.isfinite(mine), finite):
            err = float("nan")
        scale = r32[finite].abs().max().item() if finite.any() else 1.0
        if r16 is None:
            b = 1e-3 * max(scale, 1.0)
        else:
            b = 2.0 * (r16.float() - r32).abs()[finite].max().item() + 1e-3 * scale
        worst, bound = max(worst, err) if err == err else float("nan"), max(bound, b)
        ok = ok and err == err and err <= b
    return {"error": worst, "bound": bound, "ok": bool(ok)}


_worker_cache: dict = {}


def _worker_problem(group: Group):
    """Inputs, saved forward and references on the check shape, built once per worker."""
    key = (group.op, group.check_shape, group.causal)
    if key not in _worker_cache:
        make = attention_inputs if group.op == "attention" else triangle_inputs
        x = make(group.check_shape, seed=1)
        saved = attention_saved(x, group.causal) if group.op == "attention" else triangle_saved(x)
        _worker_cache[key] = (x, saved, references(group, x, saved))
    return _worker_cache[key]


def check_candidate(group: Group, kernel: str, cfg: dict) -> dict:
    """Compile ``cfg`` (filling Triton's cache) and compare its output with the references."""
    import torch

    t0 = time.perf_counter()
    try:
        x, saved, refs = _worker_problem(group)
        out = outputs_of(group, kernel, thunk(group, kernel, cfg, x, saved)())
        torch.cuda.synchronize()
        ref32, ref16 = refs[kernel]
        verdict = error_check(out, ref32, ref16)
    except Exception as exc:  # noqa: BLE001 - a config that fails on the device is reported, not fatal
        verdict = {"ok": False, "exception": f"{type(exc).__name__}: {exc}"[:300]}
    verdict["check_s"] = round(time.perf_counter() - t0, 3)
    return verdict
