"""Attention forward and backward, one test class holding the cases and one subclass per
implementation (the reference, and the NVIDIA and AMD Triton kernels run under the Triton
interpreter), against a float64 oracle with the error-ratio rule. The TPU, Trainium and Gluon
implementations' own checks are in test_attention_tpu.py, test_attention_trainium.py and
test_attention_gluon.py."""

from __future__ import annotations

import math

import pytest
import torch
import triton
import triton.language as tl

import ceiling
from ceiling.attention import reference
from ceiling.attention.spec import InputError
from ceiling.triton import attention as flash
from ceiling.testing.numerics import assert_close, stable_seed
from ceiling.triton.attention import exp2_fma

BF16, FP16 = torch.bfloat16, torch.float16

# Small tiles keep the interpreter fast and make several blocks (and ragged tails) per sequence.
SMALL = {"fwd": {"block_m": 32, "block_n": 16}, "dkdv": {"block_m": 16, "block_n": 32}, "dq": {"block_m": 32, "block_n": 16}}


@pytest.fixture(autouse=True)
def poisoned_buffers(monkeypatch):
    """Kernel outputs start as NaN, so an element no program wrote fails the NaN checks."""

    def empty(shape, like, dtype=None):
        dtype = dtype or like.dtype
        t = torch.empty(shape, device=like.device, dtype=dtype)
        return t.fill_(float("nan")) if dtype.is_floating_point else t

    monkeypatch.setattr(flash, "_empty", empty)


def naive(q, k, v, bias, mask, causal, scale):
    """An independent float64 softmax attention, differentiated by autograd."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    qf, kf, vf = (t.transpose(1, 2) for t in (q, k, v))
    kf, vf = kf.repeat_interleave(h // hk, 1), vf.repeat_interleave(h // hk, 1)
    s = qf @ kf.transpose(-1, -2) * scale
    if bias is not None:
        s = s + bias
    keep = torch.ones(sq, sk, dtype=torch.bool)
    if causal:
        keep = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + (sk - sq)
    if mask is not None:
        keep = keep & mask
    s = s.masked_fill(~keep, -math.inf)
    m = s.amax(-1, keepdim=True).detach()
    p = torch.exp(s - torch.where(torch.isinf(m), 0.0, m))
    den = p.sum(-1, keepdim=True)
    return ((p / torch.where(den == 0, 1.0, den)) @ vf).transpose(1, 2)


def make_inputs(b, sq, sk, h, hk, d, dtype, bias_shape=None, mask_shape=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, sq, h, d, generator=g).to(dtype)
    k = torch.randn(b, sk, hk, d, generator=g).to(dtype)
    v = torch.randn(b, sk, hk, d, generator=g).to(dtype)
    bias = None if bias_shape is None else torch.randn(*bias_shape, generator=g)
    mask = None if mask_shape is None else torch.rand(*mask_shape, generator=g) > 0.25
    return q, k, v, bias, mask


def assert_close_ratio(name, ours, lowp, exact):
    assert_close(name, ours, lowp, exact, dtype=ours.dtype)


UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}


def cancelling_bias_tolerance(do, q, k, v, bias, mask, causal, scale):
    """The absolute tolerance of a bias gradient that is zero in exact arithmetic, or None.

    A bias constant along the keys (last dim 1) shifts each softmax row by a constant, so its
    gradient, the sum of dS over the keys it spans, cancels to zero: what is left is rounding noise
    in the terms summed, about the inputs' unit roundoff times the sum of their magnitudes (dS of a
    full-size bias, in float64), not a fraction of the reference's (zero) size."""
    if bias is None or bias.shape[-1] != 1:
        return None
    full = bias.double().expand(q.shape[0], q.shape[2], q.shape[1], k.shape[1]).contiguous()
    ds = reference.attention_bwd(do.double(), q.double(), k.double(), v.double(), None, None, full, mask, causal,
                                 scale, True)[3]
    return UNIT_ROUNDOFF[q.dtype] * float(ds.abs().sum_to_size(bias.shape).max())


def assert_bias_grad_close(ours, lowp, exact, zero_tolerance):
    """dbias by the error-ratio rule, at an absolute scale where it is zero in exact arithmetic."""
    if zero_tolerance is None:
        assert_close_ratio("dbias", ours, lowp, exact)
    else:
        assert_close("dbias", ours, lowp, exact, atol=zero_tolerance, absolute=True)


