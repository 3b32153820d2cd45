"""The TPU Pallas flash attention on the CPU, through the op (``ceiling.attention(...,
backend="tpu")``, or :meth:`ceiling.op.Op.select` and the JAX front end for float32): TPU
interpret mode for the numbers, ``jax.export(..., platforms=["tpu"])`` for the Mosaic lowering
of every shipped config, and the config rules.

TPU interpret mode allocates outputs and scratch as NaN, so an output block a
kernel never writes, or a scratch it never zeroes, shows up as NaN and fails
the finiteness check every comparison makes. Shapes are tiny and odd, blocks
small (16 x 128) so several grid steps run per axis.

The error-ratio rule: against a float64 oracle, our error may be at most twice
that of plain JAX computing the same thing at the input's precision, plus a
small atol.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ceiling
from ceiling.attention.op import ATTENTION
from ceiling.attention.spec import check
from ceiling.errors import InputError
from ceiling.frontends import jax as jax_front
from ceiling.op import resolve_config
from ceiling.tpu import attention as tpu_attention
from ceiling.tpu.attention_rules import AttentionConfigError, check_config
from ceiling.tpu.generations import GENERATIONS, TARGETS

SMALL = {"block_q": 16, "block_k": 128}
ATOL = {"bfloat16": 2e-3, "float16": 3e-4, "float32": 1e-5}


def _rng(request) -> np.random.Generator:
    # Fresh inputs per test and per run.
    return np.random.default_rng()


# --------------------------------------------------------------------------- oracles


def _visible(q_len, k_len, causal, mask):
    keep = np.ones((q_len, k_len), bool)
    if causal:
        keep = np.arange(k_len)[None, :] <= np.arange(q_len)[:, None] + (k_len - q_len)
    if mask is not None:
        keep = keep & np.asarray(mask)
    return keep


def _oracle(q, k, v, bias, mask, causal, scale, do):
    """out, lse, dq, dk, dv, dbias in float64 with the closed-form backward."""
    q, k, v, do = (np.asarray(x, np.float64) for x in (q, k, v, do))
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    g = h // hk
    qh = q.transpose(0, 2, 1, 3)
    kh = np.repeat(k.transpose(0, 2, 1, 3), g, axis=1)
    vh = np.repeat(v.transpose(0, 2, 1, 3), g, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", qh, kh) * scale
    if bias is not None:
        s = s + np.asarray(bias, np.float64)
    keep = np.broadcast_to(_visible(sq, sk, causal, mask), s.shape)
    s = np.where(keep, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isinf(m), 0.0, m)
    e = np.exp(s - m)
    tot = e.sum(-1, keepdims=True)
    p = e / np.where(tot == 0, 1.0, tot)
    with np.errstate(divide="ignore"):
        lse = np.where(tot[..., 0] == 0, -np.inf, np.log(np.where(tot == 0, 1.0, tot))[..., 0] + m[..., 0])
    out = np.einsum("bhqk,bhkd->bhqd", p, vh)
    doh = do.transpose(0, 2, 1, 3)
    dv = np.einsum("bhqk,bhqd->bhkd", p, doh)
    dp = np.einsum("bhqd,bhkd->bhqk", doh, vh)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    dq = np.einsum("bhqk,bhkd->bhqd", ds, kh) * scale
    dk = np.einsum("bhqk,bhqd->bhkd", ds, qh) * scale

    def per_kv(x):
        return x.reshape(b, hk, g, sk, d).sum(2).transpose(0, 2, 1, 3)

    dbias = None
    if bias is not None:
        shape = np.shape(bias)
        lead = 4 - len(shape)
        axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and ds.shape[lead + i] != 1)
        dbias = ds.sum(axis=axes, keepdims=True).reshape(shape)
    return out.transpose(0, 2, 1, 3), lse, dq.transpose(0, 2, 1, 3), per_kv(dk), per_kv(dv), dbias


def _plain_jax(q, k, v, bias, mask, causal, scale):
    """Attention in plain JAX at the input's precision: the error baseline."""
    h, hk = q.shape[2], k.shape[2]
    kk, vv = jnp.repeat(k, h // hk, axis=2), jnp.repeat(v, h // hk, axis=2)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, kk) * jnp.asarray(scale, q.dtype)
    if bias is not None:
        s = s + bias.astype(q.dtype)
    keep = jnp.asarray(_visible(q.shape[1], k.shape[1], causal, mask))
    s = jnp.where(keep, s, -jnp.inf)
    m = jnp.max(s, -1, keepdims=True)
    m = jnp.where(jnp.isinf(m), 0, m)
    e = jnp.exp(s - m)
    tot = jnp.sum(e, -1, keepdims=True)
    p = e / jnp.where(tot == 0, 1, tot)
    return jnp.einsum("bhqk,bkhd->bqhd", p.astype(q.dtype), vv)


def _err(x, ref):
    x = np.asarray(x, np.float64)
    assert np.isfinite(x).all(), "non-finite values (unwritten output or NaN)"
    return float(np.max(np.abs(x - ref))) if x.size else 0.0


def _check_close(name, ours, base, ref, dtype):
    e_ours, e_base = _err(ours, ref), _err(base, ref)
    assert e_ours <= 2 * e_base + ATOL[dtype], f"{name}: error {e_ours:.3g} > 2 x plain JAX's {e_base:.3g} + {ATOL[dtype]}"


def _tpu_attention(q, k, v, bias, mask, causal, config):
    """(out, lse) of the op's TPU implementation through the JAX front end: the call the public
    function makes, for float32 inputs too (which the public function sends to the reference; the
    TPU kernels compute them for reference runs)."""
    problem = check(q, k, v, causal=causal, bias=bias, mask=mask, backend="reference")
    return jax_front.apply(ATTENTION, ATTENTION.select(problem, "tpu", config), q, k, v, bias, mask)


def _run_case(rng, *, batch, q_len, k_len, heads, kv_heads, head_dim, dtype, causal, bias_shape, mask_shape, config,
              mask_fn=None, bias_dtype="float32"):
    """Forward, lse and every gradient (bias included) against the oracle."""
    jdt = jnp.dtype(dtype)
    q = jnp.asarray(rng.standard_normal((batch, q_len, heads, head_dim)), jdt)
    k = jnp.asarray(rng.standard_normal((batch, k_len, kv_heads, head_dim)), jdt)
    v = jnp.asarray(rng.standard_normal((batch, k_len, kv_heads, head_dim)), jdt)
    bias = None if bias_shape is None else jnp.asarray(rng.standard_normal(bias_shape), bias_dtype)
    mask = None
    if mask_shape is not None:
        mask = rng.random(mask_shape) < 0.8
        if mask_fn is not None:
            mask = mask_fn(mask)
    do = jnp.asarray(rng.standard_normal((batch, q_len, heads, head_dim)), jdt)
    scale = 1.0 / math.sqrt(head_dim)
    jmask = None if mask is None else jnp.asarray(mask)

    @jax.jit  # the op traces: shapes, blocks and the plan are static
    def ours(q, k, v, bias):
        return _tpu_attention(q, k, v, bias, jmask, causal, config)

    (out, lse), vjp = jax.vjp(ours, q, k, v, bias)
    grads = vjp((do, jnp.zeros_like(lse)))
    base_out, base_vjp = jax.vjp(lambda q, k, v, bias: _plain_jax(q, k, v, bias, mask, causal, scale), q, k, v, bias)
    base_grads = base_vjp(do)
    ref = _oracle(q, k, v, bias, mask, causal, scale, do)

    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == (batch, heads, q_len) and lse.dtype == jnp.float32
    _check_close("out", out, base_out, ref[0], dtype)
    lse_np = np.asarray(lse, np.float64)
    assert np.array_equal(np.isneginf(lse_np), np.isneginf(ref[1])), "lse -inf pattern differs"
    finite = np.isfinite(ref[1])
    assert not np.isnan(lse_np).any()
    lse_err = np.abs(lse_np[finite] - ref[1][finite]) / np.maximum(1.0, np.abs(ref[1][finite]))
    assert np.max(lse_err, initial=0.0) <= 1e-4, "lse"
    for name, g, bg, r in zip(("dq", "dk", "dv", "dbias"), grads, base_grads, ref[2:]):
        if r is None:
            assert g is None
            continue
        assert g.shape == r.shape, name
        if name == "dbias":
            assert g.dtype == bias.dtype
        _check_close(name, g, bg, r, dtype)
    return out, lse, grads, ref


# --------------------------------------------------------------------------- numbers


def test_gqa_causal_short_queries_bias_over_batch(request):
    """bf16, GQA 4:2, q_len < k_len causal (bottom-right), a bias broadcast over
    batch (its gradient from the dbias kernel), two kv blocks, distinct
    backward blocks."""
    _run_case(
        _rng(request),
        batch=2, q_len=19, k_len=150, heads=4, kv_heads=2, head_dim=64, dtype="bfloat16", causal=True,
        bias_shape=(1, 4, 19, 150), mask_shape=None,
        config={"block_q": 16, "block_k": 128, "block_q_bwd": 32, "block_k_bwd": 256},
    )


def test_float16_full_bias_head_dim_80(request):
    """float16 (computed in float32), head_dim 80 padded to 128, q_len > k_len
    non-causal, a full-shape bias (its gradient written by the dq kernel)."""
    _run_case(
        _rng(request),
        batch=2, q_len=21, k_len=13, heads=2, kv_heads=2, head_dim=80, dtype="float16", causal=False,
        bias_shape=(2, 2, 21, 13), mask_shape=None, config=SMALL,
    )


def test_fully_masked_rows_give_zeros(request):
    """q_len > k_len causal: the first q_len - k_len queries see nothing; the
    mask also blanks two more rows. Output 0, lse -inf, zero gradients, no NaN;
    a key bias (batch, 1, 1, k_len) summed over heads and queries."""
    q_len, k_len = 33, 17

    def blank(mask):
        mask[:, :, 20, :] = False
        mask[:, :, 31, :] = False
        return mask

    out, lse, grads, ref = _run_case(
        _rng(request),
        batch=1, q_len=q_len, k_len=k_len, heads=3, kv_heads=1, head_dim=32, dtype="bfloat16", causal=True,
        bias_shape=(1, 1, 1, k_len), mask_shape=(1, 1, q_len, k_len), config=SMALL, mask_fn=blank,
    )
    empty = list(range(q_len - k_len)) + [20, 31]
    assert np.all(np.asarray(out, np.float32)[:, empty] == 0)
    assert np.all(np.isneginf(np.asarray(lse)[:, :, empty]))
    assert np.all(np.asarray(grads[0], np.float32)[:, empty] == 0)


def test_mask_broadcast_over_heads_bias_2d(request):
    """A 2-D (q_len, k_len) bfloat16 bias (summed over batch and heads) and a
    per-batch mask broadcast over heads, non-causal, MQA."""
    _run_case(
        _rng(request),
        batch=2, q_len=7, k_len=29, heads=2, kv_heads=1, head_dim=64, dtype="bfloat16", causal=False,
        bias_shape=(7, 29), mask_shape=(2, 1, 7, 29), config=SMALL, bias_dtype="bfloat16",
    )


def test_tuned_path_without_config_and_torch(request):
    """No config: the table's blocks fitted to a short sequence; torch tensors (bf16 through
    ml_dtypes) get what JAX arrays get, bit for bit, and their gradients through autograd."""
    import torch

    rng = _rng(request)
    q = jnp.asarray(rng.standard_normal((1, 9, 2, 32)), jnp.bfloat16)
    k = jnp.asarray(rng.standard_normal((1, 11, 2, 32)), jnp.bfloat16)
    v = jnp.asarray(rng.standard_normal((1, 11, 2, 32)), jnp.bfloat16)
    bias = jnp.asarray(rng.standard_normal((1, 2, 9, 11)), jnp.float32)
    out, lse = ceiling.attention(q, k, v, bias=bias, causal=True, scale=0.3, backend="tpu", return_lse=True)
    ref = _oracle(q, k, v, bias, None, True, 0.3, np.zeros(q.shape))
    assert _err(out, ref[0]) < 3e-2

    def to_torch(x):
        t = torch.tensor(np.asarray(x, np.float32)).to(torch.bfloat16 if x.dtype == jnp.bfloat16 else torch.float32)
        return t.requires_grad_()

    tq, tk, tv, tb = (to_torch(x) for x in (q, k, v, bias))
    t_out, t_lse = ceiling.attention(tq, tk, tv, bias=tb, causal=True, scale=0.3, backend="tpu", return_lse=True)
    assert t_out.dtype == torch.bfloat16 and t_lse.dtype == torch.float32
    assert np.array_equal(t_out.detach().float().numpy(), np.asarray(out, np.float32))
    assert np.array_equal(t_lse.detach().numpy(), np.asarray(lse))
    do = torch.tensor(np.asarray(jnp.asarray(rng.standard_normal(q.shape), jnp.bfloat16), np.float32)).bfloat16()
    t_out.backward(do)
    ref = _oracle(q, k, v, bias, None, True, 0.3, do.float().numpy())
    for g, r in zip((tq.grad, tk.grad, tv.grad, tb.grad), ref[2:]):
        assert tuple(g.shape) == r.shape
        assert _err(g.float().numpy(), r) < 5e-2
    plain = ceiling.attention(tq, tk, tv, causal=True, scale=0.3, bias=tb, backend="tpu")
    assert torch.equal(plain, t_out)


# --------------------------------------------------------------------------- TPU export


@pytest.mark.parametrize("target", TARGETS)
def test_every_shipped_config_exports_for_tpu(target):
    for dtype in ("bfloat16", "float16"):
        rows = tpu_attention.inspect_tpu_attention(target, dtype)
        assert rows, f"no shipped config for {target}"
        for row in rows:
            assert row["exported"], f"{target} {dtype} {row['config']}: {row['export_error']}"
            # forward: 1 kernel; backward: dq, dk/dv and the broadcast-dbias kernel
            assert row["mosaic_kernels"] == {"fwd": 1, "fwd_bwd": 4}
            assert all(v["total"] <= GENERATIONS[target].usable_vmem_bytes for v in row["vmem_bytes"].values())


@pytest.mark.parametrize("bias_shape", [(2, 2, 256, 256), (2, 1, 1, 256), (1, 1, 256, 1), (256, 256), (1, 1, 1, 1)])
@pytest.mark.parametrize("causal", [False, True])
def test_every_bias_broadcast_exports_for_tpu(bias_shape, causal):
    """The (1, bk), (bq, 1) and (1, 1) bias blocks and their dbias scratch lower
    through Mosaic; a full bias takes the dq kernel's path (3 kernels), the
    others the dbias kernel (4)."""
    row = tpu_attention.export_attention(
        "tpu-v5e", "bfloat16", {"block_q": 128, "block_k": 128}, q_len=256, k_len=256, head_dim=64,
        bias_shape=bias_shape, causal=causal,
    )
    assert row["exported"], row["export_error"]
    assert row["mosaic_kernels"] == {"fwd": 1, "fwd_bwd": 3 if bias_shape == (2, 2, 256, 256) else 4}


# --------------------------------------------------------------------------- rules and input errors


@pytest.mark.parametrize(
    "config, rule",
    [
        ({"block_q": 16}, "keys"),
        ({"block_q": 16, "block_k": 128, "bm": 1}, "keys"),
        ({"block_q": 0, "block_k": 128}, "keys"),
        ({"block_q": 16, "block_k": 96}, "lane_tiling"),
        ({"block_q": 16, "block_k": 128, "block_k_bwd": 200}, "lane_tiling"),
        ({"block_q": 8, "block_k": 128}, "sublane_tiling"),
        ({"block_q": 4096, "block_k": 4096}, "vmem_budget"),
    ],
)
def test_config_breaking_a_rule_is_rejected(config, rule):
    with pytest.raises(AttentionConfigError) as info:
        check_config(config, "bfloat16", 128, "tpu-v5e", "float32", True)
    assert info.value.rule == rule and f"[rule {rule}]" in str(info.value)
    # the op checks before anything runs
    q = jnp.zeros((1, 8, 1, 32), jnp.bfloat16)
    with pytest.raises(AttentionConfigError):
        ceiling.attention(q, q, q, bias=jnp.zeros((8, 8)), mask=jnp.ones((8, 8), bool), backend="tpu", config=config)


def test_float32_blocks_need_8_rows_only():
    check_config({"block_q": 8, "block_k": 128}, "float32", 128, "tpu-v5e")
    with pytest.raises(AttentionConfigError, match="sublane_tiling"):
        check_config({"block_q": 8, "block_k": 128}, "float32", 128, "tpu-v5e", bias_dtype="bfloat16")


def _resolved(monkeypatch, target, dtype, head_dim, q_len, k_len):
    """The config the op resolves for a JAX problem on the TPU generation ``target``."""
    from ceiling.attention.spec import AttentionProblem

    monkeypatch.setattr(tpu_attention, "attached_tpu", lambda: target)
    problem = AttentionProblem(framework="jax", device="tpu:0", batch=1, q_len=q_len, k_len=k_len, heads=1,
                               kv_heads=1, head_dim=head_dim, dtype=dtype, causal=False, scale=head_dim ** -0.5,
                               bias_shape=None, has_mask=False)
    return resolve_config(problem, ATTENTION.implementation("tpu"), None)


def test_select_config_fits_short_sequences_and_has_a_heuristic(monkeypatch):
    config = _resolved(monkeypatch, "tpu-v5e", "bfloat16", 64, 40, 300)
    assert config.target == "tpu-v5e"
    assert config == {"block_q": 48, "block_k": 256, "block_q_bwd": 48, "block_k_bwd": 256}
    # head_dim 192 pads to 256 (in the table); a float16 run uses the float32 table
    assert _resolved(monkeypatch, "tpu-v6e", "float16", 192, 4096, 4096)["block_q"] == 256
    # the heuristic for a head_dim the table lacks still fits the scoped default
    assert tpu_attention._heuristic("tpu-v5e", "bfloat16", 384, "float32", True)["block_q"] in (128, 256, 512)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"q": (1, 8, 2, 16), "k": (1, 8, 1, 16), "v": (1, 8, 1, 16)}, "q"),  # head_dim 16
        ({"k": (1, 8, 3, 32), "v": (1, 8, 3, 32)}, "k"),  # 3 kv heads for 2 heads
        ({"v": (1, 9, 1, 32)}, "v"),
        ({"bias": (3, 8, 8)}, "bias"),
        ({"mask": (1, 1, 8, 7)}, "mask"),
    ],
)
def test_bad_input_names_the_argument(kwargs, argument):
    shapes = {"q": (1, 8, 2, 32), "k": (1, 8, 1, 32), "v": (1, 8, 1, 32), **kwargs}
    q, k, v = (jnp.zeros(shapes[n], jnp.bfloat16) for n in ("q", "k", "v"))
    bias = jnp.zeros(shapes["bias"]) if "bias" in shapes else None
    mask = jnp.ones(shapes["mask"], bool) if "mask" in shapes else None
    with pytest.raises(InputError) as info:
        ceiling.attention(q, k, v, bias=bias, mask=mask, backend="tpu")
    assert info.value.argument == argument


