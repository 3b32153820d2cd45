"""The Triton implementation of the triangle multiplicative update on NVIDIA (sm_90a) and AMD
(gfx942), one module for both: the launcher of :mod:`ceiling.triton.triangle_multiplication` at
the config the target's tables give (the target, named by the config, chooses the launch options),
and on a JAX GPU the same kernels through jax-triton
(:mod:`ceiling.triton.triangle_multiplication_jax`)."""

from __future__ import annotations

from ceiling.triton.triangle_multiplication import backward, forward  # noqa: F401 - the implementation's launchers

JAX = "gpu"  # forward_jax/backward_jax run on a JAX GPU (jax-triton); elsewhere the host callback


def heuristic(problem, user=None) -> dict:
    """Nothing beyond the tables: the target's table (``tables/<target>/triangle_multiplication.json``)
    holds a whole config, refined by a device's own where it has one."""
    return {}


def forward_jax(problem, config, x, mask, *weights):
    from ceiling.triton import triangle_multiplication_jax

    return triangle_multiplication_jax.forward(problem, config, x, mask, *weights)


def backward_jax(problem, config, saved, grads, needs):
    from ceiling.triton import triangle_multiplication_jax

    return triangle_multiplication_jax.backward(problem, config, saved, grads, needs)
