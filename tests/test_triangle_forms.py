"""cuEquivariance's input forms of the triangle ops, the up-front checks, and each backend's head-dim range.

* float and integer masks (nonzero = keep) give what the bool mask gives;
* triangle attention's 4-D single-batch form (N, H, N, D) is the 5-D form's batch 0;
* the multiplicative update takes any number of leading batch dimensions;
* every malformed argument gets ``InputError`` naming it, before any implementation is loaded;
* the head dim outside a backend's range (``HEAD_DIM_LIMITS``) is refused up front,
  and a head dim inside it runs.
"""

from __future__ import annotations

import pytest
import torch

import ceiling
from ceiling.errors import InputError
from ceiling.op import Implementation
from ceiling.triangle.attention_reference import attention
from ceiling.triangle.spec import HEAD_DIM_LIMITS
from tests.test_triangle import attention_inputs, trimul_inputs


@pytest.fixture
def no_launch(monkeypatch):
    """Any load of an implementation's module fails the test: the checks must come first."""
    def refuse(impl):
        raise AssertionError(f"{impl.op} on {impl.backend} was loaded: the input was not refused before launch")

    monkeypatch.setattr(Implementation, "load", refuse)


def _attention_with_grads(q, k, v, bias, mask, backend):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v, bias)]
    out, lse = ceiling.triangle_attention(*leaves, mask=mask, backend=backend, return_lse=True)
    dout = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
    return out.detach(), lse, torch.autograd.grad(out, leaves, dout)


# ----------------------------------------------------------------------------- triangle attention


@pytest.mark.parametrize("backend", ["reference", "nvidia"])
def test_float_and_integer_masks_keep_nonzero_keys(backend):
    q, k, v, bias, mask = attention_inputs(1, 6, 2, 8, seed=71)
    expected = _attention_with_grads(q, k, v, bias, mask, backend)
    # cuEquivariance's "cast to bool internally": any nonzero value keeps the key, 0.5 included.
    soft = mask.float() * torch.rand(mask.shape).clamp_min(0.25)
    forms = (mask.float(), mask.to(torch.bfloat16), mask.to(torch.uint8), soft) if backend == "reference" else (soft,)
    for form in forms:
        out, lse, grads = _attention_with_grads(q, k, v, bias, form, backend)
        torch.testing.assert_close(out, expected[0], rtol=0, atol=0)
        torch.testing.assert_close(lse, expected[1], rtol=0, atol=0)
        for g, e in zip(grads, expected[2]):
            torch.testing.assert_close(g, e, rtol=0, atol=0)


@pytest.mark.parametrize("backend", ["reference", "nvidia"])
def test_four_dimensional_single_batch_form(backend):
    q, k, v, bias, mask = attention_inputs(1, 7, 2, 8, seed=72)
    out5, lse5, grads5 = _attention_with_grads(q, k, v, bias, mask.float(), backend)
    out4, lse4, grads4 = _attention_with_grads(q[0], k[0], v[0], bias[0], mask[0].float(), backend)
    assert out4.shape == q.shape[1:] and lse4.shape == q.shape[1:-1] and grads4[3].shape == bias.shape[1:]
    torch.testing.assert_close(out4, out5[0], rtol=0, atol=0)
    torch.testing.assert_close(lse4, lse5[0], rtol=0, atol=0)
    for g4, g5 in zip(grads4, grads5):
        torch.testing.assert_close(g4, g5[0], rtol=0, atol=0)
    assert (out4[1] == 0).all()  # the fully masked row


def test_four_dimensional_form_in_jax():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    q, k, v, bias, mask = attention_inputs(1, 5, 2, 8, seed=73)
    j = [jnp.asarray(t.numpy()) for t in (q, k, v, bias, mask.float())]
    out5 = ceiling.triangle_attention(*j, backend="reference")
    out4 = ceiling.triangle_attention(*(t[0] for t in j), backend="reference")
    assert out4.shape == q.shape[1:]
    assert (out4 == out5[0]).all()


