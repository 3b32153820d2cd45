"""The GEMM op: its contract (validation, dispatch, the custom op under torch.compile, the JAX
front end, config="autotune"), and one test class whose cases every implementation runs, against
a float64 oracle by the error-ratio rule (``ceiling.testing.numerics``). Each implementation's own
pieces (its kernels' schedules, configs, compiles) are tested in ``test_gemm_<vendor>.py``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ceiling
from ceiling.gemm import reference
from ceiling.gemm.op import GEMM
from ceiling.testing.numerics import assert_close, stable_seed

DTYPES = ("float16", "bfloat16", "float32")
ACTIVATIONS = (None, "relu", "gelu", "silu")
# Small Hopper tiles: the interpreter stays fast and three persistent programs walk several tiles each.
NVIDIA_SMALL = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2, "num_stages": 2, "num_warps": 4}


def rand(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, dtype=torch.float32, generator=torch.Generator().manual_seed(seed)).to(dtype)


def operand(shape, dtype, transposed, gen):
    """A (.., rows, cols) operand, row-major or the transposed view of a (.., cols, rows) one."""
    if transposed:
        return torch.randn(*shape[:-2], shape[-1], shape[-2], generator=gen).to(dtype).mT
    return torch.randn(*shape, generator=gen).to(dtype)


def tf32_rounded(x):
    """x rounded to TF32 (10 mantissa bits, nearest), as the GPUs' tensor cores read fp32."""
    bits = x.float().contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32).view(x.shape)


def as_torch(x):
    if x is None or isinstance(x, torch.Tensor):
        return x
    return torch.from_numpy(np.array(x, np.float32)).to(getattr(torch, str(x.dtype)))


def expect(out, a, b, bias=None, activation=None, out_dtype=None, *, tf32=False, name="out"):
    """``out`` against the float64 product by the error-ratio rule, its dtype the one asked for;
    the framework's baseline is the product at the input precision (of TF32-rounded float32 inputs
    where ``tf32``: the GPUs' tensor cores read float32 so)."""
    a, b, bias = as_torch(a), as_torch(b), as_torch(bias)
    out_dtype = out_dtype or a.dtype
    out = as_torch(out)
    assert out.dtype == out_dtype and out.shape == (*a.shape[:-1], b.shape[-1]), (out.dtype, out.shape)
    exact = reference.gemm(a.double(), b.double(), None if bias is None else bias.double(), activation,
                           torch.float64, compute_dtype=torch.float64)
    lo_a, lo_b = (tf32_rounded(a), tf32_rounded(b)) if tf32 and a.dtype == torch.float32 else (a, b)
    framework = reference.gemm(lo_a, lo_b, bias, activation, out_dtype, compute_dtype=a.dtype)
    assert_close(name, out, framework, exact)


# ----------------------------------------------------------------------------------------------
# The contract
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,kwargs,argument,fragment",
    [
        ((rand(4, 5), rand(6, 3)), {}, "b", "inner dimension 5"),
        ((rand(4, 5, dtype=torch.float64), rand(5, 3, dtype=torch.float64)), {}, "a", "dtype in"),
        ((rand(4, 5, dtype=torch.float16), rand(5, 3)), {}, "b", "dtype float16"),
        ((rand(2, 2, 4, 5), rand(5, 3)), {}, "a", "2-D (M, K) or 3-D"),
        ((rand(4, 5), rand(5)), {}, "b", "2-D (K, N) or 3-D"),
        ((rand(4, 5), rand(2, 5, 3)), {}, "b", "2-D (K, N) array when a is 2-D"),
        ((rand(2, 4, 5), rand(3, 5, 3)), {}, "b", "batch 2"),
        ((rand(4, 5), rand(5, 3)), {"bias": rand(4)}, "bias", "shape (3,)"),
        ((rand(4, 5), rand(5, 3)), {"activation": "tanh"}, "activation", "one of"),
        ((rand(4, 5), rand(5, 3)), {"out_dtype": torch.int8}, "out_dtype", "one of"),
        ((rand(4, 5), rand(5, 3)), {"backend": "cuda"}, "backend", "one of"),
        ((rand(8, 6)[:, ::2], rand(3, 3)), {}, "a", "unit stride"),
        ((rand(4, 5), [[1.0]]), {}, "b", "torch.Tensor or a jax.Array"),
        ((rand(4, 5), rand(5, 3)), {"backend": "amd", "config": "autotune"}, "config", '"autotune" (nvidia, PyTorch)'),
        ((rand(4, 5), rand(5, 3)), {"backend": "nvidia", "config": [32]}, "config", "a dict"),
        ((rand(4, 5), rand(5, 3)), {"backend": "reference", "config": {"BLOCK_M": 32}}, "config", "has no config"),
    ],
)
def test_bad_input_is_named(args, kwargs, argument, fragment):
    with pytest.raises(ceiling.InputError) as err:
        ceiling.gemm(*args, **kwargs)
    assert err.value.argument == argument
    assert fragment in str(err.value)


