"""The Gluon Hopper attention: which problems it takes, its launches, its index math, and (on an
H200) its results.

On the CPU: config validation, the implementation each problem gets and why, the CPU fallback
to the interpreted Triton kernel, the launch glue (the descriptors and constants a launch
passes are those of the statically checked binary), and the kernels' own scalar index math
(tile order, key and query block ranges, the unmasked spans) run on Python integers against
brute force. On a Hopper GPU (``-m gpu``): forward and backward against float64 by the
error-ratio rule, with odd lengths, GQA/MQA, causal with q_len != k_len, rows that see no key,
more tiles than SMs, and poisoned outputs.
"""

from __future__ import annotations

import math
import types

import pytest
import torch

import ceiling
from ceiling import tables
from ceiling.attention import implementation_for, reference
from ceiling.attention.op import ATTENTION
from ceiling.attention.spec import check
from ceiling.errors import InputError
from ceiling.nvidia.gluon import attention as gluon
from ceiling.nvidia.gluon import static_check
from ceiling.op import resolve_config
from ceiling.testing.numerics import assert_close

GLUON = {"implementation": "gluon"}
GLUON_IMPL = ATTENTION.implementation("nvidia", "gluon")
# The tests that build Gluon objects in this process (launch glue, emulation) need a Triton the
# kernels support; tests/test_attention_gluon_static.py checks them under Triton 3.6 regardless.
needs_gluon_here = pytest.mark.skipif(gluon.unsupported_reason() is not None, reason=str(gluon.unsupported_reason()))


def _problem(device="cuda:0", dtype=torch.bfloat16, head_dim=128, bias=False, mask=False, **kw):
    """A problem on an H200 (``device`` "cuda:0"), or on the CPU."""
    shape = dict(batch=1, q_len=100, k_len=100, heads=4, kv_heads=4, causal=False)
    shape.update(kw)
    from ceiling.attention.spec import AttentionProblem

    gpu = {"gpu": "NVIDIA H200", "arch": "sm_90"} if device.startswith("cuda") else {}
    return AttentionProblem(framework="torch", **gpu, batch=shape["batch"], q_len=shape["q_len"], k_len=shape["k_len"],
                            heads=shape["heads"], kv_heads=shape["kv_heads"], head_dim=head_dim,
                            dtype=str(dtype).removeprefix("torch."), device=device, causal=shape["causal"],
                            scale=0.1, bias_shape=(1,) if bias else None, has_mask=mask)


@pytest.fixture
def hopper(monkeypatch):
    """A Triton the Gluon kernels take, whatever this one is (the CPU tests of the decisions on the
    problems of ``_problem``, which name their GPU)."""
    monkeypatch.setattr(gluon, "unsupported_reason", lambda: None)


@pytest.fixture
def table_root(tmp_path, monkeypatch):
    """A copy of the NVIDIA tables that a test may add to, in place of the shipped ones."""
    import shutil

    shutil.copytree(tables.ROOT / "nvidia" / "tables", tmp_path / "nvidia" / "tables")
    monkeypatch.setattr(tables, "ROOT", tmp_path)
    return tmp_path


