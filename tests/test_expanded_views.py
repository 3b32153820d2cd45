"""Expanded (stride-0) views: one policy for every op's arrays, an InputError naming the argument
before any launch and before any copy (a kernel fed by TMA descriptors, a host copy or a
contiguous layout would otherwise materialize the view at its full size); autograd's expanded
gradients, which the ops' backwards hand on, are theirs to materialize."""

from __future__ import annotations

import resource

import pytest
import torch

import ceiling
from ceiling.errors import InputError

BF16 = torch.bfloat16


def _row(*shape, dtype=torch.float32):
    return torch.randn(shape).to(dtype)


def _trimul(x, mask=None, p_in=None):
    w = {"p_in_weight": p_in if p_in is not None else _row(16, 16), "g_in_weight": _row(16, 16),
         "p_out_weight": _row(16, 8), "g_out_weight": _row(16, 16)}
    return ceiling.triangle_multiplicative_update(x, "outgoing", mask, **w, backend="nvidia")


CASES = {
    "gemm a": ("a", lambda: ceiling.gemm(_row(1, 64).expand(32, 64), _row(64, 16), backend="nvidia")),
    "gemm b": ("b", lambda: ceiling.gemm(_row(4, 32, 64), _row(64, 16).expand(4, 64, 16), backend="nvidia")),
    "gemm bias": ("bias", lambda: ceiling.gemm(_row(32, 64), _row(64, 16), bias=_row(1).expand(16), backend="nvidia")),
    "attention q": ("q", lambda: ceiling.attention(_row(1, 1, 2, 32, dtype=BF16).expand(1, 16, 2, 32),
                                                   _row(1, 16, 2, 32, dtype=BF16), _row(1, 16, 2, 32, dtype=BF16), backend="nvidia")),
    "attention mask": ("mask", lambda: ceiling.attention(
        _row(1, 16, 2, 32, dtype=BF16), _row(1, 16, 2, 32, dtype=BF16), _row(1, 16, 2, 32, dtype=BF16),
        mask=torch.ones(1, 1, 1, 16, dtype=torch.bool).expand(1, 2, 16, 16), backend="nvidia")),
    "triangle_attention bias": ("bias", lambda: ceiling.triangle_attention(
        *(_row(1, 4, 2, 4, 32) for _ in range(3)), _row(1, 1, 1, 4, 4).expand(1, 1, 2, 4, 4), backend="nvidia")),
    "triangle_multiplicative_update x": ("x", lambda: _trimul(_row(1, 1, 6, 16).expand(1, 6, 6, 16))),
    "triangle_multiplicative_update mask": ("mask", lambda: _trimul(_row(1, 6, 6, 16), torch.ones(1, 1, 6).expand(1, 6, 6))),
    "triangle_multiplicative_update weight": ("p_in_weight", lambda: _trimul(_row(1, 6, 6, 16), p_in=_row(1, 16).expand(16, 16))),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_expanded_view_is_refused_naming_it(case, monkeypatch):
    name, call = CASES[case]
    import ceiling.op

    monkeypatch.setattr(ceiling.op.Op, "run", lambda *a, **k: pytest.fail("the op ran"))
    with pytest.raises(InputError, match=f"^{name}: expected an array with no expanded"):
        call()


def test_a_huge_expanded_key_is_refused_without_allocating_it():
    """A key expanded from one row to 2^26 rows would be 8 GiB of bf16 once copied."""
    q = _row(1, 16, 2, 32, dtype=BF16)
    k = _row(1, 1, 2, 32, dtype=BF16).expand(1, 2**26, 2, 32)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for backend in ("reference", "nvidia", "tpu", "trainium"):
        with pytest.raises(InputError, match="^k: "):
            ceiling.attention(q, k, k, backend=backend)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 256 * 1024  # KiB: nothing near 8 GiB


def test_the_unexpanded_form_broadcasts_and_an_expanded_gradient_is_taken():
    """What the refusal points to works: a size-1 mask dimension broadcasts; and the gradient of a
    sum, which autograd hands the backward expanded, runs through the ops."""
    q, k, v = (_row(1, 16, 2, 32, dtype=BF16) for _ in range(3))
    ceiling.attention(q, k, v, mask=torch.ones(1, 1, 1, 16, dtype=torch.bool), backend="nvidia")
    a, b = _row(32, 64).requires_grad_(), _row(64, 16)
    ceiling.gemm(a, b, backend="nvidia").sum().backward()
    torch.testing.assert_close(a.grad, torch.ones(32, 16) @ b.mT, rtol=1e-2, atol=1e-2)  # TF32 products
    x = _row(16, 32, dtype=BF16).requires_grad_()
    ceiling.fp8_gemm(x, _row(32, 8, dtype=BF16), backend="reference").sum().backward()
    assert torch.isfinite(x.grad).all()
