"""The trimul tuning sweep on the CPU: every candidate config of every stage runs interpreted
and passes the reference check, and each stage keeps the candidate its timer rates fastest.

The timing itself needs a GPU (CUDA-graph replay, ``ceiling tune trimul``); here the timer is
a table of made-up times, so what is checked is the sweep's bookkeeping and the candidates'
numerics, not their speed.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from ceiling import tables
from ceiling.tuning import trimul as tune_trimul


def _ranking_timer(order):
    """A timer that rates the k-th candidate of a stage (in call order) ``order(k)`` ms."""
    calls = {"k": 0}

    def timer(fn, rep_ms):
        fn()
        t = order(calls["k"])
        calls["k"] += 1
        return t, t, t

    return timer


# The backward stages take ~45 s interpreted: CI sweeps the forward ones, -m slow both.
@pytest.mark.parametrize("stages", [tune_trimul.FORWARD_STAGES,
                                    pytest.param(tune_trimul.BACKWARD_STAGES, marks=pytest.mark.slow)],
                         ids=["forward-stages", "backward-stages"])
def test_every_candidate_is_correct_and_the_fastest_is_kept(stages):
    table = tune_trimul.candidates()
    counts = [len(table[s]) for s in stages]
    # The second candidate of each stage is the fastest.
    firsts = [sum(counts[:i]) for i in range(len(counts))]
    timer = _ranking_timer(lambda k: 1.0 if k - max(f for f in firsts if f <= k) == 1 else 2.0 + k)
    rows, best = tune_trimul.sweep(n=9, c_z=16, dtype=torch.float32, device="cpu", timer=timer, stages=stages)
    assert len(rows) == sum(counts)
    bad = [r for r in rows if not r.get("correct")]
    assert not bad, bad
    start = tune_trimul.start_config(None, "float32")
    for stage in stages:
        second = table[stage][1]
        expected = {**start[stage], **second} if isinstance(second, dict) else second
        assert best[stage] == expected, stage
    untouched = set(start) - set(stages)
    assert all(best[s] == start[s] for s in untouched)


def test_table_entries_keep_float32_overrides():
    """A device's table: the tuned config, then the target's float32 entries again, so that they
    still hold over it for float32 inputs (the sweep tunes 16-bit inputs only)."""
    default = tune_trimul.start_config(None, "bfloat16")
    best = {**default, "ln_gate_proj": {"BLOCK_M": 64, "BLOCK_N": 256, "num_warps": 8, "num_stages": 2}}
    entries = tune_trimul.table_entries(best, {"device": "d", "date": "t", "git_commit": "c"}, "why")
    assert entries[0]["config"]["ln_gate_proj"]["BLOCK_N"] == 256
    assert entries[0]["config"]["bwd_rows"] == default["bwd_rows"]
    target = tables.read(tables.path("nvidia", "sm_90a", "triangle_multiplication"))["entries"]
    float32 = [e for e in target if e.get("when") == "dtype == 'float32'"]
    assert entries[1:] == float32 and float32[0]["config"]["ln_gate_proj"]


def test_tune_command_writes_rows_records_breakdown_and_the_table(tmp_path, monkeypatch):
    """``ceiling tune trimul`` end to end on the CPU (interpreted kernels, a made-up timer): what it
    writes must be valid records and a config table the kernels then select."""
    import json

    from ceiling.microbench.records import frame
    from ceiling.roofline.commands.tune_trimul import tune_trimul as run_tune

    root = tmp_path / "kernels"  # a copy of the tables: the sweep writes the device's beside them
    shutil.copytree(tables.ROOT / "nvidia" / "tables", root / "nvidia" / "tables")
    monkeypatch.setattr(tables, "ROOT", root)
    # the last ln_out_gate candidate is the "fastest"
    timer = _ranking_timer(lambda k: 10.0 - k)
    rows = run_tune(n=9, c_z=16, dtype="float32", device="cpu", timer=timer, budget_s=600.0, rep_ms=1,
                    out=tmp_path, apply=True, driver=None, stages=("ln_out_gate",))
    assert rows and all(r.get("correct") for r in rows)
    assert len(frame(tmp_path / "records")) == len(rows)
    breakdown = json.loads((tmp_path / "tune-trimul-breakdown.json").read_text())
    assert breakdown["start"] and breakdown["tuned"]
    written = tables.read(tables.path("nvidia", "cpu", "triangle_multiplication"))
    last = tune_trimul.candidates()["ln_out_gate"][-1]
    assert all(written["entries"][0]["config"]["ln_out_gate"][k] == v for k, v in last.items())
    assert written["entries"][0]["source"] == "measured" and "ln_out_gate" in written["entries"][0]["why"]
    assert tune_trimul.start_config("cpu", "bfloat16")["ln_out_gate"]["BLOCK_N"] == last["BLOCK_N"]
