"""The Triton implementation of the triangle multiplicative update on NVIDIA (sm_90a) and AMD
(gfx942), one module for both: the launcher of :mod:`ceiling.triton.triangle_multiplication` at
the config the target's tables give (the target, named by the config, chooses the launch options),
and on a JAX GPU the same kernels through jax-triton
(:mod:`ceiling.triton.triangle_multiplication_jax`)."""

from __future__ import annotations

from ceiling.amd import cdna4
from ceiling.nvidia import blackwell
from ceiling.triton.triangle_multiplication import backward, forward  # noqa: F401 - the implementation's launchers

JAX = "gpu"  # forward_jax/backward_jax run on a JAX GPU (jax-triton); elsewhere the host callback


def target(problem, user=None) -> str | None:
    """A Blackwell or CDNA4 GPU's own target; None (the implementation's: sm_90a or gfx942) elsewhere."""
    arch = problem.arch or ""
    return blackwell.ARCH_TARGETS.get(arch) or cdna4.ARCH_TARGETS.get(arch)


def heuristic(problem, user=None) -> dict:
    """Nothing beyond the tables on Hopper and CDNA3, whose target tables have an entry for every
    dtype; on Blackwell and CDNA4 those entries fitted to the newer target's space."""
    where = target(problem)
    if where in blackwell.ARCH_TARGETS.values():
        return blackwell.config("triangle_multiplication", problem, {}, problem.features())
    if where in cdna4.ARCH_TARGETS.values():
        return cdna4.config("triangle_multiplication", problem, {}, problem.features())
    return {}


def forward_jax(problem, config, x, mask, *weights):
    from ceiling.triton import triangle_multiplication_jax

    return triangle_multiplication_jax.forward(problem, config, x, mask, *weights)


def backward_jax(problem, config, saved, grads, needs):
    from ceiling.triton import triangle_multiplication_jax

    return triangle_multiplication_jax.backward(problem, config, saved, grads, needs)
