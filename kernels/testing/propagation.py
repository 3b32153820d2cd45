"""The NaN and Inf contract every op holds on every backend, and its check.

A NaN or an infinity in one element of one input reaches exactly the outputs and gradients that
float32 math of the op, with the op's masking, sends it to: no fewer (a max that ignores NaN, or a
select that replaces it, hides a diverging run) and no more (a NaN behind a masked key reaches
nothing: a mask selects, it never adds -inf to or multiplies a value that may be NaN). The math of
each op is here (:func:`gemm_math`, :func:`attention_math`, ...), written from the op's definition
and not from any implementation; :func:`check` plants the values, runs the backend and the math on
the same inputs with a finite output gradient, and compares, position by position, which elements
of every output and gradient are NaN, +Inf and -Inf.

One convention the math fixes for every attention op: a query that sees no key has output 0, zero
gradients and log-sum-exp -inf (the log of an empty sum).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

NAN, INF = float("nan"), float("inf")
_CLASSES = ("finite", "NaN", "+Inf", "-Inf")


@dataclass(frozen=True)
class Plant:
    """``value`` (NaN, +Inf or -Inf) written at ``index`` of the input named ``input``."""

    input: str
    index: tuple[int, ...]
    value: float

    def __str__(self) -> str:
        return f"{self.value} at {self.input}{list(self.index)}"


def planted(inputs: dict[str, Any], plants: list[Plant]) -> dict[str, Any]:
    """Copies of ``inputs`` (layouts kept) with the plants written in."""
    import torch

    out = {name: (t.clone() if isinstance(t, torch.Tensor) else t) for name, t in inputs.items()}
    for p in plants:
        out[p.input][p.index] = p.value
    return out


def classes(x: Any):
    """Per element: 0 finite, 1 NaN, 2 +Inf, 3 -Inf (int8, x's shape)."""
    import torch

    x = x.detach()
    if not x.is_floating_point():
        return torch.zeros(x.shape, dtype=torch.int8)
    x = x.float()
    out = torch.zeros(x.shape, dtype=torch.int8)
    out[x.isnan()] = 1
    out[x == INF] = 2
    out[x == -INF] = 3
    return out


def differences(name: str, got: Any, expected: Any, limit: int = 4) -> list[str]:
    """Where ``got`` and ``expected`` differ in class, in words (at most ``limit`` positions)."""
    if got is None or expected is None:
        return [] if got is None and expected is None else [f"{name}: one of the two is missing"]
    if tuple(got.shape) != tuple(expected.shape):
        return [f"{name}: shape {tuple(got.shape)} != {tuple(expected.shape)}"]
    g, e = classes(got), classes(expected)
    bad = (g != e).nonzero().tolist()
    if not bad:
        return []
    shown = ", ".join(f"{tuple(i)}: {_CLASSES[int(g[tuple(i)])]} (math: {_CLASSES[int(e[tuple(i)])]})"
                      for i in bad[:limit])
    counts = {c: (int((g == k).sum()), int((e == k).sum())) for k, c in enumerate(_CLASSES) if k}
    return [f"{name}: {len(bad)} positions differ, {shown}; NaN/+Inf/-Inf counts here vs math {counts}"]


def _results(fn: Callable, inputs: dict[str, Any], grads: tuple[str, ...], dout: dict[str, Any]):
    """(outputs by name, gradients by input name) of ``fn(**inputs)`` with ``dout`` as the
    output gradients (outputs absent from ``dout`` take none)."""
    import torch

    leaves = {n: (inputs[n].detach().clone().requires_grad_() if n in grads else inputs[n]) for n in inputs}
    with torch.enable_grad():
        outs = fn(**leaves)
        if not grads:
            return {n: o.detach() for n, o in outs.items()}, {}
        pairs = [(outs[n], d) for n, d in dout.items()]
        got = torch.autograd.grad([o for o, _ in pairs], [leaves[n] for n in grads], [d for _, d in pairs],
                                  allow_unused=True)
    return {n: o.detach() for n, o in outs.items()}, dict(zip(grads, got))


def check(run: Callable, math_fn: Callable, inputs: dict[str, Any], plants: list[Plant], *,
          grads: tuple[str, ...] = (), dout: dict[str, Any] | None = None) -> list[str]:
    """The contract for ``plants`` in ``inputs``: ``run`` (the backend) and ``math_fn`` (the op's
    float32 math), each ``(**inputs) -> {output name: tensor}``, and their gradients for the inputs
    named in ``grads`` under the finite output gradients ``dout``; returns what differs, in
    words (empty when the backend holds the contract)."""
    x = planted(inputs, plants)
    got_out, got_grad = _results(run, x, grads, dout or {})
    exp_out, exp_grad = _results(math_fn, x, grads, dout or {})
    problems = []
    if plants and not any(bool(classes(t).any()) for t in exp_out.values()):
        problems.append("the plants reach no output of the math: the check would hold for any backend")
    for name in exp_out:
        problems += differences(name, got_out.get(name), exp_out[name])
    for name in grads:
        problems += differences(f"d{name}", got_grad[name], exp_grad[name])
    return problems


def assert_contract(run: Callable, math_fn: Callable, inputs: dict[str, Any], plants: list[Plant], **kw) -> None:
    """:func:`check`, raising ``AssertionError`` with every difference."""
    problems = check(run, math_fn, inputs, plants, **kw)
    assert not problems, "planted " + "; ".join(map(str, plants)) + ":\n" + "\n".join(problems)


# ----------------------------------------------------------------------------- the ops' math


def gemm_math(a, b, bias=None):
    """``a @ b + bias`` in float32."""
    out = a.float() @ b.float()
    return {"out": out if bias is None else out + bias.float()}


def attention_math(q, k, v, bias=None, mask=None, *, causal=False, scale=None):
    """Attention in float32, q (B, Sq, H, D), k and v (B, Sk, H, D): a score a mask or causality
    hides is replaced by -inf (selected, never added), so nothing behind it reaches the output; a
    query that sees no key gets 0 and log-sum-exp -inf."""
    import torch

    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    s = qf @ kf.transpose(-1, -2) * scale
    if bias is not None:
        s = s + bias.float()
    sq, sk = q.shape[1], k.shape[1]
    keep = torch.ones(sq, sk, dtype=torch.bool)
    if causal:
        keep = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + (sk - sq)
    if mask is not None:
        keep = keep & mask.bool()
    keep = keep.expand(s.shape)
    s = torch.where(keep, s, -INF)
    any_key = keep.any(-1, keepdim=True)
    p = torch.where(any_key, torch.softmax(s, -1), 0.0)
    return {"out": (p @ vf).transpose(1, 2), "lse": _lse(s, any_key)}


def _lse(s, any_key):
    """``m + log(sum(exp(s - m)))`` with m the row's max, as a softmax computes it (NaN for a row
    with a +Inf score, whose probabilities are NaN); -inf for a row with no key."""
    import torch

    m = s.amax(-1, keepdim=True)
    m = torch.where(any_key, m, 0.0)
    return torch.where(any_key[..., 0], m[..., 0] + torch.log(torch.exp(s - m).sum(-1)), -INF)


def triangle_attention_math(q, k, v, bias, mask=None, *, scale=None):
    """Triangle attention in float32, q, k, v (B, N, H, N, D), bias (B, 1, H, N, N), mask (B, N,
    1, 1, N): a key the mask removes from row i is removed whole (its k and v rows and its
    scores selected out), so nothing behind it reaches anything; a row with no valid key gives
    0 and log-sum-exp -inf."""
    import torch

    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    q, k, v, bias = (t.float() for t in (q, k, v, bias))
    if mask is None:
        mask = torch.ones(q.shape[0], q.shape[1], 1, 1, q.shape[3], dtype=torch.bool)
    valid = mask.bool()  # (B, N, 1, 1, N)
    key_rows = valid[:, :, 0, 0, :][:, :, None, :, None]  # (B, N, 1, N, 1): key k of row i
    k, v = torch.where(key_rows, k, 0.0), torch.where(key_rows, v, 0.0)
    s = torch.einsum("bihjd,bihkd->bihjk", q, k) * scale + bias
    keep = valid.expand(s.shape)
    s = torch.where(keep, s, -INF)
    any_key = keep.any(-1, keepdim=True)
    p = torch.where(any_key, torch.softmax(s, -1), 0.0)
    return {"out": torch.einsum("bihjk,bihkd->bihjd", p, v), "lse": _lse(s, any_key)}


def scaled_gemm_math(a, b, a_scale, b_scale, *, a_kind: str, b_kind: str, infinite_codes: bool = True):
    """The dequantized operands' product in float32 (value = code x scale). ``infinite_codes``
    False: the backend's FP8 formats have no infinity (AMD's FNUZ, to which OCP operands are
    mapped), so an infinite code is NaN."""
    import torch

    from ceiling.scaled_gemm.reference import dequantize_a, dequantize_b

    a, b = a.float(), b.float()
    if not infinite_codes:
        a, b = (torch.where(t.isinf(), NAN, t) for t in (a, b))
    return {"out": dequantize_a(a, a_scale, a_kind) @ dequantize_b(b, b_scale, b_kind)}


def fp8_gemm_math(a, b):
    """``ceiling.fp8_gemm`` in float32, as far as NaN and Inf go: the operands are quantized to
    e4m3, which has no infinity (an infinite input becomes NaN), with scales taken from the
    finite values only (a NaN or Inf moves no other element)."""
    import torch

    a, b = (torch.where(t.isinf(), NAN, t.float()) for t in (a, b))
    return {"out": a @ b}


def trimul_math(x, mask=None, *, direction: str, eps: float = 1e-5, **weights):
    """The triangle multiplicative update in float32: its definition, in which the mask multiplies
    the gated projections (as AlphaFold 3 and cuEquivariance define it), so a NaN at a masked
    pair still reaches what that product sends it to."""
    from ceiling.triangle.spec import TRIMUL_WEIGHTS
    from ceiling.triangle.trimul_reference import trimul

    return {"out": trimul(x.float(), direction, mask, *(weights.get(n) for n in TRIMUL_WEIGHTS), eps=eps)}
