"""ceiling.verify: each planted bug gives a counterexample for its property, its correct twin is proved,
the contract's errors name their key, and the CLI's exit status and JSON follow the results."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("z3")
pytest.importorskip("triton")

from ceiling.errors import InputError  # noqa: E402
from ceiling.verify import Result, Status, check, contract  # noqa: E402
from ceiling.verify.result import exit_code  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("verify_cases_kernels", ROOT / "tests/verify_cases/kernels.py")
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)
_spec = importlib.util.spec_from_file_location("verify_cases_matmul", ROOT / "tests/verify_cases/matmul_cases.py")
matmul_cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(matmul_cases)
_spec = importlib.util.spec_from_file_location("verify_cases_grouped", ROOT / "tests/verify_cases/grouped.py")
grouped = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(grouped)

COPY = {"grid": ["cdiv(n, BLOCK)"], "scalars": {"n": [1, 2**31 - 1024]}, "constexprs": {"BLOCK": [128]},
        "buffers": {"x_ptr": {"shape": ["n"], "dtype": "float32"},
                    "y_ptr": {"shape": ["n"], "dtype": "float32", "output": True}}}
ROWS = {"grid": ["rows"], "scalars": {"rows": [1, 65536], "cols": [1, 65536]}, "constexprs": {"BLOCK": [65536]},
        "buffers": {"x_ptr": {"shape": ["rows", "cols"], "dtype": "float16"},
                    "y_ptr": {"shape": ["rows", "cols"], "dtype": "float16", "output": True}}}

# A contiguous (B, R, C) output written by rows of the flattened (B * R, C) view (M = B * R), the program
# id split by division: proved on the merged view, which the planted bugs must not slip through.
FLAT = {"grid": ["cdiv(M, BLOCK_M) * cdiv(C, BLOCK_N)"], "sizes": {"B": [1, 8], "R": [1, 4096]},
        "scalars": {"M": "B * R", "C": [1, 512]}, "constexprs": {"BLOCK_M": [64], "BLOCK_N": [32]},
        "buffers": {"y_ptr": {"shape": ["B", "R", "C"], "dtype": "float32", "output": True}}}

# Rows per program, columns per loop iteration (R, C) stored in a loop over column blocks.
SWEEP = {"grid": ["cdiv(R, BLOCK_R)"], "scalars": {"R": [1, 4096], "C": [1, 4096]},
         "constexprs": {"BLOCK_R": [32], "BLOCK_C": [128]},
         "buffers": {"y_ptr": {"shape": ["R", "C"], "dtype": "float32", "output": True}}}

# A (G, 2, C) buffer of partials, each program's two halves stored by two stores.
HALVES = {"grid": ["G"], "sizes": {"G": [1, 4096]}, "scalars": {"C": [1, 128]}, "constexprs": {"BLOCK": [128]},
          "buffers": {"part_ptr": {"shape": ["G", 2, "C"], "dtype": "float32", "output": True}}}

# Pair rows of a contiguous (B, N, H, N, D) tensor, one (batch, i, head) per program on axis 1.
PAIR = {"grid": ["cdiv(N, BLOCK_M)", "B * N * H"], "sizes": {"B": [1, 4]},
        "scalars": {"N": [1, 1024], "H": [1, 8], "D": [33, 64]}, "constexprs": {"BLOCK_M": [64], "HEAD_DIM": [64]},
        "buffers": {"o_ptr": {"shape": ["B", "N", "H", "N", "D"], "dtype": "float32", "output": True}}}
# Grouped-query heads: H query heads over HK key heads, (B, S, HK, 64) read into (B, S, H, 64).
GQA = {"grid": ["cdiv(S, BLOCK)", "B * H"], "sizes": {"B": [1, 64], "HK": [1, 16]},
       "scalars": {"S": [1, 2**17], "H": [1, 128], "group": "H // HK", "stride_kb": "S * HK * 64",
                   "stride_ks": "HK * 64", "stride_ob": "S * H * 64", "stride_os": "H * 64"},
       "assume": {"conditions": ["HK <= H", "H % HK == 0"]}, "constexprs": {"BLOCK": [128], "HEAD_DIM": [64]},
       "buffers": {"k_ptr": {"shape": ["B", "S", "HK", 64], "dtype": "bfloat16"},
                   "o_ptr": {"shape": ["B", "S", "H", 64], "dtype": "bfloat16", "output": True}}}
# A copy whose mask also reads a loaded flag per element.
KEYED = {**COPY, "buffers": {**COPY["buffers"], "keep_ptr": {"shape": ["n"], "dtype": "int8"}}}


def run(fn, spec, props):
    c = contract.from_dict({"kernel": fn.__name__, **spec}, fn=fn)
    # a generous per-query timeout: a loaded CI machine must not turn a proof into an unknown
    results = check.verify(c, props, timeout_ms=60_000)
    return {r.property: r for r in results}


@pytest.mark.parametrize("fn, prop, spec", [
    (cases.copy_off_by_one, "bounds", COPY),
    (cases.copy_unmasked_tail, "bounds", COPY),
    (cases.rows_wrap, "overflow", ROWS),
    (cases.copy_overlap, "race", COPY),
    (cases.copy_hole, "coverage", COPY),
    (cases.flat_rows_last_row_missed, "coverage", FLAT),
    (cases.flat_rows_overlap, "race", FLAT),
    (cases.row_sweep_first_block_skipped, "coverage", SWEEP),
    (cases.row_sweep_stops_short, "coverage", SWEEP),
    (cases.halves_second_short, "coverage", HALVES),
    (cases.pair_rows_head_dropped, "race", PAIR),
    (cases.pair_rows_last_query_missed, "coverage", PAIR),
    (cases.grouped_heads_shifted, "bounds", GQA),
])
def test_planted_bug_gives_counterexample(fn, prop, spec):
    r = run(fn, spec, [prop])[prop]
    assert r.status is Status.COUNTEREXAMPLE, r
    assert r.counterexample["scalars"], r.counterexample
    assert r.counterexample["constexprs"] == {k: v[0] for k, v in spec["constexprs"].items()}


def test_grid_stride_loop_wraps_near_the_top():
    """The carried offset's last increment (computed, then unused) wraps once n nears 2**31."""
    r = run(cases.strided_loop_ok, {**COPY, "grid": ["min(cdiv(n, BLOCK), 132)"]}, ["overflow"])["overflow"]
    assert r.status is Status.COUNTEREXAMPLE and "addi" in r.counterexample["operation"], r
    assert r.counterexample["scalars"]["n"] > 2**31 - 132 * 128


