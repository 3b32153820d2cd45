"""Triangle attention and the triangle multiplicative update, on every backend's CPU path.

One test class per op holds the cases (:class:`TriangleAttentionTest`, :class:`TrimulTest`); each
implementation runs them in a subclass that names its backend and its shapes (the TPU's and
Trainium's in ``tests/test_triangle_tpu.py`` and ``tests/test_triangle_trainium.py``). Every
check compares against a float64 oracle with the error-ratio rule of ``ceiling.testing.numerics``:
our error may be at most twice the error of the plain PyTorch computation of the same math at
the inputs' precision, plus a small floor. Inputs are fresh random draws; outputs are poisoned
(NaN) before each run so an unwritten element fails; backward checks use a random output gradient
and every input gradient, the bias's included. The Triton backends run their kernels under the
Triton interpreter.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ceiling
from ceiling.errors import InputError
from ceiling.testing.numerics import assert_close
from ceiling.triangle.attention_reference import attention as reference_attention
from ceiling.triangle.modules import TriangleAttention, TriangleMultiplication, swap_ab_halves
from ceiling.triangle.spec import TRIMUL_WEIGHTS
from ceiling.triangle.trimul_reference import trimul as reference_trimul

F64 = torch.float64


def pytest_generate_tests(metafunc):
    """A test argument ``<name>_case`` runs once per entry of its class's ``<name>_cases``."""
    for arg in metafunc.fixturenames:
        if arg.endswith("_case") and metafunc.cls is not None and hasattr(metafunc.cls, arg + "s"):
            metafunc.parametrize(arg, getattr(metafunc.cls, arg + "s"), ids=lambda case: "-".join(map(str, case)))


@pytest.fixture(autouse=True)
def _no_tf32():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


@pytest.fixture
def poisoned(monkeypatch):
    """torch.empty / empty_like return NaN-filled floating tensors."""
    empty, empty_like = torch.empty, torch.empty_like

    def fill(t):
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t

    monkeypatch.setattr(torch, "empty", lambda *a, **k: fill(empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: fill(empty_like(*a, **k)))


# ----------------------------------------------------------------------------- triangle attention


def attention_inputs(B, N, H, D, dtype=torch.float32, seed=0, fully_masked_rows=(1,)):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, N, H, N, D, generator=g).to(dtype) for _ in range(3))
    bias = (2 * torch.randn(B, 1, H, N, N, generator=g)).float()
    mask = torch.rand(B, N, 1, 1, N, generator=g) > 0.3
    mask[..., 0] = True
    for i in fully_masked_rows:
        mask[:, i] = False
    return q, k, v, bias, mask


def attention_grads(q, k, v, bias, mask, dout, backend, config=None):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v, bias)]
    out = ceiling.triangle_attention(*leaves, mask=mask, backend=backend, config=config)
    grads = torch.autograd.grad(out, leaves, dout)
    return out.detach(), grads


def exact_attention(q, k, v, bias, mask, dout):
    leaves = [t.detach().to(F64).requires_grad_() for t in (q, k, v, bias)]
    out, _ = reference_attention(*leaves, mask=mask, compute_dtype=F64)
    return out.detach(), torch.autograd.grad(out, leaves, dout.to(F64))


def framework_attention(q, k, v, bias, mask, dout):
    """Plain PyTorch in the inputs' dtype: the yardstick for the error ratio."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v, bias)]
    s = torch.einsum("bihjd,bihkd->bihjk", leaves[0], leaves[1]) / math.sqrt(q.shape[-1]) + leaves[3].to(q.dtype)
    s = s.masked_fill(~mask, float("-inf"))
    p = torch.softmax(s.float(), -1).nan_to_num(0.0).to(q.dtype)
    out = torch.einsum("bihjk,bihkd->bihjd", p, leaves[2])
    return out.detach(), torch.autograd.grad(out, leaves, dout)


def check_attention(backend, q, k, v, bias, mask, dout, out_atol, grad_atol, config=None):
    """Output and the four gradients against float64 by the error-ratio rule."""
    out, grads = attention_grads(q, k, v, bias, mask, dout, backend, config)
    exact_out, exact_grads = exact_attention(q, k, v, bias, mask, dout)
    fw_out, fw_grads = framework_attention(q, k, v, bias, mask, dout)
    assert_close("out", out, fw_out, exact_out, atol=out_atol)
    for name, g, e, f in zip(("dq", "dk", "dv", "dbias"), grads, exact_grads, fw_grads):
        assert_close(name, g, f, e, atol=grad_atol)
    return out, grads


def jax_attention_vjp(backend):
    """Out and the four gradients of triangle attention on JAX arrays through its custom VJP,
    against float64, a fully masked row."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", False)
    jnp = jax.numpy
    q, k, v, bias, mask = attention_inputs(1, 9, 2, 8, seed=21)
    dout = torch.randn_like(q)
    jq, jk, jv, jb = (jnp.asarray(t.numpy()) for t in (q, k, v, bias))
    jm = jnp.asarray(mask.numpy())

    def loss(q, k, v, b):
        return (ceiling.triangle_attention(q, k, v, b, jm, backend=backend) * jnp.asarray(dout.numpy())).sum()

    out = ceiling.triangle_attention(jq, jk, jv, jb, jm, backend=backend)
    grads = jax.grad(loss, argnums=(0, 1, 2, 3))(jq, jk, jv, jb)
    exact_out, exact_grads = exact_attention(q, k, v, bias, mask, dout)
    np.testing.assert_allclose(np.asarray(out), exact_out.numpy(), atol=2e-5)
    for g, e in zip(grads, exact_grads):
        assert np.isfinite(np.asarray(g)).all()
        np.testing.assert_allclose(np.asarray(g), e.numpy(), atol=5e-5)
    assert (np.asarray(out)[:, 1] == 0).all()