def test_device_mismatch_is_named():
    a = rand(4, 5)
    b = torch.empty(5, 3, device="meta")
    with pytest.raises(ceiling.InputError, match="b: expected device cpu"):
        ceiling.gemm(a, b)


@pytest.mark.parametrize("config", [None, {"BLOCK_M": 48}, {"BLOCK_K": 256, "num_stages": 6}])
def test_errors_come_before_any_launch(monkeypatch, config):
    """Bad arrays, a key outside its domain, a config past the shared memory: an InputError, and
    the launcher never runs."""
    import ceiling.nvidia.gemm as nv

    monkeypatch.setattr(nv, "forward", lambda *a, **k: pytest.fail("kernel launched on bad input"))
    a, b = (rand(4, 5), rand(6, 3)) if config is None else (rand(4, 5), rand(5, 3))
    with pytest.raises(ceiling.InputError):
        ceiling.gemm(a, b, backend="nvidia", config=config)


def test_cpu_tensors_default_to_reference():
    a, b = rand(9, 7, seed=1), rand(7, 5, seed=2)
    torch.testing.assert_close(ceiling.gemm(a, b), a @ b)


def test_backends_report_names_every_backend():
    rows = ceiling.backends.report()
    gemm_rows = {r["backend"]: r for r in rows if r["op"] == "gemm"}
    assert set(gemm_rows) == set(ceiling.backends.BACKENDS)
    assert gemm_rows["reference"]["mode"] == "native"
    assert gemm_rows["nvidia"]["mode"] in ("interpreted", "native")
    assert all(r["reason"] for r in rows)


def test_the_problem_is_built_once_and_the_config_resolved_once(monkeypatch):
    """One call: one problem, one config resolution (forward and backward share it), and the
    launcher gets both."""
    import sys

    import ceiling.op
    from ceiling.gemm import spec

    built, resolved, launched = [], [], []
    check, resolve = spec.check, ceiling.op.resolve_config
    monkeypatch.setattr(sys.modules["ceiling.gemm"], "check", lambda *a, **k: built.append(1) or check(*a, **k))
    monkeypatch.setattr(ceiling.op, "resolve_config", lambda *a: resolved.append(a[1].label) or resolve(*a))
    monkeypatch.setattr("ceiling.nvidia.gemm.forward", lambda p, c, a, b, bias: launched.append((p, c)) or (a @ b,))
    ceiling.gemm(rand(6, 5), rand(5, 4), backend="nvidia", config={"BLOCK_M": 32})
    assert built == [1] and resolved == ["nvidia"]
    (problem, config), = launched
    assert (problem.m, problem.n, problem.k) == (6, 4, 5) and config["BLOCK_M"] == 32 and config.target == "sm_90a"


@pytest.mark.parametrize("backend,config", [("reference", None), ("nvidia", NVIDIA_SMALL),
                                            ("tpu", {"bm": 16, "bn": 128, "bk": 128})])
