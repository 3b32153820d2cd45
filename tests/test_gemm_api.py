"""The GEMM contract: validation, dispatch, the custom op and the JAX front end."""

from __future__ import annotations

import pytest
import torch

import kernels
from kernels.gemm.reference import gemm as reference_gemm

SMALL = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, GROUP_M=2, num_stages=2, num_warps=4,
             EPILOGUE_SUBTILE=False, WARP_SPECIALIZE=False)


def rand(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    "args,kwargs,argument,fragment",
    [
        ((rand(4, 5), rand(6, 3)), {}, "b", "inner dimension 5"),
        ((rand(4, 5, dtype=torch.float64), rand(5, 3, dtype=torch.float64)), {}, "a", "dtype in"),
        ((rand(4, 5, dtype=torch.int32.__class__ and torch.float16), rand(5, 3)), {}, "b", "dtype float16"),
        ((rand(2, 2, 4, 5), rand(5, 3)), {}, "a", "2-D (M, K) or 3-D"),
        ((rand(4, 5), rand(5,)), {}, "b", "2-D (K, N) or 3-D"),
        ((rand(4, 5), rand(2, 5, 3)), {}, "b", "2-D (K, N) array when a is 2-D"),
        ((rand(2, 4, 5), rand(3, 5, 3)), {}, "b", "batch 2"),
        ((rand(4, 5), rand(5, 3)), {"bias": rand(4)}, "bias", "shape (3,)"),
        ((rand(4, 5), rand(5, 3)), {"activation": "tanh"}, "activation", "one of"),
        ((rand(4, 5), rand(5, 3)), {"out_dtype": torch.int8}, "out_dtype", "one of"),
        ((rand(4, 5), rand(5, 3)), {"backend": "cuda"}, "backend", "one of"),
        ((rand(8, 6)[:, ::2], rand(3, 3)), {}, "a", "unit stride"),
        ((rand(4, 5), [[1.0]]), {}, "b", "torch.Tensor or a jax.Array"),
    ],
)
def test_bad_input_is_named(args, kwargs, argument, fragment):
    with pytest.raises(kernels.InputError) as err:
        kernels.gemm(*args, **kwargs)
    assert err.value.argument == argument
    assert fragment in str(err.value)


def test_device_mismatch_is_named():
    a = rand(4, 5)
    b = torch.empty(5, 3, device="meta")
    with pytest.raises(kernels.InputError, match="b: expected device cpu"):
        kernels.gemm(a, b)


def test_errors_come_before_any_launch(monkeypatch):
    import kernels.nvidia.gemm as nv

    monkeypatch.setattr(nv, "gemm", lambda *a, **k: pytest.fail("kernel launched on bad input"))
    with pytest.raises(kernels.InputError):
        kernels.gemm(rand(4, 5), rand(6, 3), backend="nvidia")


def test_cpu_tensors_default_to_reference():
    a, b = rand(9, 7, seed=1), rand(7, 5, seed=2)
    torch.testing.assert_close(kernels.gemm(a, b), a @ b)


def test_backends_report_names_every_backend():
    rows = kernels.backends.report()
    gemm_rows = {r["backend"]: r for r in rows if r["op"] == "gemm"}
    assert set(gemm_rows) == set(kernels.backends.BACKENDS)
    assert gemm_rows["reference"]["mode"] == "native"
    assert gemm_rows["nvidia"]["mode"] in ("interpreted", "native")
    assert all(r["reason"] for r in rows)


def test_opcheck():
    from kernels.gemm.torch_op import encode_config, gemm_op

    a = rand(3, 13, 10, seed=3).requires_grad_()
    b = rand(10, 11, seed=4).requires_grad_()
    bias = rand(11, seed=5).requires_grad_()
    torch.library.opcheck(gemm_op, (a, b, bias, "gelu", torch.float32, "reference", None))
    torch.library.opcheck(gemm_op, (a.detach(), b.detach(), None, None, torch.float32, "nvidia",
                                    encode_config(SMALL)),
                          test_utils=("test_schema", "test_faketensor"))