def test_attention_bad_input_is_refused_before_launch(no_launch):
    q, k, v, bias, mask = attention_inputs(1, 5, 2, 8, seed=74)
    cases = [
        ("q", dict(q=q[0, 0])),                                     # 3-D
        ("q", dict(q=q[..., :4, :], k=k[..., :4, :], v=v[..., :4, :])),  # N != N
        ("bias", dict(q=q[0], k=k[0], v=v[0])),                      # 4-D q with the 5-D bias
        ("mask", dict(q=q[0], k=k[0], v=v[0], bias=bias[0])),        # 4-D q with the 5-D mask
        ("mask", dict(mask=torch.zeros(mask.shape, dtype=torch.complex64))),
        ("q", dict(q=q.double(), k=k.double(), v=v.double(), backend="nvidia")),  # float64 off the reference
        ("scale", dict(scale=float("nan"))),
        ("q", dict(q=q[:, :, :, :, :0], k=k[:, :, :, :, :0], v=v[:, :, :, :, :0])),  # empty head dim
    ]
    base = dict(q=q, k=k, v=v, bias=bias, mask=mask, backend="reference")
    for argument, change in cases:
        with pytest.raises(InputError) as info:
            ceiling.triangle_attention(**{**base, **change})
        assert info.value.argument == argument, (change.keys(), info.value)


def test_float64_runs_on_the_reference_in_float64():
    q, k, v, bias, mask = attention_inputs(1, 5, 2, 8, seed=75)
    out = ceiling.triangle_attention(q.double(), k.double(), v.double(), bias.double(), mask, backend="reference")
    exact, _ = attention(q.double(), k.double(), v.double(), bias.double(), mask, compute_dtype=torch.float64)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, exact, rtol=1e-12, atol=1e-12)  # float32 math would miss by ~1e-7


# ----------------------------------------------------------------------------- head-dim ranges


def _out_of_range(backend: str) -> list[int]:
    low, high = HEAD_DIM_LIMITS[backend]
    return [d for d in (low - 1, None if high is None else high + 1) if d is not None and d >= 1]


@pytest.mark.parametrize("backend", sorted(HEAD_DIM_LIMITS))
def test_head_dim_outside_the_backends_range_is_refused_up_front(backend, no_launch):
    refused = _out_of_range(backend)
    if backend == "reference":
        assert refused == []  # any head dim of at least 1
        return
    assert refused
    for d in refused:
        q, k, v, bias, mask = attention_inputs(1, 3, 1, d, seed=d)
        with pytest.raises(InputError, match=rf"head_dim in \[.*\] on backend '{backend}'") as info:
            ceiling.triangle_attention(q, k, v, bias, mask, backend=backend)
        assert info.value.argument == "q" and info.value.got == str(d)


def test_tpu_refuses_head_dim_16_in_the_spec(no_launch):
    """Head dim 16 runs on the reference, the Triton backends and Trainium; the TPU's flash attention
    starts at 32. The refusal is the spec's, before the TPU module is even imported."""
    q, k, v, bias, mask = attention_inputs(1, 3, 1, 16, seed=16)
    with pytest.raises(InputError, match=r"q: expected head_dim in \[32, 256\] on backend 'tpu', got 16"):
        ceiling.triangle_attention(q, k, v, bias, mask, backend="tpu")
    jax = pytest.importorskip("jax")
    j = [jax.numpy.asarray(t.numpy()) for t in (q, k, v, bias, mask)]
    with pytest.raises(InputError, match="on backend 'tpu'"):
        ceiling.triangle_attention(*j, backend="tpu")