# ----------------------------------------------------------------------------------------------
# Configs and dispatch
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("config,words", [
    ({"implementation": "cutlass"}, ("implementation='cutlass'", "['triton', 'gluon']")),
    ({"implementation": "gluon", "deterministic": "yes"}, ("deterministic='yes'", "[False, True]")),
    ({"implementation": "gluon", "gluon": {"fwd": {"block_k": 64}}}, ("gluon.fwd.block_k=64", "unknown keys")),
    ({"implementation": "gluon", "gluon": {"fwd": {"block_n": 96}}}, ("gluon.fwd.block_n=96", "one of [64, 128]")),
    ({"implementation": "gluon", "gluon": {"bwd": {"num_stages": True}}}, ("gluon.bwd.num_stages=True", "[1, 2, 3]")),
    ({"implementation": "gluon", "gluon": {"dq": {}}}, ("gluon.dq", "unknown keys", "gluon.fwd")),
    ({"implementation": "gluon", "gluon": 64}, ("gluon=64", "attention_gluon")),
])
def test_bad_configs_are_refused_before_any_launch(config, words):
    """Refused by the attention space (the Gluon tiles by the Gluon space it names) whether or not
    the Gluon kernels would run: here, on the CPU, they would not."""
    q = torch.randn(1, 8, 1, 64, dtype=torch.bfloat16)
    with pytest.raises(InputError) as err:
        ceiling.attention(q, q, q, backend="nvidia", config=config)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_gluon_tiles_that_do_not_fit_are_refused_before_the_launch(hopper):
    """The merged tiles of the kernel about to run, checked against the Gluon space's constraints
    at the problem's head dim: too much shared memory is an InputError naming the keys."""
    problem = _problem(head_dim=128, q_len=8, k_len=8, heads=1, kv_heads=1)
    with pytest.raises(InputError) as err:
        ATTENTION.select(problem, "nvidia", {"implementation": "gluon", "gluon": {"fwd": {"num_stages": 4}}})
    assert "gluon.fwd.block_n, gluon.fwd.num_stages" in str(err.value) and "smem_per_block" in str(err.value)
    assert resolve_config(problem, GLUON_IMPL, {"gluon": {"fwd": {"num_stages": 3, "block_n": 64}}})["fwd"] == {
        **gluon.shipped()[128]["fwd"], "num_stages": 3, "block_n": 64}


def test_uncovered_problems_run_the_triton_kernels_and_say_why(hopper):
    cases = {
        "cpu tensors (Gluon has no interpreter)": _problem(device="cpu"),
        "dtype float32": _problem(dtype=torch.float32, head_dim=32),  # the Triton tiles that run fit float32 here
        "a bias or a boolean mask": _problem(bias=True),
        "head_dim 96": _problem(head_dim=96),
    }
    for words, problem in cases.items():
        name, why = implementation_for(problem, GLUON)
        assert name == "triton" and words in why and "config asks for the Gluon kernels" in why, why
    assert implementation_for(_problem(head_dim=256), GLUON, "fwd")[0] == "gluon"
    name, why = implementation_for(_problem(head_dim=256), GLUON, "bwd")
    assert name == "triton" and "head_dim 256" in why


def test_gluon_only_when_asked_or_proven(hopper, table_root):
    p = _problem(causal=True)
    assert implementation_for(p)[0] == "triton"
    assert implementation_for(p, GLUON) == ("gluon", "config asks for the Gluon kernels")
    assert implementation_for(p, {"implementation": "triton"})[0] == "triton"
    name, why = implementation_for(p, {**GLUON, "deterministic": True}, "bwd")
    assert name == "triton" and "deterministic" in why
    assert implementation_for(p, {**GLUON, "deterministic": True}, "fwd")[0] == "gluon"
    # A proven table entry makes it the default for that problem, and says where it was measured.
    tables.write(tables.path("nvidia", "H200", "attention_gluon"), {
        "family": "attention_gluon", "device": "H200", "about": "a device run's proven defaults",
        "entries": [{"when": "head_dim == 128 and causal and direction == 'fwd'", "default": True,
                     "source": "measured", "measured": {"device": "NVIDIA H200", "date": "2026-12-01",
                                                        "git_commit": "0000000", "provenance": "run X"}}]})
    assert implementation_for(p) == ("gluon", "measured right and faster on NVIDIA H200 (run X)")
    assert implementation_for(p, direction="bwd")[0] == "triton"
    assert implementation_for(_problem(causal=False))[0] == "triton"


def test_unsupported_triton_runs_the_triton_kernels(hopper, monkeypatch):
    from ceiling.nvidia import gluon as package

    monkeypatch.setattr(gluon, "unsupported_reason", lambda: package.unsupported_reason("3.7.0"))
    name, why = implementation_for(_problem(), GLUON)
    assert name == "triton" and "need Triton 3.6.x or 3.9.x; installed 3.7.0" in why


def test_cpu_tensors_with_gluon_asked_run_the_interpreted_triton_kernel():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 37, 2, 64, generator=g).to(torch.bfloat16).requires_grad_() for _ in range(3))
    out = ceiling.attention(q, k, v, causal=True, backend="nvidia", config=GLUON)
    out.backward(torch.ones_like(out))
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    plain = ceiling.attention(q, k, v, causal=True, backend="nvidia")
    plain.backward(torch.ones_like(plain))
    assert torch.equal(out, plain)
    assert all(torch.equal(a, t.grad) for a, t in zip(grads, (q, k, v)))