def test_i64_length_still_wraps_the_i32_program_offset():
    """Past 2^31 elements n is an i64 argument, but pid * BLOCK is still computed in 32 bits."""
    spec = {**COPY, "scalars": {"n": [1, 2**33]}}
    r = run(cases.copy_ok, spec, ["overflow"])["overflow"]
    assert r.status is Status.COUNTEREXAMPLE and "i32 wrap in arith.muli" in r.counterexample["operation"], r
    assert r.counterexample["program_id"][0] * 128 >= 2**31 and r.counterexample["scalars"]["n"] > 2**31


def test_off_by_one_counterexample_replays():
    """The counterexample is concrete: the address is the extent itself (one past the end)."""
    cx = run(cases.copy_off_by_one, COPY, ["bounds"])["bounds"].counterexample
    n = cx["scalars"]["n"]
    pid, lane = cx["program_id"][0], cx["lane"][0]
    assert pid * 128 + lane == n == cx["offset"] == cx["extent"]


@pytest.mark.parametrize("fn, spec, props", [
    (cases.copy_ok, COPY, ["bounds", "overflow", "race", "coverage"]),
    (cases.rows_wide, ROWS, ["bounds", "overflow"]),
    (cases.flat_rows_ok, FLAT, ["bounds", "overflow", "race", "coverage"]),
    (cases.row_sweep_ok, SWEEP, ["bounds", "overflow", "race", "coverage"]),
    (cases.halves_ok, HALVES, ["bounds", "overflow", "race", "coverage"]),
    (cases.pair_rows_ok, PAIR, ["bounds", "overflow", "race", "coverage"]),
    (cases.grouped_heads_ok, GQA, ["bounds", "overflow", "race", "coverage"]),
    (cases.key_masked_copy_ok, KEYED, ["bounds", "overflow", "race"]),
    # the carried offset's last increment runs past n by up to a grid's span: n stays below 2**30 here
    (cases.strided_loop_ok, {**COPY, "grid": ["min(cdiv(n, BLOCK), 132)"], "scalars": {"n": [1, 2**30]}},
     ["bounds", "overflow", "race"]),
])
def test_correct_twin_is_proved(fn, spec, props):
    results = run(fn, spec, props)
    for p in props:
        assert results[p].status is Status.PROVED, results[p]


