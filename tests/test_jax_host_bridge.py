"""JAX arrays through the host bridge (the interpreted and emulated kernels on the CPU) hand the
kernels writable tensors: PyTorch's warning about a non-writable NumPy array, which JAX's
read-only buffers raise when wrapped as they are, never reaches the caller."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ceiling

jax = pytest.importorskip("jax")
jnp = jax.numpy


@pytest.mark.parametrize("backend", ["nvidia", "trainium"])
def test_attention_on_jax_arrays_warns_nothing_about_writability(backend):
    q = jnp.asarray(np.random.default_rng(0).standard_normal((1, 16, 2, 32), np.float32)).astype(jnp.bfloat16)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*not writable.*")
        out = ceiling.attention(q, q, q, backend=backend)
        grad = jax.grad(lambda x: ceiling.attention(x, x, x, backend=backend).astype(jnp.float32).sum())(q)
    assert out.shape == q.shape and bool(jnp.isfinite(grad.astype(jnp.float32)).all())


def test_the_bridge_copies_read_only_buffers():
    import torch

    from ceiling.jax_bridge import to_torch

    host = np.asarray(jnp.arange(4.0))
    assert not host.flags.writeable
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*not writable.*")
        t = to_torch(host)
    t += 1  # a kernel writes its tensors
    assert torch.equal(t, torch.arange(1.0, 5.0)) and host[0] == 0