# The TPU's lower bound, 32, runs in tests/test_triangle_tpu.py.
@pytest.mark.parametrize("backend,d", [("reference", 300), ("nvidia", 4), ("amd", 16), ("trainium", 16)])
def test_head_dim_inside_the_range_runs(backend, d):
    low, high = HEAD_DIM_LIMITS[backend]
    assert low <= d and (high is None or d <= high)
    q, k, v, bias, mask = attention_inputs(1, 3, 1, d, seed=d + 1)
    out = ceiling.triangle_attention(q, k, v, bias, mask, backend=backend)
    exact, _ = attention(q.double(), k.double(), v.double(), bias.double(), mask, compute_dtype=torch.float64)
    torch.testing.assert_close(out.double(), exact, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- triangle multiplicative update


@pytest.mark.parametrize("backend", ["reference", "nvidia"])
def test_trimul_any_number_of_leading_batch_dimensions(backend):
    x, mask, w = trimul_inputs(6, 4, 16, 8, seed=76)
    x6, mask6 = x.reshape(2, 3, 4, 4, 16), mask.reshape(2, 3, 4, 4)
    xl = x6.clone().requires_grad_()
    out = ceiling.triangle_multiplicative_update(xl, "incoming", mask6, **w, backend=backend)
    assert out.shape == x6.shape
    dout = torch.randn_like(out)
    (dx,) = torch.autograd.grad(out, xl, dout)
    flat = x.clone().requires_grad_()
    expected = ceiling.triangle_multiplicative_update(flat, "incoming", mask, **w, backend=backend)
    (dflat,) = torch.autograd.grad(expected, flat, dout.reshape(expected.shape))
    torch.testing.assert_close(out, expected.reshape(x6.shape), rtol=0, atol=0)
    torch.testing.assert_close(dx, dflat.reshape(x6.shape), rtol=0, atol=0)
    # no leading dimension at all: one pair tensor
    single = ceiling.triangle_multiplicative_update(x[4], "incoming", mask[4], **w, backend=backend)
    torch.testing.assert_close(single, expected[4], rtol=1e-6, atol=1e-6)


def test_trimul_mask_dtypes_and_mixed_weight_dtypes():
    x, mask, w = trimul_inputs(1, 6, 16, 8, seed=77)
    expected = ceiling.triangle_multiplicative_update(x, "outgoing", mask, **w)
    for form in (mask.bool(), mask.to(torch.uint8), mask.double()):
        torch.testing.assert_close(ceiling.triangle_multiplicative_update(x, "outgoing", form, **w), expected,
                                   rtol=0, atol=0)
    # bf16 pair activations with float32 parameters (autocast's mix): the projections run in bf16.
    xb = x.bfloat16().requires_grad_()
    wb = {n: t.clone().requires_grad_() if t is not None else None for n, t in w.items()}
    out = ceiling.triangle_multiplicative_update(xb, "outgoing", mask, **wb, backend="nvidia")
    out.float().square().sum().backward()
    assert out.dtype == torch.bfloat16
    assert all(t.grad.dtype == torch.float32 and torch.isfinite(t.grad).all() for t in wb.values() if t is not None)
    torch.testing.assert_close(out.float(), expected, rtol=5e-2, atol=5e-2)


def test_trimul_bad_input_is_refused_before_launch(no_launch):
    x, mask, w = trimul_inputs(2, 5, 16, 8, seed=78)
    cases = [
        ("x", dict(x=x[0, 0])),                                        # 2-D
        ("x", dict(x=x[:, :, :4])),                                    # N != N
        ("x", dict(x=x[..., :0])),                                     # no channels (an empty batch is a problem)
        ("mask", dict(mask=mask[:1])),                                 # other leading dimensions
        ("mask", dict(mask=mask.to(torch.complex64))),
        ("direction", dict(direction="sideways")),
        ("x", dict(x=x.double(), backend="nvidia")),
        ("g_out_weight", dict(g_out_weight=w["g_out_weight"].double())),  # float64 with a float32 x
        ("p_in_weight", dict(p_in_weight=w["p_in_weight"][:0])),
        ("norm_out_bias", dict(norm_out_bias=w["norm_out_bias"][:3])),
    ]
    base = dict(x=x, direction="outgoing", mask=mask, **w, backend="reference")
    for argument, change in cases:
        with pytest.raises(InputError) as info:
            ceiling.triangle_multiplicative_update(**{**base, **change})
        assert info.value.argument == argument, (change.keys(), info.value)
