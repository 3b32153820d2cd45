"""``scaled_gemm``'s backward (its bias's gradient) and the scaled GEMM run through its op, for the
backward passes of both scaled GEMM ops (:mod:`ceiling.scaled_gemm.trainable`)."""

from __future__ import annotations


def scaled_gemm(a, b, a_scale, b_scale, bias=None, *, out_dtype: str, backend: str):
    """``ceiling.scaled_gemm`` through its op (PyTorch or JAX arrays), for operands a backward made:
    checked into a problem and resolved there, as a public call is."""
    from ceiling.op import get

    op = get("scaled_gemm")
    static = {"activation": None, "out_dtype": out_dtype}
    arrays = (a, b, a_scale, b_scale, bias)
    return op.run(op.check(*arrays, **static), backend, None, arrays, static)[0]


def pre_activation_grad(grad, activation, out, recompute):
    """dL/dz from dL/d(out) on torch tensors: relu from the saved output, gelu and silu from a
    recomputed float32 z."""
    from ceiling.gemm.reference import activation_grad_torch

    if activation is None:
        from ceiling.arrays import materialized

        return materialized(grad)  # an expanded gradient (of a sum) goes on to the quantizer and the op
    if activation == "relu":
        return grad * (out > 0)
    return (grad.float() * activation_grad_torch(recompute(), activation)).to(grad.dtype)


def bias_grad(backend: str, problem, saved: dict, grads: dict, needs: dict) -> tuple:
    """``scaled_gemm``'s backward on torch tensors: the bias's gradient, the pre-activation
    recomputed in float32 through the op where the activation needs it."""
    s = saved
    if not needs.get("bias"):
        return (None,)
    dz = pre_activation_grad(grads["out"], problem.activation, s["out"], lambda: scaled_gemm(
        s["a"], s["b"], s["a_scale"], s["b_scale"], s["bias"], out_dtype="float32", backend=backend))
    return (dz.float().sum(dim=0).to(s["bias"].dtype),)


def bias_grad_jax(forward_jax, problem, config, saved: dict, grads: dict, needs: dict) -> tuple:
    """The same on JAX arrays, by JAX's autodiff through a jnp ``forward_jax``."""
    import jax

    s = saved
    if not needs.get("bias"):
        return (None,)
    _, vjp = jax.vjp(lambda bias: forward_jax(problem, config, s["a"], s["b"], s["a_scale"], s["b_scale"], bias)[0],
                     s["bias"])
    return vjp(grads["out"])