def test_opcheck(backend, config):
    """The custom op's schema, fake and autograd registrations agree with the implementation."""
    from ceiling.gemm.spec import check

    a = rand(2, 9, 10, seed=3).requires_grad_()
    b = rand(10, 11, seed=4).requires_grad_()
    bias = rand(11, seed=5).requires_grad_()
    ceiling.gemm(a, b, bias=bias, activation="gelu")  # makes ceiling::gemm
    key = GEMM.select(check(a, b, bias, "gelu"), backend, config).key()
    tests = None if backend == "reference" else ("test_schema", "test_faketensor", "test_autograd_registration")
    kwargs = {} if tests is None else {"test_utils": tests}
    torch.library.opcheck(torch.ops.ceiling.gemm.default, (a, b, bias, key), **kwargs)


def test_compile_fullgraph_trains():
    """A small MLP whose linear layers call ceiling.gemm compiles with no graph break and learns."""

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = torch.nn.Parameter(rand(16, 32, seed=6) / 4)
            self.b1 = torch.nn.Parameter(torch.zeros(32))
            self.w2 = torch.nn.Parameter(rand(32, 1, seed=7) / 4)

        def forward(self, x):
            h = ceiling.gemm(x, self.w1, bias=self.b1, activation="silu")
            return ceiling.gemm(h, self.w2)

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
    f = torch.compile(lambda a, b: ceiling.gemm(a, b, activation="relu", backend="nvidia", config=NVIDIA_SMALL),
                      fullgraph=True, backend="aot_eager")
    a, b = rand(20, 12, seed=10), rand(12, 9, seed=11)
    torch.testing.assert_close(f(a, b), torch.relu(a @ b), rtol=1e-4, atol=1e-4)


def test_jax_front_end_matches_and_differentiates():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    rng = np.random.default_rng(12)
    a = jnp.asarray(rng.standard_normal((2, 7, 5), dtype=np.float32))
    b = jnp.asarray(rng.standard_normal((5, 6), dtype=np.float32))
    bias = jnp.asarray(rng.standard_normal((6,), dtype=np.float32))
    cot = jnp.asarray(rng.standard_normal((2, 7, 6), dtype=np.float32))
    out = ceiling.gemm(a, b, bias=bias, activation="gelu")
    assert isinstance(out, jax.Array) and out.shape == (2, 7, 6)

    def loss(a, b, bias):
        return jnp.sum(ceiling.gemm(a, b, bias=bias, activation="gelu") * cot)

    def loss_ref(a, b, bias):
        return jnp.sum(jax.nn.gelu(a @ b + bias, approximate=False) * cot)

    got = jax.grad(loss, argnums=(0, 1, 2))(a, b, bias)
    want = jax.grad(loss_ref, argnums=(0, 1, 2))(a, b, bias)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda a, b: ceiling.gemm(a, b))(a, b)), np.asarray(a @ b),
                               rtol=1e-5, atol=1e-5)


def test_reference_is_the_float64_product():
    a, b, bias = rand(6, 4, seed=13).double(), rand(4, 3, seed=14).double(), rand(3, seed=15).double()
    out = reference.gemm(a, b, bias, "silu", torch.float64, compute_dtype=torch.float64)
    torch.testing.assert_close(out, torch.nn.functional.silu(a @ b + bias))