def test_backends_report_lists_the_gluon_implementation():
    row = next(r for r in ceiling.backends.report() if r["backend"] == "nvidia:gluon")
    assert row["op"] == "attention" and row["mode"] in ("native", "unavailable") and row["reason"]
    if not torch.cuda.is_available():
        assert row["mode"] == "unavailable" and "interpreter" in row["reason"]


# ----------------------------------------------------------------------------------------------
# The launch glue: what a launch passes is what the static check compiled
# ----------------------------------------------------------------------------------------------


class _Recorder:
    def __init__(self, kernel):
        self.kernel, self.calls = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append((grid, args, kwargs))
        return launch


def _launch_forward(q, k, v, causal, scale, config=None):
    """The Gluon forward launched as a call launches it: the problem checked, its config resolved
    once (``ceiling.op.resolve_config``), both handed to the launcher."""
    problem = check(q, k, v, causal=causal, scale=scale, backend="nvidia")
    return gluon.forward(problem, resolve_config(problem, GLUON_IMPL, config), q, k, v)


def _launch_backward(do, q, k, v, out, lse, causal, scale, config=None):
    """(dq, dk, dv, None) from the Gluon backward launched as a call launches it."""
    problem = check(q, k, v, causal=causal, scale=scale, backend="nvidia")
    saved = {"q": q, "k": k, "v": v, "bias": None, "mask": None, "out": out, "lse": lse}
    return gluon.backward(problem, resolve_config(problem, GLUON_IMPL, config), saved, {"out": do}, {"bias": False})


def _bound(kernel, args, kwargs):
    names = kernel.arg_names
    values = dict(zip(names, args))
    values.update({k: v for k, v in kwargs.items() if k in names})
    return values


def _check_against_spec(spec, values):
    from ceiling.nvidia.gluon.api import TensorDescriptor

    assert {k: values[k] for k in spec.constexprs} == spec.constexprs
    for name, kind in spec.signature.items():
        if kind.startswith("tensordesc"):
            d = values[name]
            assert isinstance(d, TensorDescriptor)
            block = "[" + ", ".join(map(str, d.block_shape)) + "]"
            assert kind.startswith(f"tensordesc<{kind.split('<')[1].split('[')[0]}{block}"), (name, kind, block)
            assert kind.endswith(f",{d.layout!r}>"), (name, kind, d.layout)