def check_backend(backend, q, k, v, bias, mask, causal, config=None):
    """The op on ``backend`` (forward, and every gradient with a random output gradient, through
    its custom op and autograd) against float64 by the error-ratio rule."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(7)).to(q.dtype)
    leaves = [None if t is None else t.detach().clone().requires_grad_() for t in (q, k, v, bias)]
    out, lse = ceiling.attention(*leaves[:3], bias=leaves[3], mask=mask, causal=causal, return_lse=True,
                                 backend=backend, config=config)
    wanted = [t for t in leaves if t is not None]
    got = iter(torch.autograd.grad(out, wanted, do))
    grads = [None if t is None else next(got) for t in leaves]
    out, lse = out.detach(), lse.detach()
    # float64 oracle, and PyTorch's own computation at the input precision
    ex_out, ex_lse = reference.attention_fwd(q, k, v, bias, mask, causal, scale, compute_dtype=torch.float64)
    ex_grads = reference.attention_bwd(do, q, k, v, ex_out, ex_lse, bias, mask, causal, scale, bias is not None,
                                       compute_dtype=torch.float64)
    lp_bias = None if bias is None else bias.to(q.dtype)
    lp_out, _ = reference.attention_fwd(q, k, v, lp_bias, mask, causal, scale, compute_dtype=q.dtype)
    lp_grads = reference.attention_bwd(do, q, k, v, lp_out, None, lp_bias, mask, causal, scale, bias is not None,
                                       compute_dtype=q.dtype)
    ex64 = [t for t in reference.attention_fwd(q.double(), k.double(), v.double(),
                                               None if bias is None else bias.double(), mask, causal, scale)]
    assert_close_ratio("out", out, lp_out, ex64[0])
    finite = torch.isfinite(ex_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert torch.all(lse[~finite] == -math.inf)
    assert (lse[finite] - ex_lse[finite]).abs().max().item() < 2e-2 if finite.any() else True
    for name, ours, lp, ex in zip(("dq", "dk", "dv", "dbias"), grads, lp_grads, ex_grads):
        if ex is None:
            assert ours is None
            continue
        assert ours.shape == ex.shape and ours.dtype == ex.dtype, name
        ex_hp = reference.attention_bwd(do.double(), q.double(), k.double(), v.double(), None, None,
                                        None if bias is None else bias.double(), mask, causal, scale, True)
        exact = ex_hp[("dq", "dk", "dv", "dbias").index(name)]
        if name == "dbias":
            assert_bias_grad_close(ours, lp, exact, cancelling_bias_tolerance(do, q, k, v, bias, mask, causal, scale))
        else:
            assert_close_ratio(name, ours, lp, exact)
    return out, lse, grads


def test_reference_matches_autograd():
    q, k, v, bias, mask = make_inputs(2, 13, 21, 4, 2, 32, torch.float64, (4, 13, 1), (2, 1, 13, 21))
    mask[..., 5, :] = False  # a fully masked row
    for causal in (False, True):
        qr, kr, vr, br = (t.clone().requires_grad_() for t in (q, k, v, bias))
        out = naive(qr, kr, vr, br, mask, causal, 0.3)
        do = torch.randn_like(out)
        out.backward(do)
        o2, lse = reference.attention_fwd(q, k, v, bias, mask, causal, 0.3)
        grads = reference.attention_bwd(do, q, k, v, o2, lse, bias, mask, causal, 0.3, True)
        torch.testing.assert_close(o2, out.detach())
        for ours, t in zip(grads, (qr, kr, vr, br)):
            torch.testing.assert_close(ours, t.grad)


# (batch, q_len, k_len, heads, kv_heads, head_dim, causal, bias shape, mask shape, dtype, use_tma)
CASES = {
    "plain": (1, 37, 37, 2, 2, 64, False, None, None, BF16, False),
    "causal-q<k-gqa-fullbias": (1, 45, 70, 4, 2, 32, True, (1, 4, 45, 70), None, FP16, False),
    "causal-q>k-mqa-d80-mask": (1, 70, 33, 4, 1, 80, True, None, (1, 1, 70, 33), BF16, False),
    "keypad-bias-mask-d96": (2, 17, 29, 2, 2, 96, False, (2, 1, 1, 29), (2, 1, 1, 29), FP16, False),
    "tma-headbias-causal": (2, 40, 40, 2, 1, 64, True, (1, 2, 40, 40), None, BF16, True),
    "tma-rowbias-d128": (1, 33, 47, 2, 2, 128, False, (2, 33, 1), None, BF16, True),
    "scalarbias": (1, 19, 23, 2, 2, 32, False, (1, 2, 1, 1), None, BF16, False),
    "tma-padded-d96-gqa": (1, 21, 30, 4, 2, 96, True, None, (1, 1, 21, 30), FP16, True),
}


class AttentionTest:
    """The attention cases every implementation is held to; a subclass names its backend and the
    cases it takes."""

    backend: str
    cases = tuple(CASES)

    def config(self, case):
        return {**SMALL, "use_tma": CASES[case][-1]}

    def test_forward_backward(self, case):
        b, sq, sk, h, hk, d, causal, bshape, mshape, dtype, tma = CASES[case]
        q, k, v, bias, mask = make_inputs(b, sq, sk, h, hk, d, dtype, bshape, mshape, seed=stable_seed(case) % 1000)
        check_backend(self.backend, q, k, v, bias, mask, causal, config=self.config(case))


def pytest_generate_tests(metafunc):
    """Each subclass's own cases, so no case is collected (and skipped) where it does not apply."""
    if "case" in metafunc.fixturenames and metafunc.cls is not None and issubclass(metafunc.cls, AttentionTest):
        metafunc.parametrize("case", metafunc.cls.cases)


