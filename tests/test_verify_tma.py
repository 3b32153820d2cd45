"""The ``tma`` property: every descriptor the Hopper launchers build is proved legal over the op's
domain; the prover finds the bugs the launchers had (re-planted here), and a planted launcher whose
row stride is not a multiple of 16 bytes gives a counterexample while its padded twin is proved."""

from __future__ import annotations

import pytest
import torch

from ceiling.nvidia import tma_descriptors as td
from ceiling.nvidia.gluon import tma_descriptors as gtd
from ceiling.verify import Status, tma


def _old_tma_ready(x):
    """The launchers' readiness test before the fix: base and outer strides multiples of 16 bytes."""
    return td.all_(x.ptr % 16 == 0, *[(s * x.item) % 16 == 0 for s in x.strides[:-1]])


@pytest.mark.parametrize("case", tma.shipped_cases(), ids=lambda c: f"{c.kernel}-{c.constexprs}")
def test_shipped_launchers_proved(case):
    r = tma.prove(case)
    assert r.status is Status.PROVED, r.as_dict()
    assert r.property == "tma"


def test_planted_stride_not_multiple_of_16_and_its_twin():
    bad, good = tma.planted_cases()
    r = tma.prove(bad)
    assert r.status is Status.COUNTEREXAMPLE
    cex = r.counterexample
    assert cex["rule"] == "stride 0 is a multiple of 16 bytes"
    assert (cex["built"]["strides"][0] * 2) % 16 != 0  # the witness really breaks the rule
    assert tma.prove(good).status is Status.PROVED


def test_prover_finds_the_huge_stride_on_a_size_one_dim(monkeypatch):
    """Before the fix a size-1 dim's stride was unchecked: M = 1 with a stride of 2^40 bytes or more
    went straight into the descriptor."""
    monkeypatch.setattr(td, "tma_ready", _old_tma_ready)
    r = tma.prove(tma.gemm_cases("bfloat16")[0])
    assert r.status is Status.COUNTEREXAMPLE
    cex = r.counterexample
    assert cex["rule"] in ("last stride is 1", "stride 0 is in [0, 2^40) bytes"), cex
    if cex["rule"] == "stride 0 is in [0, 2^40) bytes":
        assert cex["built"]["shape"][0] == 1 and cex["built"]["strides"][0] * 2 >= 2 ** 40


def test_prover_finds_the_fp8_unit_k_with_a_strided_k(monkeypatch):
    monkeypatch.setattr(td, "tma_ready", _old_tma_ready)
    r = tma.prove(tma.fp8_cases("bfloat16")[0])
    assert r.status is Status.COUNTEREXAMPLE
    assert r.counterexample["rule"] in ("last stride is 1", "stride 0 is in [0, 2^40) bytes")


def test_prover_finds_the_gluon_forward_with_too_many_heads(monkeypatch):
    """Before the fix the forward refused nothing by size: heads * head_dim >= 2^31 built a
    descriptor row Triton's i32 shape cannot hold."""
    monkeypatch.setattr(gtd, "too_large", lambda b, q, k, h, d, direction:
                        td.all_(direction == "bwd", b * h * q >= 2 ** 31))
    fwd = tma.gluon_attention_cases()[0]
    r = tma.prove(fwd)
    assert r.status is Status.COUNTEREXAMPLE
    assert "fits Triton's i32" in r.counterexample["rule"] or "2^32" in r.counterexample["rule"]


def _legal(view: torch.Tensor, block):
    d = td.over("x", td.Operand.of(view), block)
    return td.violations(d)


def test_gemm_copies_an_operand_with_a_huge_stride_on_a_size_one_dim():
    from ceiling.nvidia.gemm import _tma_storage

    storage = torch.zeros(64, dtype=torch.bfloat16)
    a = storage.as_strided((1, 64), (2 ** 40, 1))  # M = 1: torch accepts any stride there
    assert _legal(a, [64, 64])  # as it is, the descriptor is illegal
    view, trans = _tma_storage(a)
    assert not trans and _legal(view, [64, 64]) == [] and torch.equal(view, a)
    bt = storage.as_strided((64, 1), (1, 2 ** 40))  # N = 1, read through the transpose
    view, trans = _tma_storage(bt)
    assert _legal(view, [64, 64]) == [] and torch.equal(view.mT if trans else view, bt)


def test_fp8_copies_a_unit_k_operand_with_a_strided_k():
    from ceiling.nvidia.gemm_fp8 import _k_major

    x = torch.arange(8, dtype=torch.float32).to(torch.float8_e4m3fn).as_strided((8, 1), (1, 8))
    assert _legal(x, [64, 64])
    view = _k_major(x)
    assert _legal(view, [64, 64]) == [] and torch.equal(view.float(), x.float())