GROUPED = {"grid": ["cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)"],
           "scalars": {"M": [1, 4096], "N": [1, 4096], "K": [1, 4096], "stride_am": "K", "stride_ak": 1,
                       "stride_bk": "N", "stride_bn": 1, "stride_cm": "N", "stride_cn": 1},
           "constexprs": {"BLOCK_M": [64], "BLOCK_N": [64], "BLOCK_K": [32], "GROUP_M": [8], "CLIP": [True]},
           "buffers": {"a_ptr": {"shape": ["M", "K"], "strides": ["stride_am", "stride_ak"], "dtype": "float16"},
                       "b_ptr": {"shape": ["K", "N"], "strides": ["stride_bk", "stride_bn"], "dtype": "float16"},
                       "c_ptr": {"shape": ["M", "N"], "strides": ["stride_cm", "stride_cn"], "dtype": "float16",
                                 "output": True}}}


@pytest.mark.parametrize("clip", [True, False])
def test_grouped_ordering_last_group(clip):
    """Unclipped, the last group's programs land past the last tile row, so some tile has no program."""
    spec = json.loads(json.dumps(GROUPED))
    spec["constexprs"]["CLIP"] = [clip]
    r = run(grouped.grouped_matmul, spec, ["coverage"])["coverage"]
    if clip:
        assert r.status is Status.PROVED, r
    else:
        assert r.status is Status.COUNTEREXAMPLE, r
        assert r.counterexample["tile_origin"][0] >= r.counterexample["scalars"]["M"]


MATMUL = {"grid": ["cdiv(M, BLOCK_M)", "cdiv(N, BLOCK_N)"],
          "scalars": {"M": [1, 4096], "N": [1, 4096], "K": [1, 4096], "stride_am": "K", "stride_ak": 1,
                      "stride_bk": "N", "stride_bn": 1, "stride_cm": "N", "stride_cn": 1},
          "constexprs": {"BLOCK_M": [64], "BLOCK_N": [64], "BLOCK_K": [32], "BUG": [0]},
          "buffers": GROUPED["buffers"], "contraction": {"load": "a_ptr", "axis": 1, "output": "c_ptr"}}


@pytest.mark.parametrize("bug, prop", [(0, "bounds"), (0, "accumulate"), (1, "bounds"), (2, "accumulate")])
def test_matmul_k_loop(bug, prop):
    """An unmasked K tail reads past A; a K loop stepping by half a block reads each index twice."""
    spec = json.loads(json.dumps(MATMUL))
    spec["constexprs"]["BUG"] = [bug]
    r = run(matmul_cases.matmul, spec, [prop])[prop]
    if bug == 0:
        assert r.status is Status.PROVED, r
        return
    assert r.status is Status.COUNTEREXAMPLE, r
    cx = r.counterexample
    if bug == 1:
        assert cx["buffer"] == "a_ptr" and cx["offset"] >= cx["extent"]
        assert cx["scalars"]["K"] % 32 != 0  # only a K tail reads past the end
    else:
        assert cx["reads"] == "twice" and 0 <= cx["contraction_index"] < cx["scalars"]["K"]