class TestNvidia(AttentionTest):
    backend = "nvidia"


class TestAmd(AttentionTest):
    """AMD has no TMA: its backend runs the pointer path, so the TMA cases are NVIDIA's."""

    backend = "amd"
    cases = tuple(c for c in CASES if not CASES[c][-1])

    def config(self, case):
        return SMALL


class TestReference(AttentionTest):
    backend = "reference"
    cases = ("causal-q<k-gqa-fullbias", "keypad-bias-mask-d96")

    def config(self, case):
        return None


@pytest.mark.parametrize("case", ["plain", "causal-q>k-mqa-d80-mask", "tma-padded-d96-gqa"])
def test_dq_accumulated_by_the_dkdv_kernel(case, monkeypatch):
    """``dq_atomic``: the dK/dV programs add dQ into a float32 buffer (several key blocks per
    query block here) and the dq kernel is not launched."""
    b, sq, sk, h, hk, d, causal, bshape, mshape, dtype, tma = CASES[case]
    q, k, v, bias, mask = make_inputs(b, sq, sk, h, hk, d, dtype, bshape, mshape, seed=stable_seed(case) % 997)
    launched = []
    real = flash.launcher

    def spy(fn, on_gpu):
        launched.append(fn.__name__ if hasattr(fn, "__name__") else fn.fn.__name__)
        return real(fn, on_gpu=on_gpu)

    monkeypatch.setattr(flash, "launcher", spy)
    config = {**SMALL, "dkdv": {**SMALL["dkdv"], "dq_atomic": True}, "use_tma": tma}
    check_backend("nvidia", q, k, v, bias, mask, causal, config=config)
    assert "_attn_bwd_dkdv" in launched and "_attn_bwd_dq" not in launched, launched


@pytest.mark.parametrize("case", ["causal-q>k-mqa-d80-mask", "tma-headbias-causal", "plain"])
def test_forward_with_half_the_exponentials_on_the_fma_pipe(case):
    """``exp2_split``: odd score columns through the polynomial exp2; masked scores (-inf) and
    fully masked rows must still give exactly 0."""
    b, sq, sk, h, hk, d, causal, bshape, mshape, dtype, tma = CASES[case]
    q, k, v, bias, mask = make_inputs(b, sq, sk, h, hk, d, dtype, bshape, mshape, seed=stable_seed(case) % 991)
    if mask is not None:
        mask[..., 3, :] = False  # a fully masked row
    config = {**SMALL, "fwd": {**SMALL["fwd"], "exp2_split": True}, "use_tma": tma}
    out, _, _ = check_backend("nvidia", q, k, v, bias, mask, causal, config=config)
    if mask is not None:
        assert not out[:, 3].any()