class TriangleAttentionTest:
    """The cases every implementation of triangle attention runs: float32 at ``fp32_cases``
    (B, N, H, D), bfloat16 at one shape, and JAX arrays through the custom VJP. An
    implementation without one sets that test to None."""

    backend: str
    fp32_cases: list[tuple] = []

    def test_fp32(self, fp32_case, poisoned):
        B, N, H, D = fp32_case
        q, k, v, bias, mask = attention_inputs(B, N, H, D, seed=N + D)
        dout = torch.randn(B, N, H, N, D)
        out, grads = check_attention(self.backend, q, k, v, bias, mask, dout, 1e-6, 1e-6)
        for g, like in zip(grads, (q, k, v, bias)):
            assert g.shape == like.shape and g.dtype == torch.float32
        # the fully masked row: zeros, and nothing flows back through it
        assert (out[:, 1] == 0).all()
        for g in grads[:3]:
            assert (g[:, 1] == 0).all()

    def test_bf16(self, poisoned):
        B, N, H, D = 1, 11, 2, 32
        q, k, v, bias, mask = attention_inputs(B, N, H, D, torch.bfloat16, seed=3)
        dout = torch.randn(B, N, H, N, D).to(torch.bfloat16)
        out, grads = check_attention(self.backend, q, k, v, bias, mask, dout, 1e-2, 2e-2)
        assert out.dtype == torch.bfloat16 and grads[3].dtype == torch.float32

    def test_jax_custom_vjp(self):
        jax_attention_vjp(self.backend)


class TestReferenceAttention(TriangleAttentionTest):
    backend = "reference"
    fp32_cases = [(1, 7, 2, 16), (2, 11, 2, 8)]
    test_bf16 = None  # the oracle itself: float32 math whatever the inputs

    def test_odd_37_no_mask(self):
        q, k, v, bias, _ = attention_inputs(1, 37, 2, 8, seed=37, fully_masked_rows=())
        dout = torch.randn_like(q)
        out, grads = attention_grads(q, k, v, bias, None, dout, "reference")
        leaves = [t.detach().to(F64).requires_grad_() for t in (q, k, v, bias)]
        exact, _ = reference_attention(*leaves, compute_dtype=F64)
        exact_grads = torch.autograd.grad(exact, leaves, dout.to(F64))
        for g, e in zip((out, *grads), (exact, *exact_grads)):
            torch.testing.assert_close(g.to(F64), e, atol=1e-5, rtol=1e-5)