def test_result_round_trips():
    r = Result("k", "bounds", Status.COUNTEREXAMPLE, {"B": 1}, 0.5, {"offset": 3}, None)
    assert Result.from_dict(json.loads(json.dumps(r.as_dict()))) == r
    assert exit_code([r]) == 1
    assert exit_code([Result("k", "race", "proved")]) == 0
    assert exit_code([Result("k", "race", "unknown", reason="timeout")]) == 2
    with pytest.raises(ValueError):
        Result("k", "race", "unknown")


@pytest.mark.parametrize("change, key", [
    (lambda d: d["scalars"].pop("n"), "n"),
    (lambda d: d["scalars"].update(m=3), "scalars.m"),
    (lambda d: d.__setitem__("grid", ["cdiv(q, BLOCK)"]), "grid[0]"),
    (lambda d: d["buffers"]["x_ptr"].update(dtype="float17"), "buffers.x_ptr.dtype"),
    (lambda d: d.__setitem__("grid", ["n ** 2"]), "grid[0]"),
])
def test_bad_contract_names_key(change, key):
    d = json.loads(json.dumps(COPY))
    change(d)
    with pytest.raises(InputError, match=key.replace("[", r"\[").replace("]", r"\]")):
        contract.from_dict({"kernel": "copy_ok", **d}, fn=cases.copy_ok)


def test_expression_semantics():
    e = contract.parse_expr("cdiv(M, 64) * max(N, 2) - M // 3 % 5", "x")
    env = {"M": 100, "N": 1}
    assert e.value(env) == (-(-100 // 64)) * 2 - 100 // 3 % 5


def test_cli_on_example_contract():
    example = ROOT / "examples/verify/contract.toml"
    out = subprocess.run([sys.executable, "-m", "ceiling.roofline.cli", "verify", str(example), "--json"],
                         capture_output=True, text=True, timeout=170)
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert out.returncode == 0, (out.stdout, out.stderr)
    props = ("bounds", "overflow", "race", "coverage", "accumulate")
    assert {(r["property"], r["status"]) for r in rows} == {(p, "proved") for p in props}
    assert len(rows) == 10  # two BLOCK_M values x five properties


def test_cli_bad_contract_is_one_line(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text('kernel = "nothere.py:f"\ngrid = ["1"]\n')
    out = subprocess.run([sys.executable, "-m", "ceiling.roofline.cli", "verify", str(bad)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and "kernel" in out.stderr


def test_loop_coverage_counterexample_names_an_unwritten_element():
    """A count argument (fewer (program, iteration) pairs than tiles) still names an element no one stores."""
    cx = run(cases.row_sweep_first_block_skipped, SWEEP, ["coverage"])["coverage"].counterexample
    row, col = cx["element"]
    assert row < cx["scalars"]["R"] and col < min(128, cx["scalars"]["C"]), cx  # the skipped first block


def test_a_mask_known_only_in_part_proves_nothing_it_cannot():
    """A bound past the end beside a loaded flag: the flag may let the lane through, so bounds is not
    proved (unknown: the mask is not modelled in full), and coverage never is (the flag may drop a lane)."""
    bad = run(cases.key_masked_copy_past_end, KEYED, ["bounds"])["bounds"]
    assert bad.status is Status.UNKNOWN and "mask" in bad.reason, bad
    cov = run(cases.key_masked_copy_ok, KEYED, ["coverage"])["coverage"]
    assert cov.status is Status.UNKNOWN and "mask" in cov.reason, cov