def test_compile_fullgraph_trains():
    """A small MLP whose linear layers call kernels.gemm compiles with no graph break and learns."""

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = torch.nn.Parameter(rand(16, 32, seed=6) / 4)
            self.b1 = torch.nn.Parameter(torch.zeros(32))
            self.w2 = torch.nn.Parameter(rand(32, 1, seed=7) / 4)

        def forward(self, x):
            h = kernels.gemm(x, self.w1, bias=self.b1, activation="silu")
            return kernels.gemm(h, self.w2)

    torch._dynamo.reset()
    model = MLP()
    step = torch.compile(model, fullgraph=True, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = rand(64, 16, seed=8), rand(64, 1, seed=9)
    losses = []
    for _ in range(5):
        loss = torch.nn.functional.mse_loss(step(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_compile_fullgraph_with_interpreted_kernel():
    torch._dynamo.reset()
    f = torch.compile(lambda a, b: kernels.gemm(a, b, activation="relu", backend="nvidia", config=SMALL),
                      fullgraph=True, backend="aot_eager")
    a, b = rand(20, 12, seed=10), rand(12, 9, seed=11)
    torch.testing.assert_close(f(a, b), torch.relu(a @ b), rtol=1e-4, atol=1e-4)


def test_jax_front_end_matches_and_differentiates():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(12)
    a = jnp.asarray(rng.standard_normal((2, 7, 5), dtype=np.float32))
    b = jnp.asarray(rng.standard_normal((5, 6), dtype=np.float32))
    bias = jnp.asarray(rng.standard_normal((6,), dtype=np.float32))
    cot = jnp.asarray(rng.standard_normal((2, 7, 6), dtype=np.float32))
    out = kernels.gemm(a, b, bias=bias, activation="gelu")
    assert isinstance(out, jax.Array) and out.shape == (2, 7, 6)

    def loss(a, b, bias):
        return jnp.sum(kernels.gemm(a, b, bias=bias, activation="gelu") * cot)

    def loss_ref(a, b, bias):
        return jnp.sum(jax.nn.gelu(a @ b + bias, approximate=False) * cot)

    got = jax.grad(loss, argnums=(0, 1, 2))(a, b, bias)
    want = jax.grad(loss_ref, argnums=(0, 1, 2))(a, b, bias)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda a, b: kernels.gemm(a, b))(a, b)), np.asarray(a @ b), rtol=1e-5, atol=1e-5)


def test_reference_is_the_float64_product():
    a, b, bias = rand(6, 4, seed=13).double(), rand(4, 3, seed=14).double(), rand(3, seed=15).double()
    out = reference_gemm(a, b, bias, "silu", torch.float64, compute_dtype=torch.float64)
    torch.testing.assert_close(out, torch.nn.functional.silu(a @ b + bias))


def test_autotune_is_resolved_by_the_front_end_and_refused_on_cpu(monkeypatch):
    """``config="autotune"`` on the Hopper GEMM: the front end asks the tuning layer's cache for a
    config and hands the kernel that config; on CPU tensors the cache refuses (it times on a GPU)."""
    import kernels.nvidia.gemm as nv
    from kernels.tuning import autotune

    a, b = rand(9, 7, seed=3), rand(7, 5, seed=4)
    with pytest.raises(kernels.BackendUnavailable, match="config='autotune' times configs on a GPU"):
        kernels.gemm(a, b, backend="nvidia", config="autotune")
    assert kernels.gemm(rand(0, 7), b, backend="nvidia", config="autotune").shape == (0, 5)  # nothing to tune

    picked = nv.GemmConfig.from_dict(SMALL | {"SPLIT_K": 1})
    monkeypatch.setattr(autotune, "best_config", lambda *args: picked)
    seen, real = [], nv.gemm
    monkeypatch.setattr(nv, "gemm", lambda *args, config=None: seen.append(config) or real(*args, config=config))
    out = kernels.gemm(a, b, backend="nvidia", config="autotune")
    assert seen == [picked.as_dict()]
    torch.testing.assert_close(out, a @ b, atol=2e-2, rtol=2e-2)