@triton.jit
def _exp2_fma_kernel(X, Y, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(Y + offs, exp2_fma(tl.load(X + offs)))


def test_polynomial_exp2_matches_exp2():
    from ceiling.triton_runtime import interpreted

    kernel = _exp2_fma_kernel
    x = torch.cat([torch.linspace(-130.0, 0.0, 1021), torch.tensor([float("-inf"), -126.5, float("nan")])])
    y = torch.full_like(x, 7.0)
    interpreted(kernel)[(1,)](x, y, N=1024)
    exact = torch.exp2(x.double())
    big = x >= -126.0
    rel = ((y.double() - exact).abs() / exact)[big]
    assert rel.max().item() < 8e-5, rel.max().item()
    assert (y[:-1][~big[:-1]] == 0).all()
    assert torch.isnan(y[-1]), "a NaN score must stay NaN"


@pytest.mark.parametrize("d", [32, 64, 80, 96, 128, 256])
def test_reference_head_dims(d):
    q, k, v, bias, mask = make_inputs(1, 9, 12, 2, 1, d, BF16, (1, 2, 9, 12))
    check_backend("reference", q, k, v, bias, mask, causal=True)


def test_nvidia_head_dim_256():
    q, k, v, bias, mask = make_inputs(1, 20, 18, 1, 1, 256, BF16)
    check_backend("nvidia", q, k, v, bias, mask, causal=False,
                  config={"fwd": {"block_m": 16, "block_n": 16}, "dkdv": {"block_m": 16, "block_n": 16},
                          "dq": {"block_m": 16, "block_n": 16}})


@pytest.mark.parametrize("backend", ["reference", "nvidia", "amd"])
def test_fully_masked_rows_give_zeros(backend):
    q, k, v, bias, mask = make_inputs(1, 24, 20, 2, 2, 32, BF16, (1, 2, 24, 20), (1, 2, 24, 20))
    mask[:, :, 3] = False
    mask[:, 1, 10:14] = False
    # q_len > k_len with causal: the first 4 queries see nothing either
    q, k, v, bias = (t.requires_grad_() for t in (q, k, v, bias))
    out, lse = ceiling.attention(q, k, v, bias=bias, mask=mask, causal=True, return_lse=True, backend=backend,
                                 config=None if backend == "reference" else SMALL)
    out.backward(torch.randn_like(out))
    empty = ~mask.clone()
    empty[:, :, :4] = True
    rows = empty.all(-1)  # (1, 2, 24)
    rows |= torch.zeros_like(rows)
    o = out.transpose(1, 2)  # (b, h, s, d)
    assert torch.all(o[rows] == 0)
    assert torch.all(lse[rows] == -math.inf)
    assert torch.all(q.grad.transpose(1, 2)[rows] == 0)
    assert torch.all(bias.grad.expand(1, 2, 24, 20)[rows] == 0)
    for t in (out, q.grad, k.grad, v.grad, bias.grad):
        assert not torch.isnan(t).any()


def test_bad_input():
    q, k, v, _, _ = make_inputs(1, 8, 8, 4, 2, 32, BF16)
    with pytest.raises(InputError, match="k"):
        ceiling.attention(q, k[..., :16], v[..., :16])
    with pytest.raises(InputError, match="heads"):
        ceiling.attention(q, k[:, :, :1].repeat(1, 1, 3, 1), v[:, :, :1].repeat(1, 1, 3, 1))
    with pytest.raises(InputError, match="bias"):
        ceiling.attention(q, k, v, bias=torch.randn(3, 8, 8))
    with pytest.raises(InputError, match="mask"):
        ceiling.attention(q, k, v, mask=torch.ones(8, 8))
    with pytest.raises(InputError, match="v"):
        ceiling.attention(q, k, v.half())
    with pytest.raises(InputError, match="q"):
        ceiling.attention(q.float(), k.float(), v.float(), backend="nvidia")
    with pytest.raises(InputError, match="head_dim"):
        ceiling.attention(q[..., :16], k[..., :16], v[..., :16])
    with pytest.raises(InputError, match="device"):
        ceiling.attention(q, k.to("meta"), v.to("meta"))
    with pytest.raises(InputError, match="backend"):
        ceiling.attention(q, k, v, backend="cuda")
    with pytest.raises(InputError, match="4-D"):
        ceiling.attention(q[0], k[0], v[0])


@pytest.mark.parametrize("backend", ["reference", "nvidia"])
def test_opcheck(backend):
    from ceiling.attention.op import ATTENTION
    from ceiling.attention.spec import check

    q, k, v, bias, mask = make_inputs(1, 16, 16, 2, 1, 32, BF16, (2, 16, 16), (1, 1, 16, 16))
    cfg = None if backend == "reference" else {"dkdv": {"block_m": 16, "block_n": 16}, "dq": {"block_m": 16, "block_n": 16},
                                               "fwd": {"block_m": 16, "block_n": 16}}
    q, k, v, bias = (t.requires_grad_() for t in (q, k, v, bias))
    problem = check(q, k, v, causal=True, scale=0.25, bias=bias, mask=mask, backend=backend)
    call = ATTENTION.select(problem, backend, cfg)
    ceiling.attention(q, k, v, causal=True, scale=0.25, bias=bias, mask=mask, backend=backend, config=cfg)
    torch.library.opcheck(torch.ops.ceiling.attention.default, (q, k, v, bias, mask, call.key()))


class Block(torch.nn.Module):
    """A pre-norm transformer block whose attention is ours."""

    def __init__(self, dim=64, heads=2, kv_heads=1, backend="reference"):
        super().__init__()
        self.heads, self.kv_heads, self.hd, self.backend = heads, kv_heads, dim // heads, backend
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.q = torch.nn.Linear(dim, dim)
        self.kv = torch.nn.Linear(dim, 2 * kv_heads * self.hd)
        self.o = torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 2 * dim), torch.nn.GELU(), torch.nn.Linear(2 * dim, dim))
        self.rel_bias = torch.nn.Parameter(torch.zeros(heads, 1, 1))

    def forward(self, x):
        b, s, _ = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, s, self.heads, self.hd)
        k, v = self.kv(h).view(b, s, 2, self.kv_heads, self.hd).unbind(2)
        pos = torch.arange(s, device=x.device, dtype=x.dtype)
        bias = self.rel_bias * (pos[None, :] - pos[:, None]).abs().neg()  # (heads, s, s), learned slope
        cfg = None if self.backend == "reference" else SMALL
        a = ceiling.attention(q, k, v, causal=True, bias=bias, backend=self.backend, config=cfg)
        x = x + self.o(a.reshape(b, s, -1))
        return x + self.mlp(self.norm2(x))