class TestNvidiaAttention(TriangleAttentionTest):
    backend = "nvidia"
    fp32_cases = [(1, 7, 2, 16), (2, 11, 2, 8)]

    def test_forward_exp2_split(self, poisoned):
        """Half the exponentials as a cubic on the FMA pipe (bf16 inputs), fully masked rows included."""
        B, N, H, D = 1, 13, 2, 32
        q, k, v, bias, mask = attention_inputs(B, N, H, D, torch.bfloat16, seed=5)
        out = ceiling.triangle_attention(q, k, v, bias, mask, backend="nvidia",
                                         config={"fwd": {"ROWS": 1, "EXP2_SPLIT": True}})
        exact_out, _ = exact_attention(q, k, v, bias, mask, torch.zeros_like(q))
        fw_out, _ = framework_attention(q, k, v, bias, mask, torch.zeros_like(q))
        assert_close("out", out, fw_out, exact_out, atol=1e-2)
        assert (out[:, 1] == 0).all()

    @pytest.mark.parametrize("dtype,N,H,D", [(torch.float32, 33, 1, 16), (torch.bfloat16, 35, 1, 32)])
    def test_backward_dq_atomic_row_split(self, dtype, N, H, D, poisoned):
        """The dK/dV kernel adding dQ with atomics (DQ_ATOMIC; the dq kernel skipped) and the bias
        gradient summed over rows in separate runs (ROW_SPLIT): every gradient, a random output
        gradient, N not a multiple of the blocks, fully masked rows."""
        q, k, v, bias, mask = attention_inputs(1, N, H, D, dtype, seed=60 + N, fully_masked_rows=(1, N - 1))
        dout = torch.randn(1, N, H, N, D).to(dtype)
        # 16-wide blocks: three key blocks add into each row of dQ, each starting at another query block;
        # and the bias gradient's rows in three runs (N / 3 not whole), added up afterwards
        config = {"bwd_dkdv": {"BLOCK_M": 16, "BLOCK_N": 16, "DQ_ATOMIC": True},
                  "bwd_dbias": {"BLOCK_M": 16, "BLOCK_N": 16, "ROW_SPLIT": 3}}
        atol = 1e-6 if dtype == torch.float32 else 2e-2
        _, grads = check_attention("nvidia", q, k, v, bias, mask, dout, atol, atol, config)
        for g in grads[:3]:
            assert (g[:, 1] == 0).all() and (g[:, N - 1] == 0).all()

    @pytest.mark.parametrize("rows", [2, 4])
    def test_rows_forward(self, rows, poisoned):
        """The forward that shares each bias tile between several rows, N not a multiple of ROWS."""
        from ceiling.op import get, resolve_config
        from ceiling.triangle.spec import shipped_attention_problem

        B, N, H, D = 2, 7, 2, 16
        q, k, v, bias, mask = attention_inputs(B, N, H, D, seed=40 + rows)
        dout = torch.randn(B, N, H, N, D)
        # the row-sharing forward's tiles, as the CPU resolves them
        impl = get("triangle_attention").implementation("nvidia")
        fwd_rows = resolve_config(shipped_attention_problem(D, "float32"), impl, None)["fwd_rows"]
        config = {"fwd": {**fwd_rows, "ROWS": rows}}
        out, _ = check_attention("nvidia", q, k, v, bias, mask, dout, 1e-6, 1e-6, config)
        assert (out[:, 1] == 0).all()

    def test_lse_and_torch_compile(self):
        q, k, v, bias, mask = attention_inputs(1, 7, 2, 16, seed=5)
        out, lse = ceiling.triangle_attention(q, k, v, bias, mask, backend="nvidia", return_lse=True)
        _, exact_lse = reference_attention(q.double(), k.double(), v.double(), bias.double(), mask, compute_dtype=F64)
        assert torch.isneginf(lse[:, 1]).all()  # the log of an empty sum, as in ceiling.attention
        finite = torch.isfinite(exact_lse)
        torch.testing.assert_close(lse[finite].double(), exact_lse[finite], atol=1e-5, rtol=1e-5)

        leaves = [t.clone().requires_grad_() for t in (q, k, v, bias)]

        @torch.compile(fullgraph=True, backend="aot_eager")
        def f(q, k, v, bias):
            return ceiling.triangle_attention(q, k, v, bias, mask, backend="nvidia").sum()

        f(*leaves).backward()
        assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in leaves)

    def test_memory_grows_as_n_squared(self):
        """Forward and backward, the bias gradient included, without O(N^3) memory: doubling N must
        about quadruple the peak of the CPU allocations (an N x N x N tensor would make it 8x)."""
        from ceiling.microbench.benchmarks.runner import cpu_peak_bytes

        peaks = {}
        for n in (16, 32):
            q, k, v, bias, mask = attention_inputs(1, n, 2, 16, seed=3)
            leaves = [t.detach().requires_grad_() for t in (q, k, v, bias)]
            dout = torch.randn_like(q)
            with cpu_peak_bytes() as peak:
                out = ceiling.triangle_attention(*leaves, mask, backend="nvidia")
                torch.autograd.grad(out, leaves, dout)
            if "bytes" not in peak:
                pytest.skip("this PyTorch's profiler exposes no memory events")
            peaks[n] = peak["bytes"]
        assert peaks[32] / peaks[16] < 5.0, peaks

    def test_opcheck(self):
        """The custom op's schema, fake and autograd registrations, as torch.library checks them."""
        from ceiling.triangle.op import TRIANGLE_ATTENTION
        from ceiling.triangle.spec import check_attention

        q, k, v, bias, mask = attention_inputs(1, 5, 2, 16, seed=50)
        ceiling.triangle_attention(q, k, v, bias, mask, backend="nvidia")  # makes ceiling::triangle_attention
        key = TRIANGLE_ATTENTION.select(check_attention(q, k, v, bias, mask, 0.25), "nvidia").key()
        args = (q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), bias.requires_grad_(), mask, key)
        torch.library.opcheck(torch.ops.ceiling.triangle_attention.default, args)


class TestAmdAttention(TriangleAttentionTest):
    """The same source as NVIDIA's at CDNA3's tables and launch options: one shape each."""

    backend = "amd"
    fp32_cases = [(2, 11, 2, 8)]
    test_jax_custom_vjp = None  # the host path is NVIDIA's (the same kernels); jax-triton in test_triangle_jax_triton


