"""The ``protocol`` property: the Gluon attention's mbarrier protocol, read from its TTGIR compiled
for sm_90a on this CPU, holds over every interleaving; planted bugs (small ring programs in the spirit
of Triton's ConSan cases, and mutations of the compiled TTGIR) each give a counterexample trace, and
their correct twins are proved."""

from __future__ import annotations

import json

import pytest

from ceiling.verify import Status, barriers, protocol, ttgir

FWD = ("fwd", 64, False, {"block_n": 128, "num_stages": 2, "exp2_split": False, "pingpong": True})


@pytest.fixture(scope="module")
def fwd_ttgir():
    compiled = protocol.compile_ttgir([FWD])
    return compiled[json.dumps(list(FWD))]


def test_correct_ring_proved_at_every_depth():
    for stages in (1, 2, 3):
        r = protocol.check_planted("correct", stages)
        assert r.status is Status.PROVED, r.as_dict()


@pytest.mark.parametrize("bug,violation", [
    ("wrong_phase_producer", "deadlock"), ("wrong_phase_consumer", "read before load"),
    ("missing_release", "deadlock"), ("early_overwrite", "early overwrite"),
    ("tx_short_one_box", "tx bytes"), ("tx_over_one_box", "deadlock")])
def test_planted_ring_bugs_give_traces(bug, violation):
    r = protocol.check_planted(bug)
    assert r.status is Status.COUNTEREXAMPLE
    cex = r.counterexample
    assert cex["violation"] == violation, cex
    # the interleaving that reaches it (empty when the very first step deadlocks)
    assert isinstance(cex["trace"], list) and (cex["trace"] or violation == "deadlock")
    assert cex["message"]


def test_tx_shortfall_is_reported_as_owed_bytes():
    cex = protocol.check_planted("tx_over_one_box").counterexample
    assert "awaits 8192 bytes" in cex["message"]


def test_parity_aliasing_two_phases_behind():
    """A waiter two phases behind sees the parity of its own phase again: the checker blocks it,
    as the hardware does (this is what a missing wait in a ring of one slot would hit)."""
    E = ttgir.Event  # noqa: N806
    proto = ttgir.Protocol({("b", 0): 1}, [("a", [E("arrive", ("b", 0), 1), E("arrive", ("b", 0), 1)]),
                                          ("w", [E("wait", ("b", 0), 0)])])
    v = barriers.check(proto)
    assert not v.ok and v.kind == "deadlock"


def test_compiled_forward_protocol_proved(fwd_ttgir):
    proto = ttgir.protocol(fwd_ttgir["ttgir"], *protocol.program("fwd", fwd_ttgir["constexprs"]))
    names = [n for n, _ in proto.partitions]
    assert names == ["default", "partition0", "partition1"]
    kinds = {n: {e.kind for e in evs} for n, evs in proto.partitions}
    assert {"wait", "expect", "load"} <= kinds["partition1"]  # the producer
    assert {"wait", "arrive", "mma", "mma_wait"} <= kinds["default"]  # a consumer
    # every ring slot is loaded at least twice: the ring wraps
    loads = [e.slots[0] for e in proto.partitions[2][1] if e.kind == "load" and e.slots[0][0] == "k_smem"]
    assert all(loads.count(("k_smem", s)) >= 2 for s in range(2))
    r = protocol.check_ttgir("fwd", "fwd", fwd_ttgir["ttgir"], fwd_ttgir["constexprs"])
    assert r.status is Status.PROVED, r.as_dict()


@pytest.mark.parametrize("bug,violation", [("tx_over_one_box", "deadlock"), ("missing_release", "deadlock"),
                                           ("wrong_phase", "deadlock"), ("early_release", "early overwrite")])
def test_mutated_ttgir_gives_counterexample(fwd_ttgir, bug, violation):
    mutated = protocol.mutate(fwd_ttgir["ttgir"], bug)
    assert mutated != fwd_ttgir["ttgir"]
    r = protocol.check_ttgir("fwd", "fwd", mutated, fwd_ttgir["constexprs"])
    assert r.status is Status.COUNTEREXAMPLE, r.as_dict()
    assert r.counterexample["violation"] == violation, r.counterexample["message"]


@pytest.mark.parametrize("old,new", [("scf.for %i", "scf.while %i"),
                                     ("ttng.fence_async_shared", "ttng.named_barrier_wait")])
def test_unmodelled_ttgir_is_unknown_not_proved(fwd_ttgir, old, new):
    text = fwd_ttgir["ttgir"].replace(old, new, 1)
    assert text != fwd_ttgir["ttgir"]
    r = protocol.check_ttgir("fwd", "fwd", text, fwd_ttgir["constexprs"])
    assert r.status is Status.UNKNOWN and "not modelled" in r.reason


def test_space_points_cover_the_space():
    fwd = protocol.space_points("fwd")
    assert {k["num_stages"] for _, _, k in fwd} == {2, 3, 4}
    assert {k["pingpong"] for _, _, k in fwd} == {False, True}
    assert {c for _, c, _ in fwd} == {False, True}
    assert {k["num_stages"] for _, _, k in protocol.space_points("bwd")} == {1, 2, 3}


@pytest.mark.parametrize("bug", protocol.PLANTED)
def test_reduction_keeps_every_verdict(bug):
    """The persistent-set reduction explores fewer states but reaches the same verdict."""
    proto = protocol.ring(2, 6, bug)
    full, reduced = barriers.check(proto, reduce=False), barriers.check(proto)
    assert (full.ok, full.kind) == (reduced.ok, reduced.kind)
    assert reduced.states <= full.states


@pytest.mark.slow
def test_forward_protocol_under_the_devices_triton():
    """The same forward compiled by Triton 3.6 (the H200's; installed apart by pinned_triton)."""
    from ceiling.nvidia.gluon.pinned_triton import DEVICE_TRITON

    compiled = protocol.compile_ttgir([FWD], DEVICE_TRITON)[json.dumps(list(FWD))]
    r = protocol.check_ttgir("fwd", "fwd", compiled["ttgir"], compiled["constexprs"])
    assert r.status is Status.PROVED, r.as_dict()


def test_gluon_box_model_matches_the_compiler(fwd_ttgir):
    """The boxes the ``tma`` property assumes for the Gluon forward's descriptors (Q, K, V, O) are
    the ones the compiler encodes."""
    from ceiling.nvidia import tma_descriptors as td
    from ceiling.nvidia.gluon import tma_descriptors as gtd
    from ceiling.nvidia.gluon.attention import smem_layout
    from ceiling.verify.tma import SWIZZLE_BYTES

    d, bn = FWD[1], FWD[3]["block_n"]
    model = []
    for rows in (64, bn, bn, 64):
        desc = gtd.rows("x", 1, 1, 1, d, 2, rows, smem_layout([1, rows, d], "bfloat16").swizzle_byte_width)
        dims, swizzle = td.box(desc)
        model.append((list(dims), swizzle))
    assert [(list(b), SWIZZLE_BYTES[s]) for b, s in fwd_ttgir["boxes"]] == model