def test_bad_dtypes_and_scale():
    q = jnp.zeros((1, 8, 1, 32), jnp.int32)
    with pytest.raises(InputError, match="^q"):
        ceiling.attention(q, q, q, backend="tpu")
    q = jnp.zeros((1, 8, 1, 32), jnp.bfloat16)
    with pytest.raises(InputError, match="^mask"):
        ceiling.attention(q, q, q, mask=jnp.ones((8, 8), jnp.float32), backend="tpu")
    with pytest.raises(InputError, match="^scale"):
        ceiling.attention(q, q, q, scale=float("nan"), backend="tpu")
    with pytest.raises(InputError, match="^causal"):
        ceiling.attention(q, q, q, causal=1, backend="tpu")


# --------------------------------------------------------------------------- slow sweep


@pytest.mark.slow
@pytest.mark.parametrize("head_dim", [32, 96, 128, 192, 256])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("causal", [False, True])
def test_sweep_head_dims_dtypes(request, head_dim, dtype, causal):
    _run_case(
        _rng(request),
        batch=2, q_len=37, k_len=45, heads=4, kv_heads=2, head_dim=head_dim, dtype=dtype, causal=causal,
        bias_shape=(2, 1, 37, 45), mask_shape=(1, 4, 1, 45), config=SMALL,
    )


