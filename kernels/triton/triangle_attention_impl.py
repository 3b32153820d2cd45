"""The Triton implementation of triangle attention on NVIDIA (sm_90a) and AMD (gfx942), one module
for both: the launcher of :mod:`ceiling.triton.triangle_attention` at the config the target's
tables give (the target, named by the config, chooses the launch options), and on a JAX GPU the
same kernels through jax-triton (:mod:`ceiling.triton.triangle_attention_jax`)."""

from __future__ import annotations

from ceiling.triton.triangle_attention import backward, forward  # noqa: F401 - the implementation's launchers

JAX = "gpu"  # forward_jax/backward_jax run on a JAX GPU (jax-triton); elsewhere the host callback


def heuristic(problem, user=None) -> dict:
    """Nothing beyond the tables: the target's table (``tables/<target>/triangle_attention.json``)
    has an entry for every head dim, refined by a device's own where it has one."""
    return {}


def forward_jax(problem, config, q, k, v, bias, mask):
    from ceiling.triton import triangle_attention_jax

    return triangle_attention_jax.forward(problem, config, q, k, v, bias, mask)


def backward_jax(problem, config, saved, grads, needs):
    from ceiling.triton import triangle_attention_jax

    return triangle_attention_jax.backward(problem, config, saved, grads, needs)