# ----------------------------------------------------------------------------- triangle multiplicative update


def trimul_inputs(B, N, CZ, C, dtype=torch.float32, seed=0, bias=True):
    g = torch.Generator().manual_seed(seed)

    def r(*shape, s=1.0, o=0.0):
        return (o + s * torch.randn(*shape, generator=g)).to(dtype)

    x = r(B, N, N, CZ)
    mask = (torch.rand(B, N, N, generator=g) > 0.25).to(dtype)
    mask[:, 2, :] = 0  # a fully masked row of the pair mask
    w = {
        "norm_in_weight": r(CZ, s=0.3, o=1.0), "norm_in_bias": r(CZ, s=0.1),
        "p_in_weight": r(2 * C, CZ, s=CZ**-0.5), "p_in_bias": r(2 * C, s=0.1) if bias else None,
        "g_in_weight": r(2 * C, CZ, s=CZ**-0.5), "g_in_bias": r(2 * C, s=0.1) if bias else None,
        "norm_out_weight": r(C, s=0.3, o=1.0), "norm_out_bias": r(C, s=0.1),
        "p_out_weight": r(CZ, C, s=C**-0.5), "p_out_bias": r(CZ, s=0.1) if bias else None,
        "g_out_weight": r(CZ, CZ, s=CZ**-0.5), "g_out_bias": r(CZ, s=0.1) if bias else None,
    }
    return x, mask, w


def trimul_run(x, direction, mask, w, backend, dout, dtype=None, eps=1e-5, config=None):
    names = [n for n in TRIMUL_WEIGHTS if w[n] is not None]
    leaves = {n: (w[n].to(dtype) if dtype else w[n]).detach().clone().requires_grad_() for n in names}
    xl = (x.to(dtype) if dtype else x).detach().clone().requires_grad_()
    out = ceiling.triangle_multiplicative_update(xl, direction, mask, **leaves, eps=eps, backend=backend, config=config)
    grads = torch.autograd.grad(out, [xl, *leaves.values()], dout.to(out.dtype))
    return out.detach(), dict(zip(["x", *names], grads))


def trimul_exact(x, direction, mask, w, dout, compute):
    names = [n for n in TRIMUL_WEIGHTS if w[n] is not None]
    leaves = {n: w[n].detach().to(compute).requires_grad_() for n in names}
    xl = x.detach().to(compute).requires_grad_()
    full = {n: leaves.get(n) for n in TRIMUL_WEIGHTS}
    out = reference_trimul(xl, direction, mask.to(compute), *full.values(), compute_dtype=compute)
    grads = torch.autograd.grad(out, [xl, *leaves.values()], dout.to(compute))
    return out.detach(), dict(zip(["x", *names], grads))


def check_trimul_fp32(x, direction, mask, w, backend, config=None):
    """Output and all 13 gradients (random output gradient) against float64 by the error-ratio rule."""
    dout = torch.randn_like(x)
    out, grads = trimul_run(x, direction, mask, w, backend, dout, config=config)
    exact_out, exact_grads = trimul_exact(x, direction, mask, w, dout, F64)
    fw_out, fw_grads = trimul_exact(x, direction, mask, w, dout, torch.float32)
    assert_close("out", out, fw_out, exact_out, atol=1e-6)
    assert set(grads) == set(exact_grads) and len(grads) == 13
    for name in grads:
        assert grads[name].shape == exact_grads[name].shape
        assert_close(f"d{name}", grads[name], fw_grads[name], exact_grads[name], atol=1e-5)
    return out, grads