def test_compiled_training_reference():
    torch.manual_seed(0)
    model = Block()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    # aot_eager: dynamo (fullgraph) and AOT autograd through the fake and autograd registrations,
    # without inductor's C++ code generation, which is slow on a small CPU machine.
    step = torch.compile(lambda x, y: torch.nn.functional.mse_loss(model(x), y), fullgraph=True, backend="aot_eager")
    x, y = torch.randn(2, 24, 64), torch.randn(2, 24, 64)
    losses = []
    for _ in range(6):
        opt.zero_grad()
        loss = step(x, y)
        loss.backward()
        assert model.rel_bias.grad is not None and torch.isfinite(model.rel_bias.grad).all()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_compiled_step_nvidia_matches_reference():
    torch.manual_seed(0)
    ref_model = Block()
    nv_model = Block(backend="nvidia")
    nv_model.load_state_dict(ref_model.state_dict())
    with torch.no_grad():
        for m in (ref_model, nv_model):
            m.rel_bias.fill_(0.1)
    x, y = torch.randn(1, 20, 64), torch.randn(1, 20, 64)
    grads = []
    for m in (ref_model, nv_model):
        m.to(BF16)
        step = torch.compile(lambda x, y, m=m: torch.nn.functional.mse_loss(m(x).float(), y), fullgraph=True,
                             backend="aot_eager")
        step(x.to(BF16), y).backward()
        grads.append(m.rel_bias.grad.float())
    torch.testing.assert_close(grads[1], grads[0], rtol=0.1, atol=1e-3)


