"""The triangle multiplicative update's oracle and reference implementation (AlphaFold 3 Algorithms
12/13) in plain PyTorch/JAX math in float32 (float64 for float64 inputs), written out in
``docs/triangle.md``. As an implementation its backward is autograd through :func:`forward`
(``jax.vjp`` through :func:`forward_jax`); it keeps nothing for the backward, which recomputes.
"""

from __future__ import annotations


def layer_norm(x, weight, bias, eps):
    import torch

    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def trimul(x, direction, mask, norm_in_weight, norm_in_bias, p_in_weight, p_in_bias, g_in_weight, g_in_bias,
           norm_out_weight, norm_out_bias, p_out_weight, p_out_bias, g_out_weight, g_out_bias, eps=1e-5,
           compute_dtype=None):
    """The triangle multiplicative update on x (B,N,N,c_z); every weight in ``compute_dtype``."""
    import torch
    import torch.nn.functional as F

    compute = compute_dtype or torch.float32

    def cast(t):
        return None if t is None else t.to(compute)

    xc = x.to(compute)
    xn = layer_norm(xc, cast(norm_in_weight), cast(norm_in_bias), eps)
    ab = torch.sigmoid(F.linear(xn, cast(g_in_weight), cast(g_in_bias))) * F.linear(xn, cast(p_in_weight), cast(p_in_bias))
    if mask is not None:
        ab = ab * mask.to(compute)[..., None]
    c = ab.shape[-1] // 2
    a, b = ab[..., :c], ab[..., c:]
    if direction == "outgoing":
        y = torch.einsum("bikc,bjkc->bijc", a, b)
    else:
        y = torch.einsum("bkic,bkjc->bijc", a, b)
    yn = layer_norm(y, cast(norm_out_weight), cast(norm_out_bias), eps)
    out = torch.sigmoid(F.linear(xn, cast(g_out_weight), cast(g_out_bias))) * F.linear(yn, cast(p_out_weight), cast(p_out_bias))
    return out.to(x.dtype)


def trimul_jax(x, direction, mask, norm_in_weight, norm_in_bias, p_in_weight, p_in_bias, g_in_weight, g_in_bias,
               norm_out_weight, norm_out_bias, p_out_weight, p_out_bias, g_out_weight, g_out_bias, eps=1e-5):
    """:func:`trimul` on JAX arrays in float32 (float64 for float64 inputs)."""
    import jax
    import jax.numpy as jnp

    hi = jax.lax.Precision.HIGHEST
    f32 = jnp.promote_types(x.dtype, jnp.float32)

    def ln(t, w, b):
        mu = t.mean(-1, keepdims=True)
        var = ((t - mu) ** 2).mean(-1, keepdims=True)
        t = (t - mu) * jax.lax.rsqrt(var + eps)
        return t * w.astype(f32) + b.astype(f32)

    def linear(t, w, b):
        y = jnp.einsum("...c,oc->...o", t, w.astype(f32), precision=hi)
        return y if b is None else y + b.astype(f32)

    xn = ln(x.astype(f32), norm_in_weight, norm_in_bias)
    ab = jax.nn.sigmoid(linear(xn, g_in_weight, g_in_bias)) * linear(xn, p_in_weight, p_in_bias)
    if mask is not None:
        ab = ab * mask.astype(f32)[..., None]
    c = ab.shape[-1] // 2
    a, b = ab[..., :c], ab[..., c:]
    eq = "bikc,bjkc->bijc" if direction == "outgoing" else "bkic,bkjc->bijc"
    y = jnp.einsum(eq, a, b, precision=hi)
    out = jax.nn.sigmoid(linear(xn, g_out_weight, g_out_bias)) * linear(ln(y, norm_out_weight, norm_out_bias), p_out_weight, p_out_bias)
    return out.astype(x.dtype)


# ----------------------------------------------------------------------------- the implementation's entry points


def forward(problem, config, x, mask, *weights):
    """(out, empty ab, empty y), differentiable: the op's backward is autograd through it."""
    import torch

    compute = torch.float64 if problem.dtype == "float64" else torch.float32
    out = trimul(x, problem.direction, mask, *weights, eps=problem.eps, compute_dtype=compute)
    return out, x.new_empty(0), x.new_empty(0)


def forward_jax(problem, config, x, mask, *weights):
    import jax.numpy as jnp

    out = trimul_jax(x, problem.direction, mask, *weights, eps=problem.eps)
    return out, jnp.zeros((0,), x.dtype), jnp.zeros((0,), x.dtype)


def backward_jax(problem, config, saved, grads, needs):
    """(dx, *dweights) by ``jax.vjp`` through :func:`trimul_jax`, in float32 at least."""
    import jax
    import jax.numpy as jnp

    from ceiling.triangle.spec import TRIMUL_WEIGHTS

    x, weights = saved["x"], tuple(saved[n] for n in TRIMUL_WEIGHTS)
    wide = jnp.promote_types(x.dtype, jnp.float32)

    def out(x, weights):
        return trimul_jax(x, problem.direction, saved["mask"], *weights, eps=problem.eps).astype(wide)

    _, vjp = jax.vjp(out, x, weights)
    dx, dweights = vjp(grads["out"].astype(wide))
    return (dx, *dweights)