def test_gemm_refuses_dims_its_descriptors_cannot_hold():
    from ceiling.errors import InputError
    from ceiling.nvidia import gemm

    class Problem:
        out_shape, out_dtype, b_shared, activation = (1, 1), "bfloat16", False, None

    a = torch.zeros(1, 1, dtype=torch.bfloat16).expand(1, 2 ** 31)  # K = 2^31, no storage behind it
    b = torch.zeros(1, 1, dtype=torch.bfloat16).expand(2 ** 31, 1)
    with pytest.raises(InputError, match="K below 2"):
        gemm.forward(Problem, {"SPLIT_K": 1}, a, b, None)


def test_gluon_refuses_rows_its_descriptors_cannot_hold():
    assert gtd.too_large(1, 1, 1, 2 ** 31 // 64, 64, "fwd")
    assert not gtd.too_large(1, 1, 1, 2 ** 31 // 64 - 1, 64, "fwd")
    assert gtd.too_large(2 ** 20, 2 ** 11, 1, 1, 64, "bwd") and not gtd.too_large(2 ** 20, 2 ** 11, 1, 1, 64, "fwd")


def test_verify_all_returns_results():
    results = tma.verify_all(("gfx942",))
    assert results == []


def test_fp8_unit_k_with_a_strided_k_runs_interpreted():
    """The FP8 GEMM on a K = 1 operand whose K stride is 8 (rows 16 bytes apart): before the fix its
    descriptor had a last stride of 8 and ``TensorDescriptor`` refused it ("Last dimension must be
    contiguous"), under the interpreter as on a GPU."""
    import ceiling

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(128, generator=gen).to(torch.float8_e4m3fn).as_strided((8, 1), (16, 8))
    b = torch.randn(1, 16, generator=gen).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    out = ceiling.scaled_gemm(a, b, one, one, backend="nvidia")
    assert torch.equal(out, ceiling.scaled_gemm(a, b, one, one, backend="reference"))


@pytest.mark.parametrize("cfg,dtype", [
    (dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, EPILOGUE_SUBTILE=True), "bfloat16"),
    (dict(BLOCK_M=64, BLOCK_N=16, BLOCK_K=256), "bfloat16"),
    (dict(BLOCK_M=64, BLOCK_N=16, BLOCK_K=256), "float32"),
    (dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, SPLIT_K=2), "bfloat16"),
])
def test_box_model_matches_the_compiler(cfg, dtype):
    """The box and swizzle the verifier assumes for a block are the ones Triton encodes."""
    from ceiling.nvidia import gemm_specs

    full = {**dict(GROUP_M=8, num_stages=3, num_warps=8, EPILOGUE_SUBTILE=False, WARP_SPECIALIZE=False, SPLIT_K=1,
                   STREAM_K=False), **cfg}
    spec = gemm_specs.compile_spec(full, dtype, b_trans=True)
    bm, bn, bk, split = full["BLOCK_M"], full["BLOCK_N"], full["BLOCK_K"], full["SPLIT_K"]
    a, b, c = td.gemm_blocks(bm, bn, bk, False, True, False, bn // 2 if full["EPILOGUE_SUBTILE"] else bn)
    item = tma.ITEM[dtype]
    expected = [td.Descriptor("a", 0, (), (), tuple(a), item), td.Descriptor("b", 0, (), (), tuple(b), item),
                td.Descriptor("c", 0, (), (), (1, bm, bn) if split > 1 else tuple(c), 4 if split > 1 else item)]
    assert tma.compiled_boxes(spec) == [(list(td.box(d)[0]), td.box(d)[1]) for d in expected]


def test_verify_all_includes_the_launchers_and_caches_them_by_digest(monkeypatch, tmp_path):
    from ceiling.verify import launchers
    from ceiling.verify.result import Result, Status

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    ran = []

    def run(group):
        ran.append(group)
        return [Result(f"{group}-kernel", group, Status.PROVED, {}, 0.1)]

    monkeypatch.setattr(launchers, "_run", run)
    first = list(launchers.verify_all())
    assert [g for g, _, cached in first] == ["tma", "protocol"] and ran == ["tma", "protocol"]
    assert not any(cached for _, _, cached in first)
    second = list(launchers.verify_all())
    assert ran == ["tma", "protocol"] and all(cached for _, _, cached in second)
    assert [r.as_dict() for _, rs, _ in second for r in rs] == [r.as_dict() for _, rs, _ in first for r in rs]
    monkeypatch.setattr(launchers, "_source", lambda module: "changed " + module)
    list(launchers.verify_all())
    assert ran == ["tma", "protocol"] * 2