def check_trimul_bf16(x, direction, mask, w, backend, out_atol=2e-2, grad_atol=3e-2):
    """bfloat16 output and every gradient against float64 of the bf16 inputs, the framework's own
    error being the reference's in bf16."""
    dout = torch.randn_like(x)
    out, grads = trimul_run(x, direction, mask, w, backend, dout, dtype=torch.bfloat16)
    wb = {n: None if t is None else t.bfloat16() for n, t in w.items()}
    exact_out, exact_grads = trimul_exact(x.bfloat16(), direction, mask, wb, dout.bfloat16(), F64)
    fw_out, fw_grads = trimul_run(x, direction, mask, w, "reference", dout, dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16
    assert_close("out", out, fw_out, exact_out, atol=out_atol)
    for name in grads:
        assert_close(f"d{name}", grads[name], fw_grads[name], exact_grads[name], atol=grad_atol)


def jax_trimul_vjp(direction, backend):
    """Out and every gradient of the update on JAX arrays through its custom VJP, against float64."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x, mask, w = trimul_inputs(1, 7, 16, 8, seed=4)
    dout = torch.randn_like(x)
    names = list(TRIMUL_WEIGHTS)
    jw = {n: jnp.asarray(w[n].numpy()) for n in names}
    jx, jm, jd = jnp.asarray(x.numpy()), jnp.asarray(mask.numpy()), jnp.asarray(dout.numpy())

    def loss(x, ws):
        return (ceiling.triangle_multiplicative_update(x, direction, jm, **ws, backend=backend) * jd).sum()

    gx, gw = jax.grad(loss, argnums=(0, 1))(jx, jw)
    exact_out, exact_grads = trimul_exact(x, direction, mask, w, dout, F64)
    out = ceiling.triangle_multiplicative_update(jx, direction, jm, **jw, backend=backend)
    np.testing.assert_allclose(np.asarray(out), exact_out.numpy(), atol=2e-5)
    np.testing.assert_allclose(np.asarray(gx), exact_grads["x"].numpy(), atol=1e-4)
    for n in names:
        np.testing.assert_allclose(np.asarray(gw[n]), exact_grads[n].numpy(), atol=2e-4, rtol=1e-4)


class TrimulTest:
    """The cases every implementation of the triangle multiplicative update runs: float32 at
    ``fp32_cases`` (B, N, c_z, c, direction) with all 13 gradients, bfloat16 at ``bf16_cases``
    (direction) and JAX arrays through the custom VJP at ``jax_cases`` (direction). An
    implementation without one sets that test to None."""

    backend: str
    fp32_cases: list[tuple] = []
    bf16_cases: list[tuple] = []  # (N, seed, direction), at c_z = c = 16 without biases
    jax_cases: list[tuple] = []

    def test_fp32(self, fp32_case, poisoned):
        B, N, CZ, C, direction = fp32_case
        x, mask, w = trimul_inputs(B, N, CZ, C, seed=N + C)
        check_trimul_fp32(x, direction, mask, w, self.backend)

    def test_bf16(self, bf16_case, poisoned):
        N, seed, direction = bf16_case
        x, mask, w = trimul_inputs(1, N, 16, 16, seed=seed, bias=False)
        check_trimul_bf16(x, direction, mask, w, self.backend)

    def test_jax_custom_vjp(self, jax_case):
        (direction,) = jax_case
        jax_trimul_vjp(direction, self.backend)


class TestReferenceTrimul(TrimulTest):
    backend = "reference"
    fp32_cases = [(1, 37, 16, 8, "outgoing"), (1, 37, 16, 8, "incoming")]
    jax_cases = [("outgoing",), ("incoming",)]
    test_bf16 = None  # the framework's own bf16 computation is the reference's


class TestNvidiaTrimul(TrimulTest):
    backend = "nvidia"
    fp32_cases = [(1, 7, 16, 16, "outgoing"), (1, 7, 16, 16, "incoming"), (2, 11, 16, 8, "outgoing"),
                  (2, 11, 16, 8, "incoming")]
    bf16_cases = [(9, 9, "outgoing"), (9, 9, "incoming")]
    jax_cases = [("incoming",)]

    def test_saving_residuals(self, poisoned):
        """``save_for_backward``: the forward keeps [a; b] and y instead of the backward recomputing them."""
        x, mask, w = trimul_inputs(1, 7, 16, 8, seed=12)
        check_trimul_fp32(x, "outgoing", mask, w, "nvidia", config={"save_for_backward": True, "bwd_rows": 16})

    def test_opcheck(self):
        """The custom op's schema, fake and autograd registrations (the residual outputs kept or not)."""
        from ceiling.triangle.op import TRIANGLE_MULTIPLICATIVE_UPDATE as TRIMUL
        from ceiling.triangle.ops import _default_weights
        from ceiling.triangle.spec import check_trimul

        x, mask, w = trimul_inputs(1, 5, 16, 8, seed=51)
        weights = [t.requires_grad_() for t in _default_weights(x, w, 8, 16)]
        ceiling.triangle_multiplicative_update(x, "incoming", mask, **w, backend="nvidia")  # makes the custom op
        problem = check_trimul(x, "incoming", mask, dict(zip(TRIMUL_WEIGHTS, weights)))
        for config in (None, {"save_for_backward": True}):
            key = TRIMUL.select(problem, "nvidia", config).key()
            args = (x.requires_grad_(), mask, *weights, key)
            torch.library.opcheck(torch.ops.ceiling.triangle_multiplicative_update.default, args)


class TestAmdTrimul(TrimulTest):
    """The same source as NVIDIA's at CDNA3's tables and launch options: one case."""

    backend = "amd"
    fp32_cases = [(2, 11, 16, 8, "incoming")]
    test_bf16 = None
    test_jax_custom_vjp = None


def test_trimul_torch_compile_and_3d_input():
    x, mask, w = trimul_inputs(1, 7, 16, 8, seed=1)
    weights = {n: t.clone().requires_grad_() if t is not None else None for n, t in w.items()}

    @torch.compile(fullgraph=True, backend="aot_eager")
    def f(x):
        return ceiling.triangle_multiplicative_update(x, "incoming", mask, **weights, backend="nvidia")

    f(x).square().sum().backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in weights.values() if t is not None)
    out3 = ceiling.triangle_multiplicative_update(x[0], "outgoing", mask[0], **w, backend="reference")
    out4 = ceiling.triangle_multiplicative_update(x, "outgoing", mask, **w, backend="reference")
    torch.testing.assert_close(out3, out4[0])


