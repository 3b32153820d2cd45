"""The GEMM op: the arrays it carries, its implementations, and its backward, which is GEMMs
through the op itself (``dA = dZ B^T``, ``dB = A^T dZ``, plus a recompute of the pre-activation
for gelu and silu: cheaper in memory than saving it)."""

from __future__ import annotations

from functools import partial

from ceiling.frontends import Signature
from ceiling.gemm import spec
from ceiling.op import Implementation, Op, register


def _output_specs(problem: spec.GemmProblem):
    return ((problem.out_shape, problem.out_dtype),)


SIGNATURE = Signature(
    inputs=("a", "b", "bias"),
    outputs=("out",),
    output_specs=_output_specs,
    optional=frozenset({"bias"}),
    grads=("a", "b", "bias"),
    saved=("a", "b", "bias", "out"),  # out: the relu mask (PyTorch)
)


def _gemm(call, a, b, bias=None, out_dtype=None):
    """One GEMM of the backward through the op, on the forward's backend (its config resolved for
    its own shape)."""
    problem = spec.check(a, b, bias, None, out_dtype)
    backend = call.forward.implementation.backend
    static = {"activation": None, "out_dtype": problem.out_dtype, "backend": backend}
    (out,) = GEMM.run(problem, backend, None, (a, b, bias), static)
    return out


def _unit_strided(x):
    """``x``, copied where it is expanded (the gradient of a sum, say) or neither of its last two
    dimensions is unit-stride: what the op refuses from a caller, made here by autograd."""
    from ceiling.arrays import materialized

    x = materialized(x)
    if min(x.shape[-2:]) > 1 and 1 not in x.stride()[-2:]:
        return x.contiguous()
    return x


def torch_backward(call, saved, grads, needs):
    import torch

    from ceiling.gemm.reference import activation_grad_torch

    a, b, bias, out, grad = saved["a"], saved["b"], saved["bias"], saved["out"], grads["out"]
    activation = call.problem.activation
    if activation is None:
        dz = grad
    elif activation == "relu":
        dz = grad * (out > 0)
    else:
        z = _gemm(call, a, b, bias, torch.float32)
        dz = (grad.float() * activation_grad_torch(z, activation)).to(grad.dtype)
    dz = _unit_strided(dz.to(a.dtype))
    got = {}
    if needs["a"]:
        got["a"] = _gemm(call, dz, b.mT, out_dtype=a.dtype)
    if needs["b"]:
        if call.problem.b_shared:  # one weight for the batch: fold the batch into M
            got["b"] = _gemm(call, a.reshape(-1, a.shape[-1]).mT, dz.reshape(-1, dz.shape[-1]), out_dtype=b.dtype)
        else:
            got["b"] = _gemm(call, a.mT, dz, out_dtype=b.dtype)
    if bias is not None and needs["bias"]:
        got["bias"] = dz.float().sum(dim=tuple(range(dz.dim() - 1))).to(bias.dtype)
    return got


def jax_backward(call, saved, grads, needs):
    import jax.numpy as jnp

    from ceiling.gemm.reference import activation_grad_jax

    a, b, bias, grad = saved["a"], saved["b"], saved["bias"], grads["out"]
    activation = call.problem.activation
    if activation is None:
        dz = grad
    else:
        z = _gemm(call, a, b, bias, jnp.float32)
        dz = grad.astype(jnp.float32) * activation_grad_jax(z, activation)
    dz = dz.astype(a.dtype)
    got = {"a": _gemm(call, dz, jnp.swapaxes(b, -1, -2), out_dtype=a.dtype)}
    if call.problem.b_shared:
        got["b"] = _gemm(call, a.reshape(-1, a.shape[-1]).T, dz.reshape(-1, dz.shape[-1]), out_dtype=b.dtype)
    else:
        got["b"] = _gemm(call, jnp.swapaxes(a, -1, -2), dz, out_dtype=b.dtype)
    if bias is not None:
        got["bias"] = dz.astype(jnp.float32).sum(axis=tuple(range(dz.ndim - 1))).astype(bias.dtype)
    return got


_impl = partial(Implementation, "gemm")


GEMM = register(Op(
    "gemm",
    SIGNATURE,
    implementations=(
        _impl("reference", "reference", "ceiling.gemm.reference"),
        _impl("triton", "nvidia", "ceiling.nvidia.gemm", family="gemm", target="sm_90a"),
        _impl("triton", "amd", "ceiling.amd.gemm", family="gemm", target="gfx942"),
        _impl("pallas", "tpu", "ceiling.tpu.gemm", family="gemm"),
        _impl("nki", "trainium", "ceiling.trainium.gemm", family="gemm"),
    ),
    check=spec.check_arrays,
    torch_backward=torch_backward,
    jax_backward=jax_backward,
))
