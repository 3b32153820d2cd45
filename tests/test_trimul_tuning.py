"""The trimul tuning sweep on the CPU: every candidate config of every stage runs interpreted
and passes the reference check, and each stage keeps the candidate its timer rates fastest.

The timing itself needs a GPU (CUDA-graph replay, ``ceiling tune trimul``); here the timer is
a table of made-up times, so what is checked is the sweep's bookkeeping and the candidates'
numerics, not their speed.
"""

from __future__ import annotations

import pytest
import torch

from kernels.nvidia import triangle_multiplication as trimul
from kernels.triton import triangle_multiplication as shared_trimul
from kernels.tuning import trimul as tune_trimul


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
    start = trimul.config_for(None, "float32")
    for stage in stages:
        second = table[stage][1]
        expected = {**start[stage], **second} if isinstance(second, dict) else second
        assert best[stage] == expected, stage
    untouched = set(start) - set(stages)
    assert all(best[s] == start[s] for s in untouched)


def test_table_entry_keeps_float32_overrides():
    default = trimul.config_for(None, "bfloat16")
    raw_default = shared_trimul._table(str(trimul.CONFIG_FILE))["default"]
    best = {**default, "ln_gate_proj": {"BLOCK_M": 64, "BLOCK_N": 256, "num_warps": 8, "num_stages": 2}}
    entry = tune_trimul.table_entry(best, raw_default)
    assert entry["ln_gate_proj"]["BLOCK_N"] == 256
    assert entry["ln_gate_proj"]["float32"] == raw_default["ln_gate_proj"]["float32"]
    assert entry["bwd_rows"] == default["bwd_rows"]


def test_tune_command_writes_rows_records_breakdown_and_the_table(tmp_path):
    """``ceiling tune trimul`` end to end on the CPU (interpreted kernels, a made-up timer): what it
    writes must be valid records and a config table the kernels then select."""
    import json

    from microbench.records import frame
    from roofline.commands.tune_trimul import tune_trimul as run_tune

    table = tmp_path / "table.json"
    table.write_text(trimul.CONFIG_FILE.read_text())
    # the last ln_out_gate candidate is the "fastest"
    timer = _ranking_timer(lambda k: 10.0 - k)
    rows = run_tune(n=9, c_z=16, dtype="float32", device="cpu", timer=timer, budget_s=600.0, rep_ms=1,
                       out=tmp_path, apply=True, driver=None, table_path=table, stages=("ln_out_gate",))
    assert rows and all(r.get("correct") for r in rows)
    assert len(frame(tmp_path / "records")) == len(rows)
    breakdown = json.loads((tmp_path / "tune-trimul-breakdown.json").read_text())
    assert breakdown["start"] and breakdown["tuned"]
    written = json.loads(table.read_text())
    last = tune_trimul.candidates()["ln_out_gate"][-1]
    assert all(written["cpu"]["ln_out_gate"][k] == v for k, v in last.items())
    assert "ln_out_gate" in written["_measured"]["cpu"]
    assert trimul.config_for("cpu", "bfloat16", table)["ln_out_gate"]["BLOCK_N"] == last["BLOCK_N"]

