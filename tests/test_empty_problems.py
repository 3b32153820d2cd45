"""Empty problems (a size 0) on every backend: the reference's answer, forward and backward, with
nothing launched (the op routes them to the reference before any launcher sees them), and the
caller's config still checked."""

from __future__ import annotations

import pytest
import torch

import ceiling
from ceiling.errors import InputError
from ceiling.op import get

BACKENDS = ["nvidia", "amd", "tpu", "trainium"]
TRIMUL_W = {"p_in_weight": (16, 16), "g_in_weight": (16, 16), "p_out_weight": (16, 8), "g_out_weight": (16, 16)}


def _t(*shape, dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(len(shape))).to(dtype).requires_grad_()


def _gemm(m, n, k, batch=None):
    lead = () if batch is None else (batch,)

    def run(backend):
        a, b, bias = _t(*lead, m, k), _t(*lead, k, n), _t(n)
        return ceiling.gemm(a, b, bias=bias, activation="gelu", out_dtype=torch.float32, backend=backend), (a, b, bias)
    return run


def _attention(batch, q_len, k_len, heads):
    def run(backend):
        dtype = torch.float32 if backend == "reference" else torch.bfloat16
        q = _t(batch, q_len, heads, 32, dtype=dtype)
        k, v = _t(batch, k_len, heads, 32, dtype=dtype), _t(batch, k_len, heads, 32, dtype=dtype)
        out, lse = ceiling.attention(q, k, v, return_lse=True, backend=backend)
        return (out, lse), (q, k, v)
    return run


def _triangle(batch, n, heads):
    def run(backend):
        q, k, v = (_t(batch, n, heads, n, 32) for _ in range(3))
        bias = _t(batch, 1, heads, n, n)
        out, lse = ceiling.triangle_attention(q, k, v, bias, backend=backend, return_lse=True)
        return (out, lse), (q, k, v, bias)
    return run


def _trimul(batch, n):
    def run(backend):
        x = _t(batch, n, n, 16)
        weights = {name: _t(*shape) for name, shape in TRIMUL_W.items()}
        return ceiling.triangle_multiplicative_update(x, "outgoing", **weights, backend=backend), (x, *weights.values())
    return run


CASES = {
    "gemm M=0": _gemm(0, 5, 8), "gemm N=0": _gemm(4, 0, 8), "gemm K=0": _gemm(4, 5, 0), "gemm batch=0": _gemm(4, 5, 8, 0),
    "attention batch=0": _attention(0, 16, 16, 2), "attention q_len=0": _attention(1, 0, 16, 2),
    "attention k_len=0": _attention(1, 16, 0, 2), "attention heads=0": _attention(1, 16, 16, 0),
    "triangle_attention batch=0": _triangle(0, 5, 2), "triangle_attention N=0": _triangle(1, 0, 2),
    "triangle_attention heads=0": _triangle(1, 5, 0),
    "triangle_multiplicative_update batch=0": _trimul(0, 6), "triangle_multiplicative_update N=0": _trimul(1, 0),
}


def _results(run, backend):
    outs, leaves = run(backend)
    outs = outs if isinstance(outs, tuple) else (outs,)
    loss = sum(o.float().sum() for o in outs if o.requires_grad)
    grads = torch.autograd.grad(loss, leaves, allow_unused=True) if loss.requires_grad else [None] * len(leaves)
    return [o.detach().float() for o in outs], [None if g is None else g.float() for g in grads]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
def test_an_empty_problem_gives_the_references_answer(case, backend, monkeypatch):
    if backend == "tpu":
        pytest.importorskip("jax")
    expected_outs, expected_grads = _results(CASES[case], "reference")
    # nothing of the backend's runs: its launchers would fail the test
    for impl in get(case.split()[0]).on(backend):
        module = impl.load()
        for hook in ("forward", "backward"):
            if hasattr(module, hook):
                monkeypatch.setattr(module, hook, lambda *a, **k: pytest.fail(f"{impl.module} launched"))
    outs, grads = _results(CASES[case], backend)
    for got, want in zip(outs, expected_outs):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    for got, want in zip(grads, expected_grads):
        assert (got is None) == (want is None)
        if got is not None:
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_empty_answers_are_the_ops_conventions():
    """No key: output 0 and log-sum-exp -inf; K = 0: the epilogue of a zero accumulator."""
    from ceiling.gemm.reference import activate_torch

    (out, lse), _ = _attention(1, 4, 0, 2)("reference")
    assert out.shape == (1, 4, 2, 32) and (out == 0).all() and torch.isneginf(lse).all()
    bias = torch.randn(5)
    y = ceiling.gemm(torch.randn(4, 0), torch.randn(0, 5), bias=bias, activation="gelu", backend="nvidia")
    torch.testing.assert_close(y, activate_torch(bias, "gelu").expand(4, 5))


@pytest.mark.parametrize("backend", ["nvidia", "trainium"])
def test_a_config_for_an_empty_problem_is_still_checked(backend):
    a, b = torch.randn(4, 0), torch.randn(0, 5)
    bad = {"nvidia": {"BLOCK_M": "64"}, "trainium": {"TILES_IN_BLOCK_M": True}}[backend]
    with pytest.raises(InputError, match="config"):
        ceiling.gemm(a, b, backend=backend, config=bad)
    with pytest.raises(InputError, match="config"):
        ceiling.gemm(a, b, backend="reference", config={"BLOCK_M": 64})