def test_autotune_resolves_to_the_cached_winner_validated_once(monkeypatch, tmp_path):
    """``config="autotune"`` on the Hopper GEMM: config resolution asks the autotuner for this
    problem's winner and validates it like any config=; on CPU tensors the autotuner refuses (it
    times on a GPU), and an empty problem has nothing to tune."""
    import ceiling.autotune
    import ceiling.nvidia.gemm as nv

    a, b = rand(9, 7, seed=3), rand(7, 5, seed=4)
    with pytest.raises(ceiling.BackendUnavailable, match="config='autotune' times configs on a GPU"):
        ceiling.gemm(a, b, backend="nvidia", config="autotune")
    assert ceiling.gemm(rand(0, 7), b, backend="nvidia", config="autotune").shape == (0, 5)  # nothing to tune

    picked = dict(NVIDIA_SMALL, EPILOGUE_SUBTILE=False, WARP_SPECIALIZE=False, SPLIT_K=1, STREAM_K=False)
    asked = []
    monkeypatch.setattr(ceiling.autotune, "best", lambda family, device, name, key, configs, run: asked.append(
        (key, configs)) or picked)
    seen, real = [], nv.forward
    monkeypatch.setattr(nv, "forward", lambda p, c, *arrays: seen.append(c) or real(p, c, *arrays))
    out = ceiling.gemm(a, b, backend="nvidia", config="autotune")
    assert [dict(c) for c in seen] == [picked]
    (key, configs), = asked
    assert key == "torch.float32|torch.float32|9x7|7x5|NN|None|nobias" and configs  # the fp32 skinny candidates
    torch.testing.assert_close(out, a @ b, atol=2e-2, rtol=2e-2)
    monkeypatch.setattr(ceiling.autotune, "best", lambda *args: {**picked, "BLOCK_M": 48})  # a stale cache entry
    with pytest.raises(ceiling.InputError, match="BLOCK_M"):
        ceiling.gemm(a, b, backend="nvidia", config="autotune")


def test_autotune_candidates_are_points_of_the_space_per_problem_class():
    from ceiling import autotune
    from ceiling.gemm.spec import shipped_problem

    big = autotune.candidates("gemm", "sm_90a", shipped_problem(4096, 4096, 4096).features())
    skinny = autotune.candidates("gemm", "sm_90a", shipped_problem(128, 4096, 4096).features())
    batched = autotune.candidates("gemm", "sm_90a", shipped_problem(4096, 4096, 4096, batch=2).features())
    fp32 = autotune.candidates("gemm", "sm_90a", shipped_problem(64, 4096, 4096, "float32").features())
    assert len(big) == 9 and len(skinny) == len(batched) == 25 and len(fp32) == 5
    assert any(c["STREAM_K"] for c in skinny) and not any(c["STREAM_K"] for c in big)
    assert big == skinny[:9]  # the lists in order, without duplicates


# ----------------------------------------------------------------------------------------------
# Every implementation: the same cases
# ----------------------------------------------------------------------------------------------


