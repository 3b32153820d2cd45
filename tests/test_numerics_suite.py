"""The feature probes: their data, the published feature tables the model reproduces, each
hypothesis read back, the CLI, and the device path (through the interpreter here)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from ceiling.numerics import lookup, probes, run, suite
from ceiling.roofline.cli import app

# The published feature tables (Khattak and Mikaitis 2025, models/H100TC.m and models/B200TC.m) in
# the probes' terms: extra alignment bits, fraction bits of a block result, block FMA size, final
# rounding; every kind keeps subnormals and aligns the accumulator with the products.
PUBLISHED = {
    "h100": {"fp16": (2, 23, 16, "rz"), "bf16": (2, 23, 16, "rz"), "tf32": (2, 23, 8, "rz"),
             "e4m3": (-10, 13, 32, "rz"), "e5m2": (-10, 13, 32, "rz")},
    "b200": {"fp16": (2, 23, 16, "rz"), "bf16": (2, 23, 16, "rz"), "tf32": (2, 23, 8, "rz"),
             "e4m3": (2, 23, 32, "rz"), "e5m2": (2, 23, 32, "rz")},
}


def _table(extra, acc, block, rounding):
    return {"subnormal_inputs": "kept", "subnormal_outputs": "kept", "alignment_bits": extra,
            "accumulator_bits": acc, "block": block, "rounding": rounding, "accumulator_order": "with the products"}


def test_probes_file_is_what_its_generator_writes():
    assert probes.PATH.read_text() == probes.dumps(probes.build())


def test_every_probe_names_distinct_outcomes_for_its_hypotheses():
    data = probes.load()
    for kind, entries in data["kinds"].items():
        assert len({p["id"] for p in entries}) == len(entries)
        for p in entries:
            assert set(p["outcomes"]) <= set(data["features"][p["feature"]]["hypotheses"])
            if p["feature"] != "rounding":  # a rounding probe pairs hypotheses (rz/rd agree on +)
                assert len(set(p["outcomes"].values())) == len(p["outcomes"]), (kind, p["id"])
            assert all(pos < data["length"] for pos, _, _ in p["terms"])


@pytest.mark.parametrize("target", sorted(PUBLISHED))
def test_the_model_reproduces_the_published_feature_table_exactly(target):
    rows = suite.table(target, suite.model_backend(target))
    assert {r["kind"]: r["features"] for r in rows} == {k: _table(*v) for k, v in PUBLISHED[target].items()}
    assert all(r["differs"] == [] for r in rows)


def test_the_b200_round_to_nearest_model_reads_as_rne():
    rows = suite.table("b200-rn", suite.model_backend("b200-rn"), ["bf16", "e4m3"])
    assert [r["features"]["rounding"] for r in rows] == ["rne", "rne"] and all(not r["differs"] for r in rows)


HYPOTHESES = [
    (dict(block=8), {"block": 8}),
    (dict(block=4), {"block": 4}),
    (dict(extra_alignment_bits=0), {"alignment_bits": 0}),
    (dict(extra_alignment_bits=1), {"alignment_bits": 1}),
    (dict(extra_alignment_bits=-9), {"alignment_bits": -9, "accumulator_bits": 14}),
    (dict(rounding="rne"), {"rounding": "rne"}),
    (dict(subnormal_inputs=False), {"subnormal_inputs": "flushed"}),
    (dict(subnormal_outputs=False), {"subnormal_outputs": "flushed"}),
]


@pytest.mark.parametrize("kind", ["bf16", "e4m3"])
@pytest.mark.parametrize("change, read", HYPOTHESES)
def test_the_probes_tell_each_hypothesis_apart(kind, change, read):
    """A tensor core built otherwise is read as built: the probes are not tuned to one answer."""
    p = dataclasses.replace(lookup("b200", kind), **change)
    got = suite.read(kind, suite.outcomes(kind, lambda k, a, b, c: np.diagonal(run(p, a, b, np.diag(c)))))
    base = _table(*PUBLISHED["b200"][kind])
    assert got == {**base, **read}


def test_float32_sums_are_not_mistaken_for_a_tensor_core():
    """Plain float32 dot products, one rounding a term, read as blocks of one product beside c, not as
    any published tensor core."""
    def numpy_backend(kind, a, b, c):
        out = c.astype(np.float32).copy()
        for i in range(a.shape[1]):
            out = (out + (a[:, i] * b[i]).astype(np.float32)).astype(np.float32)
        return out
    got = suite.read("bf16", suite.outcomes("bf16", numpy_backend))
    assert got["block"] == 2
    assert got != _table(*PUBLISHED["h100"]["bf16"])


def test_cli_prints_the_feature_table_and_its_json():
    result = CliRunner().invoke(app, ["microbench", "numerics", "--target", "h200", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    (entry,) = data["targets"]
    assert entry["target"] == "h100"
    fp8 = next(r for r in entry["rows"] if r["kind"] == "e4m3")
    assert fp8["features"]["alignment_bits"] == -10 and fp8["differs"] == []
    table = CliRunner().invoke(app, ["microbench", "numerics"], env={"COLUMNS": "160"})
    assert table.exit_code == 0 and "b200" in table.output and "differs" not in table.output


@pytest.mark.parametrize("args, says", [
    (["microbench", "numerics-device"], "no GPU is visible here"),
    (["microbench", "numerics", "--target", "mi300x"], "MI300MC.m"),
    (["microbench", "numerics", "--target", "v100"], "target"),
    (["microbench", "numerics", "host"], "runs alone"),
    (["microbench", "host", "--target", "h100"], "only the numerics suites"),
])
def test_cli_refusals_are_one_line_and_exit_2(args, says, monkeypatch, capsys):
    import sys

    import torch

    from ceiling.roofline.cli import main

    if args[1] == "numerics-device" and torch.cuda.is_available():
        pytest.skip("a GPU is visible: the device suite runs (test_numerics_device.py)")
    monkeypatch.setattr(sys, "argv", ["ceiling", *args])
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as exit_:
        main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert says in err and "Traceback" not in err