def test_sdpa_drop_in_matches_torch():
    from ceiling.attention.sdpa import scaled_dot_product_attention as ours

    sdpa = torch.nn.functional.scaled_dot_product_attention
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 11, 32, generator=g, dtype=torch.float64)
    k = torch.randn(2, 2, 17, 32, generator=g, dtype=torch.float64)
    v = torch.randn(2, 2, 17, 32, generator=g, dtype=torch.float64)
    fmask = torch.randn(1, 4, 11, 17, generator=g, dtype=torch.float64)
    bmask = torch.rand(2, 1, 11, 17, generator=g) > 0.3
    bmask[..., 0] = True
    for kwargs in ({"is_causal": True}, {"attn_mask": bmask}, {"attn_mask": fmask}, {"scale": 0.1}):
        args = [t.clone().requires_grad_() for t in (q, k, v)]
        targs = [t.clone().requires_grad_() for t in (q, k, v)]
        if "attn_mask" in kwargs and kwargs["attn_mask"].dtype != torch.bool:
            kwargs = {"attn_mask": fmask.clone().requires_grad_()}
            tkwargs = {"attn_mask": fmask.clone().requires_grad_()}
        else:
            tkwargs = kwargs
        out = ours(*args, enable_gqa=True, backend="reference", **kwargs)
        ref = sdpa(*targs, enable_gqa=True, **tkwargs)
        torch.testing.assert_close(out, ref)
        do = torch.randn_like(out)
        out.backward(do)
        ref.backward(do)
        for a, t in zip(args, targs):
            torch.testing.assert_close(a.grad, t.grad)
        if "attn_mask" in kwargs and kwargs["attn_mask"].requires_grad:
            torch.testing.assert_close(kwargs["attn_mask"].grad, tkwargs["attn_mask"].grad)
    # the kernels behind the drop-in, on the transposed (strided) views
    qb, kb, vb = (t.to(BF16) for t in (q, k, v))
    out = ours(qb, kb, vb, is_causal=True, enable_gqa=True, backend="nvidia", config=SMALL)
    ref = sdpa(qb.double(), kb.double(), vb.double(), is_causal=True, enable_gqa=True)
    assert (out.double() - ref).abs().max() < 3e-2
    with pytest.raises(InputError, match="dropout_p"):
        ours(q, k, v, dropout_p=0.1, enable_gqa=True)
    with pytest.raises(InputError, match="enable_gqa"):
        ours(q, k, v)


def test_jax_front_end():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import numpy as np

    q, k, v, bias, mask = make_inputs(1, 12, 14, 2, 1, 32, torch.float32, (2, 12, 14), (1, 1, 12, 14))
    jq, jk, jv, jb, jm = (jnp.asarray(t.numpy()) for t in (q, k, v, bias, mask))
    do = np.random.default_rng(0).standard_normal(q.shape).astype(np.float32)

    def loss(fn_backend, dtype):
        def f(q, k, v, b):
            o = ceiling.attention(q.astype(dtype), k.astype(dtype), v.astype(dtype), bias=b, mask=jm, causal=True,
                                  backend=fn_backend, config=None if fn_backend == "reference" else SMALL)
            return jnp.sum(o.astype(jnp.float32) * do)
        return f

    ref_val, ref_grads = jax.jit(jax.value_and_grad(loss("reference", jnp.float32), argnums=(0, 1, 2, 3)))(jq, jk, jv, jb)
    qt, kt, vt, bt = (t.clone().double().requires_grad_() for t in (q, k, v, bias))
    (naive(qt, kt, vt, bt, mask[0, 0], True, 32 ** -0.5) * torch.from_numpy(do).double()).sum().backward()
    for g, t in zip(ref_grads, (qt, kt, vt, bt)):
        np.testing.assert_allclose(np.asarray(g), t.grad.numpy(), rtol=1e-4, atol=1e-4)
    nv_val, nv_grads = jax.value_and_grad(loss("nvidia", jnp.bfloat16), argnums=(0, 1, 2, 3))(jq, jk, jv, jb)
    assert abs(float(nv_val) - float(ref_val)) < 0.05 * (1 + abs(float(ref_val)))
    for g, r in zip(nv_grads, ref_grads):
        assert np.all(np.isfinite(np.asarray(g, dtype=np.float32)))
        np.testing.assert_allclose(np.asarray(g, dtype=np.float32), np.asarray(r), rtol=0.1, atol=0.1)