@pytest.mark.slow  # about 100 s: dynamo traces the op and its backward on symbolic sizes
def test_trimul_under_torch_compile_with_dynamic_shapes():
    """With dynamic shapes the custom op's fake runs on symbolic sizes: the call (which decides the
    outputs kept for the backward) is decided there without the cache that concrete calls use."""

    def f(x, mask, weights):
        return ceiling.triangle_multiplicative_update(x, "outgoing", mask, **weights, backend="reference")

    compiled = torch.compile(f, dynamic=True, backend="aot_eager")
    for n in (5, 7):
        x, mask, w = trimul_inputs(1, n, 16, 8, seed=n)
        x.requires_grad_()
        grad = torch.randn(1, n, n, 16)
        ours = compiled(x, mask, w)
        (dx,) = torch.autograd.grad(ours, x, grad)
        x_ref = x.detach().clone().requires_grad_()
        ref = f(x_ref, mask, w)
        (dx_ref,) = torch.autograd.grad(ref, x_ref, grad)
        torch.testing.assert_close(ours, ref)
        torch.testing.assert_close(dx, dx_ref)


# ----------------------------------------------------------------------------- modules and state dicts


def openfold_trimul_forward(sd, x, mask, outgoing, eps=1e-5):
    """OpenFold's TriangleMultiplicativeUpdate math, written from its state-dict keys."""
    F = torch.nn.functional

    def lin(name, t):
        return F.linear(t, sd[f"{name}.weight"], sd.get(f"{name}.bias"))

    z = F.layer_norm(x, x.shape[-1:], sd["layer_norm_in.weight"], sd["layer_norm_in.bias"], eps)
    a = torch.sigmoid(lin("linear_a_g", z)) * lin("linear_a_p", z) * mask[..., None]
    b = torch.sigmoid(lin("linear_b_g", z)) * lin("linear_b_p", z) * mask[..., None]
    y = torch.einsum("bikc,bjkc->bijc" if outgoing else "bkic,bkjc->bijc", a, b)
    y = F.layer_norm(y, y.shape[-1:], sd["layer_norm_out.weight"], sd["layer_norm_out.bias"], eps)
    return lin("linear_z", y) * torch.sigmoid(lin("linear_g", z))


@pytest.mark.parametrize("direction", ["outgoing", "incoming"])
def test_trimul_module_loads_openfold_and_boltz(direction):
    CZ, C, N = 16, 8, 6
    g = torch.Generator().manual_seed(2)
    names = {"linear_a_p": (C, CZ), "linear_a_g": (C, CZ), "linear_b_p": (C, CZ), "linear_b_g": (C, CZ),
             "linear_g": (CZ, CZ), "linear_z": (CZ, C)}
    sd = {}
    for name, shape in names.items():
        sd[f"{name}.weight"] = torch.randn(*shape, generator=g) / 4
        sd[f"{name}.bias"] = torch.randn(shape[0], generator=g) / 10
    for name, c in (("layer_norm_in", CZ), ("layer_norm_out", C)):
        sd[f"{name}.weight"] = 1 + torch.randn(c, generator=g) / 5
        sd[f"{name}.bias"] = torch.randn(c, generator=g) / 10
    x = torch.randn(1, N, N, CZ, generator=g)
    mask = (torch.rand(1, N, N, generator=g) > 0.2).float()
    expected = openfold_trimul_forward(sd, x, mask, direction == "outgoing")

    module = TriangleMultiplication(CZ, C, direction, bias=True)
    module.load_state_dict(sd)  # OpenFold keys, rewritten on load
    torch.testing.assert_close(module(x, mask), expected, atol=1e-5, rtol=1e-5)
    boltz_sd = module.state_dict()
    assert {"norm_in.weight", "p_in.weight", "g_in.weight", "norm_out.bias", "p_out.weight", "g_out.weight"} <= set(boltz_sd)
    again = TriangleMultiplication.from_state_dict(boltz_sd, direction)
    torch.testing.assert_close(again(x, mask), expected, atol=1e-5, rtol=1e-5)