@needs_gluon_here
@pytest.mark.parametrize("head_dim,causal,gqa", [(128, True, 1), (64, False, 4), (256, True, 2)])
def test_forward_launch_matches_the_checked_binary(monkeypatch, head_dim, causal, gqa):
    from ceiling.nvidia.gluon import attention_fwd

    rec = _Recorder(attention_fwd.attention_fwd_kernel)
    monkeypatch.setattr(attention_fwd, "attention_fwd_kernel", rec)
    monkeypatch.setattr(gluon, "_sm_count", lambda index: 132)
    b, sq, sk, h = 2, 333, 517, 4 * gqa
    q = torch.randn(b, sq, h, head_dim, dtype=torch.bfloat16)
    k = torch.randn(b, sk, h // gqa, head_dim, dtype=torch.bfloat16)
    o, lse = _launch_forward(q, k, k, causal, 0.125)
    (grid, args, kwargs), = rec.calls
    values = _bound(rec.kernel, args, kwargs)
    _check_against_spec(static_check.spec("fwd", head_dim, causal, gluon.shipped()[head_dim]["fwd"]),
                        values)
    n_tiles = math.ceil(sq / 128) * b * h
    assert grid == (min(n_tiles, 132),) and kwargs["num_warps"] == 4
    assert (values["seqlen_q"], values["seqlen_k"], values["n_heads"], values["group"]) == (sq, sk, h, gqa)
    assert values["n_mblocks"] * values["n_bh"] == n_tiles
    assert values["qk_scale"] == pytest.approx(0.125 * 1.4426950408889634)
    assert o.shape == q.shape and lse.shape == (b, h, sq) and lse.dtype == torch.float32


@needs_gluon_here
@pytest.mark.parametrize("head_dim,causal,gqa", [(128, True, 1), (64, False, 2)])
def test_backward_launch_matches_the_checked_binary(monkeypatch, head_dim, causal, gqa):
    from ceiling.nvidia.gluon import attention_bwd

    rec = _Recorder(attention_bwd.attention_bwd_kernel)
    monkeypatch.setattr(attention_bwd, "attention_bwd_kernel", rec)
    b, sq, sk, h = 1, 201, 130, 2 * gqa
    q = torch.randn(b, sq, h, head_dim, dtype=torch.bfloat16)
    k = torch.randn(b, sk, h // gqa, head_dim, dtype=torch.bfloat16)
    lse = torch.randn(b, h, sq)
    dq, dk, dv, _ = _launch_backward(q, q, k, k, q, lse, causal, -0.5)
    (grid, args, kwargs), = rec.calls
    values = _bound(rec.kernel, args, kwargs)
    _check_against_spec(static_check.spec("bwd", head_dim, causal, gluon.shipped()[head_dim]["bwd"]),
                        values)
    assert grid == (math.ceil(sk / 128), b * h)
    assert values["sm_scale"] == -0.5 and values["group"] == gqa
    assert values["DK"].dtype == (torch.bfloat16 if gqa == 1 else torch.float32)
    assert values["desc_lse"].base.numel() == b * h * sq  # the flat lse the 1-D descriptor covers
    assert dq.shape == q.shape and dk.shape == k.shape and dk.dtype == k.dtype


# ----------------------------------------------------------------------------------------------
# The kernels' scalar index math, run on Python integers
# ----------------------------------------------------------------------------------------------


def _python(jit_fn):
    """A Gluon helper that does only scalar integer math, as a Python function of ints: its own
    source, with ``gl.minimum/maximum/cdiv`` on ints (its divisions are of non-negative values,
    where Python's floor and the GPU's truncation agree)."""
    ops = types.SimpleNamespace(minimum=min, maximum=max, cdiv=lambda a, b: -(-a // b))
    fn = jit_fn.fn
    return types.FunctionType(fn.__code__, {**fn.__globals__, "gl": ops}, fn.__name__, fn.__defaults__)


def _visible(sq, sk, causal):
    keep = torch.ones(sq, sk, dtype=torch.bool)
    if causal:
        keep = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + (sk - sq)
    return keep


LENGTHS = [(1, 1), (37, 37), (128, 128), (129, 300), (300, 129), (1000, 377), (377, 1000), (256, 64), (64, 256)]


@pytest.mark.parametrize("sq,sk", LENGTHS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_n", [64, 128])
def test_forward_block_ranges(sq, sk, causal, block_n):
    from ceiling.nvidia.gluon import attention_fwd as F

    count, unmasked = _python(F.kv_block_count), _python(F.unmasked_block_count)
    keep = _visible(sq, sk, causal)
    for m0_tile in range(0, sq, 128):
        n_blocks = count(m0_tile, sq, sk, 128, block_n, causal)
        rows = slice(m0_tile, min(m0_tile + 128, sq))
        seen = keep[rows].any(0).nonzero()
        # Every key a row of the tile sees lies in blocks 0 .. n_blocks - 1, and the last block is seen.
        assert n_blocks == (0 if not len(seen) else int(seen.max()) // block_n + 1)
        for wg in (0, 1):
            m0 = m0_tile + 64 * wg
            n_full = unmasked(m0, sq, sk, n_blocks, block_n, causal)
            assert 0 <= n_full <= max(n_blocks - 1, 0)
            wg_rows = keep[m0:m0 + 64]
            for j in range(n_full):  # unmasked blocks: every key inside k_len and seen by every row
                assert (j + 1) * block_n <= sk
                if causal:
                    cols = torch.arange(j * block_n, (j + 1) * block_n)
                    assert bool((cols[None, :] <= torch.arange(m0, m0 + 64)[:, None] + sk - sq).all())
            assert wg_rows.shape[0] == 0 or not wg_rows[:, n_blocks * block_n:].any()


@pytest.mark.parametrize("sq,sk", LENGTHS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_m", [64, 128])
def test_backward_query_block_ranges(sq, sk, causal, block_m):
    from ceiling.nvidia.gluon import attention_bwd as B

    ranges = _python(B.query_block_range)
    keep = _visible(sq, sk, causal)
    for start_n in range(0, sk, 128):
        lo, mid, full_end, tail, n_blocks = ranges(start_n, sq, sk, block_m, 128, causal)
        loops = [(range(lo, mid), True), (range(mid, full_end), False), (range(tail, n_blocks), True)]
        walked = [i for r, _ in loops for i in r]
        # The consumers' three loops walk [lo, n_blocks) once, in order (as the producer loads them).
        assert walked == list(range(lo, n_blocks))
        keys = keep[:, start_n:start_n + 128]
        for i in range(n_blocks):
            if i not in walked:
                assert not keys[i * block_m:(i + 1) * block_m].any()
        for i in loops[1][0]:  # unmasked: every (query, key) of the block pair exists and is seen
            assert (i + 1) * block_m <= sq and start_n + 128 <= sk
            assert bool(keys[i * block_m:(i + 1) * block_m].all())


@pytest.mark.parametrize("causal", [False, True])
def test_tiles_cover_every_query_block_once_heaviest_first(causal):
    from ceiling.nvidia.gluon import attention_fwd as F

    coords = _python(F.tile_coords)
    n_mblocks, batch, heads, group = 7, 2, 6, 3
    tiles = [coords(t, n_mblocks, batch * heads, heads, group, causal) for t in range(n_mblocks * batch * heads)]
    assert sorted((mb, b, h) for mb, b, h, _ in tiles) == sorted(
        (mb, b, h) for mb in range(n_mblocks) for b in range(batch) for h in range(heads))
    assert all(hk == h // group for _, _, h, hk in tiles)
    if causal:  # a CTA's next tile never sees more keys than its current one
        assert [mb for mb, *_ in tiles] == sorted((mb for mb, *_ in tiles), reverse=True)


# ----------------------------------------------------------------------------------------------
# The kernels' own source under the emulation of tests/gluon_emulator.py (CPU): program logic
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def emulated(monkeypatch):
    if gluon.unsupported_reason():
        pytest.skip(gluon.unsupported_reason())
    from tests import gluon_emulator

    gluon_emulator.install(monkeypatch)
    monkeypatch.setattr(gluon, "_sm_count", lambda index: 2)  # several tiles per CTA: the persistent loop
    return gluon_emulator


def _emulated_check(b, sq, sk, h, hk, d, causal, config=None, backward=True, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(sq * 7 + sk)
    q = torch.randn(b, sq, h, d, generator=g).to(dtype)
    k = torch.randn(b, sk, hk, d, generator=g).to(dtype)
    v = torch.randn(b, sk, hk, d, generator=g).to(dtype)
    do = torch.randn(b, sq, h, d, generator=g).to(dtype)
    scale = 1.0 / math.sqrt(d)
    out, lse = _launch_forward(q, k, v, causal, scale, config)
    ex_out, ex_lse = reference.attention_fwd(q, k, v, None, None, causal, scale, compute_dtype=torch.float64)
    lp_out, _ = reference.attention_fwd(q, k, v, None, None, causal, scale, compute_dtype=dtype)
    assert_close("out", out, lp_out, ex_out, atol=2e-3)
    finite = torch.isfinite(ex_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert not finite.any() or (lse[finite] - ex_lse[finite]).abs().max().item() < 1e-4
    if not backward:
        return
    grads = _launch_backward(do, q, k, v, out, lse, causal, scale, config)[:3]
    ex_grads = reference.attention_bwd(do, q, k, v, ex_out, ex_lse, None, None, causal, scale, False,
                                       compute_dtype=torch.float64)
    lp_grads = reference.attention_bwd(do, q, k, v, lp_out, None, None, None, causal, scale, False, compute_dtype=dtype)
    for name, ours, lp, ex in zip(("dq", "dk", "dv"), grads, lp_grads, ex_grads):
        assert ours.shape == ex.shape and ours.dtype == dtype, name
        assert_close(name, ours, lp, ex, atol=2e-3)


@pytest.mark.parametrize("b,sq,sk,h,hk,d,causal", [
    (1, 200, 200, 2, 2, 64, True),
    (2, 300, 517, 4, 2, 128, True),  # GQA, q_len < k_len (bottom-right diagonal)
    (1, 517, 300, 4, 1, 128, True),  # MQA, q_len > k_len: rows that see no key
    (1, 129, 129, 2, 2, 128, False),
])
@pytest.mark.usefixtures("poisoned")
def test_emulated_kernels_match_float64(emulated, b, sq, sk, h, hk, d, causal):
    _emulated_check(b, sq, sk, h, hk, d, causal)


@pytest.mark.usefixtures("poisoned")
def test_emulated_forward_variants(emulated):
    _emulated_check(1, 300, 300, 2, 2, 256, True, backward=False, dtype=torch.float16)  # head dim 256: O through Q
    _emulated_check(1, 200, 333, 2, 1, 128, True, {"gluon": {"fwd": {"exp2_split": True}}}, backward=False)
    _emulated_check(1, 250, 250, 2, 2, 64, False, {"gluon": {"fwd": {"pingpong": False, "block_n": 64,
                                                                     "num_stages": 4}}}, backward=False)
    _emulated_check(1, 250, 190, 2, 2, 64, True, {"gluon": {"bwd": {"block_m": 128, "num_stages": 1}}})


def test_emulation_catches_planted_bugs(emulated, monkeypatch):
    """Without these failing, the emulated runs above would prove nothing."""
    from ceiling.nvidia.gluon import attention_fwd as F

    ns = emulated._namespace(F.__name__)
    # Every key block but the peeled one treated as unmasked: with 64-key blocks and the diagonal
    # 100 keys right of the tile's, keys right of it leak into the softmax.
    monkeypatch.setitem(ns, "unmasked_block_count", lambda m0, sq, sk, n, bn, causal: torch.clamp(n - 1, min=0))
    with pytest.raises(AssertionError, match="out"):
        _emulated_check(1, 200, 300, 2, 2, 64, True, {"gluon": {"fwd": {"block_n": 64}}}, backward=False)
    monkeypatch.undo()
    emulated.install(monkeypatch)
    monkeypatch.setattr(gluon, "_sm_count", lambda index: 2)
    monkeypatch.setattr(emulated, "TIMEOUT_S", 1.0)
    # Consumer 0 counts one turn ahead: both consumers wait for the other's first turn.
    step = ns["_fwd_step"]

    def wrong_turn(j, count, turns, *rest):
        wg = rest[16]  # _fwd_step(j, count, turns, q, ..., qk_scale, WG, ...)
        return step(j, count, turns + (wg == 0), *rest)

    monkeypatch.setitem(ns, "_fwd_step", wrong_turn)
    with pytest.raises(TimeoutError, match="deadlock"):
        _emulated_check(1, 300, 300, 2, 2, 64, False, backward=False)


# ----------------------------------------------------------------------------------------------
# On an H200: results against float64
# ----------------------------------------------------------------------------------------------


def _hopper_with_gluon() -> str | None:
    if not torch.cuda.is_available():
        return "needs a Hopper GPU (Gluon has no interpreter; the CPU tests above check the rest)"
    mode, why = gluon.availability()
    return None if mode == "native" else why


needs_hopper = pytest.mark.skipif(_hopper_with_gluon() is not None, reason=str(_hopper_with_gluon()))


@pytest.fixture
def poisoned(monkeypatch):
    """Gluon outputs start as NaN: an element no CTA wrote fails the checks."""

    def empty(shape, like, dtype=None):
        return torch.full(shape, float("nan"), device=like.device, dtype=dtype or like.dtype)

    monkeypatch.setattr(gluon, "_empty", empty)


def _select_and_launch_forward(q, k, v, causal, scale, config):
    """(out, lse) from the forward implementation :meth:`ceiling.op.Op.select` chooses."""
    call = ATTENTION.select(check(q, k, v, causal=causal, scale=scale, backend="nvidia"), "nvidia", config)
    return call.forward.implementation.load().forward(call.problem, call.forward.config, q, k, v, None, None)


def _select_and_launch_backward(do, q, k, v, out, lse, causal, scale, config):
    """(dq, dk, dv, dbias) from the backward implementation :meth:`ceiling.op.Op.select` chooses."""
    call = ATTENTION.select(check(q, k, v, causal=causal, scale=scale, backend="nvidia"), "nvidia", config)
    saved = {"q": q, "k": k, "v": v, "bias": None, "mask": None, "out": out, "lse": lse}
    return call.backward.implementation.load().backward(call.problem, call.backward.config, saved, {"out": do},
                                                        {"bias": False})


def _run_and_check(b, sq, sk, h, hk, d, causal, config=GLUON, dtype=torch.bfloat16, seed=0):
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(seed)
    q = torch.randn(b, sq, h, d, device=dev, generator=g).to(dtype)
    k = torch.randn(b, sk, hk, d, device=dev, generator=g).to(dtype)
    v = torch.randn(b, sk, hk, d, device=dev, generator=g).to(dtype)
    do = torch.randn(b, sq, h, d, device=dev, generator=g).to(dtype)
    scale = 1.0 / math.sqrt(d)
    problem = check(q, k, v, causal=causal, backend="nvidia")
    assert implementation_for(problem, config)[0] == "gluon"
    out, lse = _select_and_launch_forward(q, k, v, causal, scale, config)
    dq, dk, dv, dbias = _select_and_launch_backward(do, q, k, v, out, lse, causal, scale, config)
    assert dbias is None
    ex_out, ex_lse = reference.attention_fwd(q, k, v, None, None, causal, scale, compute_dtype=torch.float64)
    ex_grads = reference.attention_bwd(do, q, k, v, ex_out, ex_lse, None, None, causal, scale, False,
                                       compute_dtype=torch.float64)
    lp_out, _ = reference.attention_fwd(q, k, v, None, None, causal, scale, compute_dtype=dtype)
    lp_grads = reference.attention_bwd(do, q, k, v, lp_out, None, None, None, causal, scale, False, compute_dtype=dtype)
    assert_close("out", out, lp_out, ex_out, atol=2e-3)
    finite = torch.isfinite(ex_lse)
    assert torch.equal(torch.isfinite(lse), finite), "lse: -inf exactly where a row sees no key"
    if finite.any():
        assert (lse[finite] - ex_lse[finite].float()).abs().max().item() < 2e-2
    for name, ours, lp, ex in zip(("dq", "dk", "dv"), (dq, dk, dv), lp_grads, ex_grads):
        assert ours.shape == ex.shape and ours.dtype == dtype, name
        assert_close(name, ours, lp, ex, atol=2e-3)
    return out, lse


@pytest.mark.parametrize("b,sq,sk,h,hk,d,causal", [
    (2, 1000, 1000, 4, 4, 128, False),  # ragged tails (1000 = 7 x 128 + 104)
    (2, 1000, 1000, 4, 4, 128, True),
    (1, 377, 1000, 8, 2, 64, True),  # GQA, causal bottom-right with q_len < k_len
    (1, 1000, 377, 4, 1, 128, True),  # MQA, q_len > k_len: the first 623 rows see no key
    (2, 1536, 1536, 8, 8, 128, True),  # 192 tiles: more than one per SM (persistent loop)
    (1, 129, 129, 2, 2, 64, False),
])
@pytest.mark.gpu
@needs_hopper
@pytest.mark.usefixtures("poisoned")
def test_gluon_matches_float64(b, sq, sk, h, hk, d, causal):
    _run_and_check(b, sq, sk, h, hk, d, causal)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.usefixtures("poisoned")
def test_gluon_head_dim_256_forward_and_fp16():
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(1)
    q, k, v = (torch.randn(1, 300, 2, 256, device=dev, generator=g).to(torch.float16) for _ in range(3))
    out, lse = _select_and_launch_forward(q, k, v, True, 0.0625, GLUON)
    ex, _ = reference.attention_fwd(q, k, v, None, None, True, 0.0625, compute_dtype=torch.float64)
    lp, _ = reference.attention_fwd(q, k, v, None, None, True, 0.0625, compute_dtype=torch.float16)
    assert_close("out", out, lp, ex, atol=2e-3)
    _run_and_check(1, 200, 333, 4, 2, 64, False, dtype=torch.float16)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.usefixtures("poisoned")
def test_gluon_exp2_split_and_no_pingpong_configs():
    _run_and_check(1, 700, 700, 4, 4, 128, True, {**GLUON, "gluon": {"fwd": {"exp2_split": True}}})
    _run_and_check(1, 700, 700, 4, 4, 64, False, {**GLUON, "gluon": {"fwd": {"pingpong": False, "block_n": 64}}})


# ----------------------------------------------------------------------------------------------
# The device sweep's decisions (its timing needs the device; what it writes does not)
# ----------------------------------------------------------------------------------------------


def test_sweep_candidates_are_the_filtered_list_shipped_config_first():
    """The sweep times the statically checked candidates (kernels/spaces/candidates/
    attention_gluon.sm_90a.json, every shipped config among them), nearest the shipped one first."""
    from ceiling.tuning import space
    from ceiling.tuning.attention import gluon as tune_attention

    for head_dim, entry in gluon.shipped().items():
        for kernel, shipped in entry.items():
            c = tune_attention.candidates(kernel, head_dim)
            listed = [{k: v for k, v in x.items() if k != "static"}
                      for x in space.candidates("attention_gluon", str(head_dim), kernel)]
            assert c[0] == shipped and sorted(map(str, c)) == sorted(map(str, listed)), (head_dim, kernel)
            changed = [sum(x[k] != v for k, v in shipped.items()) for x in c]
            assert changed == sorted(changed)
    assert set(tune_attention.sound_candidates([64, 128])) == {
        (k, d, causal) for k in ("fwd", "bwd") for d in (64, 128) for causal in (False, True)}


def test_sweep_applies_only_correct_winners_faster_than_triton(table_root, monkeypatch):
    from ceiling.tuning.attention import gluon as tune_attention

    fast = {"block_n": 64, "num_stages": 3, "exp2_split": True, "pingpong": True}
    bwd = {"block_m": 64, "num_stages": 3}
    rows = [
        {"head_dim": 128, "causal": True, "impl": "triton", "correct": True, "fwd_ms": 1.0, "bwd_ms": 2.0},
        {"head_dim": 128, "causal": True, "impl": "gluon", "correct": True, "error_ratio": 0.4,
         "config": {"fwd": fast, "bwd": bwd}, "fwd_ms": 0.8, "bwd_ms": 2.5},  # faster forward, slower backward
        {"head_dim": 128, "causal": True, "impl": "gluon", "correct": False, "error_ratio": 3.0,
         "config": {"fwd": {**fast, "pingpong": False}, "bwd": bwd}, "fwd_ms": 0.1, "bwd_ms": 0.1},  # wrong
        {"head_dim": 64, "causal": False, "impl": "triton", "correct": True, "fwd_ms": 1.0, "bwd_ms": 2.0},
        {"head_dim": 64, "causal": False, "impl": "gluon", "correct": True, "error_ratio": 0.5,
         "config": {"fwd": fast, "bwd": bwd}, "fwd_ms": 1.1, "bwd_ms": 2.1},  # slower: nothing
    ]
    wins = tune_attention.winners(rows)
    assert [(w["head_dim"], w["causal"], w["direction"], w["knobs"]) for w in wins] == [(128, True, "fwd", fast)]
    shipped = gluon.shipped()
    monkeypatch.setattr(tune_attention, "_provenance", lambda: {
        "device": "NVIDIA H200", "date": "2026-12-01", "git_commit": "0000000", "triton": "3.6.0"})
    table = tune_attention.apply(wins)
    assert table == tables.read(tables.path("nvidia", "H200", "attention_gluon"))  # this GPU model's table

    def tiles(**kw):  # the Gluon tiles an H200 problem resolves to now
        return resolve_config(_problem(**kw), GLUON_IMPL, None)

    assert tiles(head_dim=128, causal=True)["fwd"] == fast
    assert tiles(head_dim=128, causal=True)["bwd"] == shipped[128]["bwd"]  # the slower backward untouched
    assert tiles(head_dim=64, causal=False) == shipped[64] and tiles(head_dim=64, causal=True) == shipped[64]
    (entry,) = [e for e in table["entries"] if e.get("default")]
    assert gluon.proven_default(_problem(head_dim=128, causal=True), "fwd") == entry
    assert gluon.proven_default(_problem(head_dim=128, causal=True), "bwd") is None
    assert gluon.proven_default(_problem(head_dim=128, causal=False), "fwd") is None
    assert "0.800 ms vs Triton 1.000 ms" in entry["measured"]["provenance"]