def test_public_op_routes_to_the_pallas_kernels():
    """ceiling.attention(..., backend="tpu") with JAX and torch autodiff reaches these kernels."""
    import numpy as np
    import torch

    rng = np.random.default_rng(90)
    q = jnp.asarray(rng.standard_normal((1, 19, 2, 32)), jnp.bfloat16)
    k, v = (jnp.asarray(rng.standard_normal((1, 23, 2, 32)), jnp.bfloat16) for _ in range(2))
    bias = jnp.asarray(rng.standard_normal((1, 2, 19, 23)), jnp.float32)
    cot = jnp.asarray(rng.standard_normal((1, 19, 2, 32)), jnp.float32)

    def loss(backend):
        return lambda q, k, v, b: jnp.sum(ceiling.attention(q, k, v, bias=b, causal=True, backend=backend) * cot)

    got = jax.grad(loss("tpu"), argnums=(0, 1, 2, 3))(q, k, v, bias)
    want = jax.grad(loss("reference"), argnums=(0, 1, 2, 3))(q, k, v, bias)
    for g, w in zip(got, want):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        assert np.isfinite(g).all() and np.abs(g - w).max() <= 3e-2 * np.abs(w).max() + 1e-2

    qt, kt, vt = (torch.tensor(np.asarray(x, np.float32)).bfloat16().requires_grad_() for x in (q, k, v))
    bt = torch.tensor(np.asarray(bias)).requires_grad_()
    out = ceiling.attention(qt, kt, vt, bias=bt, causal=True, backend="tpu")
    out.float().backward(torch.tensor(np.asarray(cot)))
    w = np.asarray(want[3], np.float64)
    assert np.abs(bt.grad.double().numpy() - w).max() <= 3e-2 * np.abs(w).max() + 1e-2