def test_trimul_alphafold3_incoming_swap():
    CZ, C, N = 16, 8, 5
    module = TriangleMultiplication(CZ, C, "incoming")
    x = torch.randn(1, N, N, CZ)
    sd = module.state_dict()
    # AlphaFold 3's released incoming layer: y_ij = sum_k a_kj b_ki with the same [a; b] projections.
    F = torch.nn.functional
    z = F.layer_norm(x, (CZ,), sd["norm_in.weight"], sd["norm_in.bias"])
    ab = torch.sigmoid(F.linear(z, sd["g_in.weight"])) * F.linear(z, sd["p_in.weight"])
    a, b = ab[..., :C], ab[..., C:]
    y = torch.einsum("bkjc,bkic->bijc", a, b)
    expected = F.linear(F.layer_norm(y, (C,), sd["norm_out.weight"], sd["norm_out.bias"]), sd["p_out.weight"]) \
        * torch.sigmoid(F.linear(z, sd["g_out.weight"]))
    swapped = TriangleMultiplication.from_state_dict(sd, "incoming", alphafold3_incoming=True)
    torch.testing.assert_close(swapped(x), expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(module(x), expected, atol=1e-3)
    torch.testing.assert_close(swap_ab_halves(swap_ab_halves(sd["p_in.weight"])), sd["p_in.weight"])


def openfold_triangle_attention(module, x, mask, starting, inf=1e9):
    """OpenFold's TriangleAttention math (additive mask), from the module's parameters."""
    if not starting:
        x, mask = x.transpose(-2, -3), mask.transpose(-1, -2)
    x = module.layer_norm(x)
    B, N, _, _ = x.shape
    H, c = module.no_heads, module.c_hidden
    mask_bias = (inf * (mask - 1))[..., :, None, None, :]
    tri_bias = module.linear(x).permute(0, 3, 1, 2).unsqueeze(1)
    q, k, v = (lin(x).view(B, N, N, H, c).transpose(-2, -3) for lin in (module.mha.linear_q, module.mha.linear_k,
                                                                        module.mha.linear_v))
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(c) + mask_bias + tri_bias, -1)
    o = (a @ v).transpose(-2, -3).reshape(B, N, N, H * c) * torch.sigmoid(module.mha.linear_g(x))
    out = module.mha.linear_o(o)
    return out.transpose(-2, -3) if not starting else out


@pytest.mark.parametrize("starting", [True, False])
@pytest.mark.parametrize("backend", ["reference", "nvidia"])
def test_triangle_attention_module_orientations(starting, backend):
    CZ, N = 16, 7
    torch.manual_seed(11)
    module = TriangleAttention(CZ, c_hidden=8, no_heads=2, starting=starting, backend=backend)
    for p in module.parameters():
        torch.nn.init.normal_(p, std=0.3)
    openfold_sd = {k: v.clone() for k, v in module.state_dict().items()}
    assert {"layer_norm.weight", "linear.weight", "mha.linear_q.weight", "mha.linear_o.bias",
            "mha.linear_g.bias"} == {k for k in openfold_sd if k in {"layer_norm.weight", "linear.weight",
                                     "mha.linear_q.weight", "mha.linear_o.bias", "mha.linear_g.bias"}}
    x = torch.randn(1, N, N, CZ, requires_grad=True)
    mask = (torch.rand(1, N, N) > 0.3).float()
    mask[:, :, 0] = 1
    mask[:, 0, :] = 1
    dout = torch.randn(1, N, N, CZ)
    out = module(x, mask)
    grads = torch.autograd.grad(out, [x, *module.parameters()], dout)
    expected = openfold_triangle_attention(module, x, mask, starting)
    exp_grads = torch.autograd.grad(expected, [x, *module.parameters()], dout)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    for g, e in zip(grads, exp_grads):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)


# ----------------------------------------------------------------------------- bad input


def test_bad_input_names_the_argument():
    q, k, v, bias, mask = attention_inputs(1, 5, 2, 8)
    with pytest.raises(InputError, match="bias"):
        ceiling.triangle_attention(q, k, v, bias[:, :, :1])
    with pytest.raises(InputError, match="mask"):
        ceiling.triangle_attention(q, k, v, bias, mask[..., :-1])
    with pytest.raises(InputError, match="k"):
        ceiling.triangle_attention(q, k.double(), v, bias)
    with pytest.raises(InputError, match="q"):
        ceiling.triangle_attention(q[0], k, v, bias)
    x, m, w = trimul_inputs(1, 5, 16, 8)
    with pytest.raises(InputError, match="direction"):
        ceiling.triangle_multiplicative_update(x, "sideways", m, **w)
    with pytest.raises(InputError, match="g_out_weight"):
        ceiling.triangle_multiplicative_update(x, "outgoing", m, **{**w, "g_out_weight": w["g_out_weight"][:3]})
    with pytest.raises(InputError, match="p_in_weight"):
        ceiling.triangle_multiplicative_update(x, "outgoing", m, **{**w, "p_in_weight": None})
    with pytest.raises(InputError, match="backend"):
        ceiling.triangle_multiplicative_update(x, "outgoing", m, **w, backend="cuda")