class GemmTest:
    """The cases every implementation runs through ``ceiling.gemm``; a subclass names its backend,
    the config its interpreted (or emulated) kernels run with, and how the framework's own
    computation at the input precision is made (the error ratio's baseline)."""

    backend: str
    config: dict | None = None
    tf32 = False  # float32 inputs run as TF32 on the device: the baseline rounds them so

    def gemm(self, a, b, config=..., **kw):
        return ceiling.gemm(a, b, backend=self.backend, config=self.config if config is ... else config, **kw)

    def expect(self, out, a, b, bias=None, activation=None, out_dtype=None, name="out"):
        expect(out, a, b, bias, activation, out_dtype, tf32=self.tf32, name=name)

    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
    def test_odd_sizes_and_layouts(self, dtype, ta, tb):
        gen = torch.Generator().manual_seed(stable_seed(self.backend, dtype, ta, tb) % 2**31)
        m, n, k = 37, 53, 29  # multiples of no block size
        a, b = operand((m, k), getattr(torch, dtype), ta, gen), operand((k, n), getattr(torch, dtype), tb, gen)
        self.expect(self.gemm(a, b), a, b)

    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("activation", ACTIVATIONS)
    def test_epilogues(self, dtype, activation):
        gen = torch.Generator().manual_seed(stable_seed(self.backend, dtype, activation) % 2**31)
        a, b = operand((37, 29), getattr(torch, dtype), False, gen), operand((29, 53), getattr(torch, dtype), False, gen)
        bias = torch.randn(53, 2, generator=gen).to(getattr(torch, dtype))[:, 1]  # a strided view
        self.expect(self.gemm(a, b, bias=bias, activation=activation), a, b, bias, activation)

    @pytest.mark.parametrize("dtype,out_dtype,bias_dtype", [("bfloat16", "float32", "float32"),
                                                            ("float32", "bfloat16", "float16"),
                                                            ("float16", "bfloat16", "bfloat16"),
                                                            ("float16", "float32", "float32")])
    def test_out_dtype(self, dtype, out_dtype, bias_dtype):
        gen = torch.Generator().manual_seed(stable_seed(self.backend, dtype, out_dtype) % 2**31)
        a, b = operand((21, 40), getattr(torch, dtype), False, gen), operand((40, 19), getattr(torch, dtype), True, gen)
        bias = torch.randn(19, generator=gen).to(getattr(torch, bias_dtype))
        out = self.gemm(a, b, bias=bias, activation="silu", out_dtype=getattr(torch, out_dtype))
        self.expect(out, a, b, bias, "silu", getattr(torch, out_dtype))

    @pytest.mark.parametrize("case,activation", [("3d", None), ("3d-transposed", "gelu"), ("shared", None),
                                                 ("shared-transposed-a", "relu"), ("shared-bias", "gelu")])
    def test_batched_and_shared_weight(self, case, activation):
        """A batch against a batch (row-major, or both transposed views), and against one shared
        weight (which the kernels may fold into M, or not when a's rows do not stack)."""
        gen = torch.Generator().manual_seed(stable_seed(self.backend, case) % 2**31)
        dt = torch.float16
        a = operand((3, 19, 24), dt, case in ("3d-transposed", "shared-transposed-a"), gen)
        b = operand((24, 33) if case.startswith("shared") else (3, 24, 33), dt, case == "3d-transposed", gen)
        bias = torch.randn(33, generator=gen).to(dt) if case in ("shared-bias", "3d-transposed") else None
        self.expect(self.gemm(a, b, bias=bias, activation=activation), a, b, bias, activation)

    @pytest.mark.parametrize("m,k,n", [(1, 7, 1), (33, 48, 31), (8, 0, 5), (0, 4, 3)])
    def test_edges(self, m, k, n):
        """One element, exact multiples of a block in K, an empty K (the epilogue of zero: bias
        only), no rows."""
        a, b, bias = rand(m, k, seed=21), rand(k, n, seed=22), rand(n, seed=23)
        out = self.gemm(a, b, bias=bias, activation="relu")
        self.expect(out, a, b, bias, "relu")
        if k == 0:
            torch.testing.assert_close(out, torch.relu(bias).expand(m, n))

    def test_default_config(self):
        """No config: the tuned table or the heuristic picks it, on a shape that spans several tiles."""
        gen = torch.Generator().manual_seed(3)
        a, b = operand((130, 64), torch.bfloat16, False, gen), operand((64, 140), torch.bfloat16, False, gen)
        self.expect(self.gemm(a, b, config=None), a, b)

    @pytest.mark.parametrize("dtype,activation,case", [
        ("float32", None, "shared"), ("float32", "relu", "shared"), ("float32", "gelu", "shared"),
        ("float32", "silu", "shared"), ("float32", "gelu", "2d"), ("bfloat16", "relu", "2d"), ("float32", None, "3d")])
    def test_backward(self, dtype, activation, case):
        """Every gradient (a, b, bias) through the op's backward (GEMMs through the same backend,
        the pre-activation recomputed for gelu and silu) against float64 autograd."""
        gen = torch.Generator().manual_seed(stable_seed(self.backend, dtype, activation, case) % 2**31)
        dt = getattr(torch, dtype)
        lead = () if case == "2d" else (3,)
        a0 = torch.randn(*lead, 21, 18, generator=gen).to(dt)
        b0 = torch.randn(*((3,) if case == "3d" else ()), 18, 27, generator=gen).to(dt)
        bias0 = torch.randn(27, generator=gen).to(dt)
        grad = torch.randn(*lead, 21, 27, generator=gen).to(dt)

        def grads(precision, run):
            a, b, bias = (t.detach().to(precision).requires_grad_() for t in (a0, b0, bias0))
            run(a, b, bias).backward(grad.to(precision))
            return a.grad, b.grad, bias.grad

        ours = grads(dt, lambda a, b, bias: self.gemm(a, b, bias=bias, activation=activation))
        exact = grads(torch.float64, lambda a, b, bias: reference.activate_torch(a @ b + bias, activation))
        low = grads(dt, lambda a, b, bias: reference.activate_torch(a @ b + bias, activation))
        for name, g, e, t in zip(("a", "b", "bias"), ours, exact, low):
            assert g.shape == e.shape and g.dtype == dt, name
            assert_close(f"grad {name}", g, t, e)

    def test_jax_arrays(self):
        """JAX arrays in, JAX arrays out (eager and under jit), and the gradient through the same kernel."""
        jax = pytest.importorskip("jax")
        import jax.numpy as jnp

        rng = np.random.default_rng(stable_seed(self.backend, "jax"))
        a = jnp.asarray(rng.standard_normal((21, 18)), dtype=jnp.bfloat16)
        b = jnp.asarray(rng.standard_normal((27, 18)), dtype=jnp.bfloat16).T  # (18, 27), from a transpose
        bias = jnp.asarray(rng.standard_normal((27,)), dtype=jnp.float32)
        for run in (self.gemm, jax.jit(lambda a, b, bias, activation: self.gemm(a, b, bias=bias, activation=activation),
                                       static_argnames="activation")):
            out = run(a, b, bias=bias, activation="relu")
            assert isinstance(out, jax.Array) and out.dtype == jnp.bfloat16 and out.shape == (21, 27)
            self.expect(out, a, b, bias, "relu")
        cot = jnp.asarray(rng.standard_normal((21, 27)), dtype=jnp.float32)
        da = jax.grad(lambda x: jnp.sum(self.gemm(x, b).astype(jnp.float32) * cot))(a)
        want = (as_torch(cot).double() @ as_torch(b).double().mT)
        low = (as_torch(cot).to(torch.bfloat16) @ as_torch(b).mT).to(torch.bfloat16)
        assert_close("grad a", as_torch(da), low, want)


    @pytest.mark.parametrize("activation,case", [("gelu", "3d"), (None, "shared")])
    def test_jax_backward(self, activation, case):
        """Every gradient from JAX, a random cotangent, against float64."""
        jax = pytest.importorskip("jax")
        import jax.numpy as jnp

        rng = np.random.default_rng(stable_seed(self.backend, "jax backward", case))
        a = jnp.asarray(rng.standard_normal((2, 19, 27)), jnp.float32)
        b = jnp.asarray(rng.standard_normal((27, 35) if case == "shared" else (2, 27, 35)), jnp.float32)
        bias = jnp.asarray(rng.standard_normal((35,)), jnp.float32)
        cot = jnp.asarray(rng.standard_normal((2, 19, 35)), jnp.float32)

        def grads(fn):
            return jax.grad(lambda a, b, bias: jnp.sum(fn(a, b, bias) * cot), argnums=(0, 1, 2))(a, b, bias)

        ours = grads(lambda a, b, bias: self.gemm(a, b, bias=bias, activation=activation))
        low = grads(lambda a, b, bias: reference.gemm_jax(a, b, bias, activation, jnp.float32))
        leaves = [as_torch(x).double().requires_grad_() for x in (a, b, bias)]
        reference.gemm(*leaves, activation, torch.float64, compute_dtype=torch.float64).backward(as_torch(cot).double())
        for name, got, fw, leaf in zip(("da", "db", "dbias"), ours, low, leaves):
            assert got.shape == leaf.shape, name
            assert_close(name, as_torch(got), as_torch(fw), leaf.grad)


class TestReference(GemmTest):
    backend = "reference"


class TestNvidia(GemmTest):
    backend = "nvidia"
    # the persistent kernel (STREAM_K named: under a partial config the heuristic takes stream-K
    # for M <= 64); the stream-K schedule has its own tests
    config = dict(NVIDIA_SMALL, EPILOGUE_SUBTILE=False, WARP_SPECIALIZE=False, STREAM_K=False)
    tf32 = True


class TestAmd(GemmTest):
    backend = "amd"
    config = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}


class TestTpu(GemmTest):
    backend = "tpu"
    config = {"bm": 16, "bn": 128, "bk": 128}  # the smallest block valid for every dtype


class TestTrainium(GemmTest):
    backend = "trainium"
    config = {"target": "trn2"}