def test_backends_report_lists_the_triangle_ops():
    from ceiling import backends

    rows = {(r["op"], r["backend"]): r["mode"] for r in backends.report()}
    for op in ("triangle_attention", "triangle_multiplicative_update"):
        assert rows[(op, "reference")] == "native"
        assert rows[(op, "nvidia")] in ("native", "interpreted")
        assert rows[(op, "amd")] in ("native", "interpreted")


# ----------------------------------------------------------------------------- bench cases (CPU smoke run)


def test_bench_cases_run_on_the_cpu():
    from ceiling.triangle.bench import bench_cases

    cases = bench_cases("tiny", "cpu")
    assert {c.op for c in cases} == {"triangle_attention", "triangle_multiplicative_update"}
    for case in cases:
        inputs = case.make_inputs(0, "cpu")
        outs = [impl.make(inputs)() for impl in case.impls if impl.make is not None]
        assert len(outs) >= 2  # ours and the eager baseline
        first = outs[0][0] if isinstance(outs[0], tuple) else outs[0]
        other = outs[1][0] if isinstance(outs[1], tuple) else outs[1]
        torch.testing.assert_close(first, other, atol=1e-4, rtol=1e-4)


def test_correctness_smoke_of_ceiling_run():
    from ceiling import smoke

    results = smoke.triangle_attention_smoke("nvidia", "cpu", 1) + smoke.trimul_smoke("nvidia", "cpu", 1)
    assert len(results) == 9
    assert all(r.passed for r in results), [r.as_dict() for r in results if not r.passed]


# ----------------------------------------------------------------------------- on the device


ON_NVIDIA = pytest.mark.skipif(ceiling.backends.gpu_vendor() != "nvidia",
                               reason="needs an NVIDIA GPU; the tests above run the same kernels interpreted")


@pytest.mark.gpu
@ON_NVIDIA
@pytest.mark.parametrize("N", [129, 384])
def test_on_gpu_triangle_attention_bf16(N):
    q, k, v, bias, mask = (t.cuda() for t in attention_inputs(1, N, 4, 32, torch.bfloat16, seed=N, fully_masked_rows=(3,)))
    dout = torch.randn_like(q)
    out, _ = check_attention("nvidia", q, k, v, bias, mask, dout, 1e-2, 2e-2)  # float64 on the device
    assert (out[:, 3] == 0).all()


@pytest.mark.gpu
@ON_NVIDIA
def test_on_gpu_triangle_attention_past_int32_offsets():
    """q, k, v with more than 2^31 elements (N = 4200, 4 heads of 32): offsets must be 64-bit.

    Rows of the pair tensor are independent attentions given the shared bias, so a
    few rows (the first, the last, one in between) are checked against the oracle.
    """
    import gc

    N, H, D = 4200, 4, 32
    # q, k, v, dout, out and three gradients: eight 4.5 GB tensors. Earlier GPU tests can leave
    # the caching allocator holding most of the card, so hand that back first.
    gc.collect()
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    if free < 48 * 2**30:
        pytest.skip(f"needs 48 GiB of free device memory, {free / 2**30:.0f} GiB free")
    g = torch.Generator(device="cuda").manual_seed(4200)
    q, k, v = (torch.randn(1, N, H, N, D, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
    assert q.numel() > 2**31
    bias = torch.randn(1, 1, H, N, N, device="cuda", generator=g)
    mask = torch.rand(1, N, 1, 1, N, device="cuda", generator=g) > 0.1
    dout = torch.randn_like(q)
    out, grads = attention_grads(q, k, v, bias, mask, dout, "nvidia")
    for i in (0, 2718, N - 1):
        sl = slice(i, i + 1)
        exact_out, exact_grads = exact_attention(q[:, sl], k[:, sl], v[:, sl], bias, mask[:, sl], dout[:, sl])
        fw_out, fw_grads = framework_attention(q[:, sl], k[:, sl], v[:, sl], bias, mask[:, sl], dout[:, sl])
        assert_close(f"out row {i}", out[:, sl], fw_out, exact_out, atol=1e-2)
        for name, got, e, f in zip(("dq", "dk", "dv"), grads[:3], exact_grads[:3], fw_grads[:3]):
            assert_close(f"{name} row {i}", got[:, sl], f, e, atol=2e-2)
    assert torch.isfinite(grads[3]).all()


@pytest.mark.gpu
@ON_NVIDIA
@pytest.mark.parametrize("direction", ["outgoing", "incoming"])
def test_on_gpu_trimul_bf16(direction):
    x, mask, w = trimul_inputs(1, 193, 128, 128, seed=7)
    x, mask = x.cuda(), mask.cuda()
    w = {n: None if t is None else t.cuda() for n, t in w.items()}
    check_trimul_bf16(x, direction, mask, w, "nvidia")
