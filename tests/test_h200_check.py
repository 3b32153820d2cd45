"""The device check (scripts/h200_check.sh) on a machine without a GPU.

Devices are lent rarely and briefly, so the script must not meet a stale path on the first one
after files move: every part is run here until it says there is no GPU, and every test file,
module, subcommand, option, shape suite and table the parts name is checked to exist.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "h200_check.sh"
TEXT = SCRIPT.read_text()
PARTS = re.findall(r"^  ([a-z0-9-]+)\)$", TEXT, flags=re.M)
# the script's helpers and the subcommand each one runs
HELPERS = {"sweep": "tune", "bench": "bench", "check": "device-check"}


def _part_body(part: str) -> str:
    body = re.search(rf"^  {re.escape(part)}\)\n(.*?)^    ;;$", TEXT, flags=re.M | re.S)
    assert body, f"part {part} has no body"
    return body.group(1)


def _commands(part: str) -> list[list[str]]:
    """The part's command lines (continuations joined, comments dropped) as words."""
    lines = _part_body(part).replace("\\\n", " ").splitlines()
    out = []
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(shlex.split(line.split(" 2>&1")[0].split(" | ")[0], comments=True))
    return out


@cache
def _help(subcommand: str) -> str:
    run = subprocess.run([sys.executable, "-m", "ceiling.roofline.cli", subcommand, "--help"], capture_output=True,
                         text=True, env={**os.environ, "COLUMNS": "200"})
    assert run.returncode == 0, f"ceiling {subcommand} --help: {run.stderr}"
    return run.stdout


def _invocations(part: str) -> list[tuple[str, list[str]]]:
    """(subcommand, its words) for every `ceiling` subcommand the part runs, directly or through
    the script's helpers."""
    found = []
    for words in _commands(part):
        if words[0] in HELPERS:
            found.append((HELPERS[words[0]], words[1:]))
        elif "ceiling.roofline.cli" in words:
            at = words.index("ceiling.roofline.cli")
            found.append((words[at + 1], words[at + 2:]))
    return found


def test_the_parts_are_the_ones_the_usage_names():
    usage = re.search(r"\[([a-z0-9|-]+)\]\}", TEXT).group(1).split("|")
    assert PARTS and sorted(PARTS) == sorted(usage)


@pytest.mark.parametrize("part", PARTS)
def test_every_test_file_and_module_a_part_names_exists(part):
    for words in _commands(part):
        for word in words:
            if word.startswith("tests/"):
                assert (ROOT / word).is_file(), f"{part}: {word} does not exist"
        if words[:2] == ["python3", "-m"] or words[2:4] == ["python3", "-m"]:
            module = words[words.index("-m") + 1]
            assert importlib.util.find_spec(module) is not None, f"{part}: no module {module}"


@pytest.mark.parametrize("part", PARTS)
def test_every_subcommand_option_and_value_a_part_passes_is_accepted(part):
    from ceiling.backends import ops_by_name
    from ceiling.gemm import shapes as gemm_shapes
    from ceiling.microbench import benchmarks
    from ceiling.scaled_gemm import shapes as fp8_shapes

    for subcommand, words in _invocations(part):
        text = _help(subcommand)
        for at, word in enumerate(words):
            if word.startswith("--"):
                assert re.search(rf"{re.escape(word)}\b", text), f"{part}: ceiling {subcommand} has no {word}"
            value = words[at + 1] if at + 1 < len(words) and not words[at + 1].startswith("$") else None
            if word == "--op" and value:
                assert value in ops_by_name(), f"{part}: no op {value}"
            if word == "--shapes" and value and subcommand == "tune":
                assert value in {**gemm_shapes.SUITES, **fp8_shapes.SUITES}, f"{part}: no shape suite {value}"
            if word == "--shapes" and value and subcommand == "bench":
                ops = [op for op in words[:at] if op in benchmarks.OPS]
                assert ops and all(benchmarks.has_suite(op, value) for op in ops), f"{part}: no shape suite {value}"


@pytest.mark.parametrize("part", PARTS)
def test_every_table_a_sweep_applies_to_is_a_table_of_a_family(part):
    families = {p.stem for p in (ROOT / "kernels" / "spaces").glob("*.json") if p.stem != "targets"}
    for words in _commands(part):
        if words[0] == "sweep":
            device, name = words[3].split("/")
            assert device in {"sm_90a", "H200"}, f"{part}: {words[3]} is not an NVIDIA H200 or sm_90a table"
            assert Path(name).stem in families, f"{part}: {words[3]} names no kernel family"
            assert (ROOT / "kernels" / "nvidia" / "tables" / device).is_dir()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the parts would run")
@pytest.mark.parametrize("part", PARTS)
def test_each_part_runs_until_it_says_there_is_no_gpu(part, tmp_path):
    env = {**os.environ, "CEILING_CHECK_INSTALLED": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    run = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), part], cwd=ROOT, capture_output=True,
                         text=True, env=env, timeout=120)
    log = (tmp_path / "out" / "log.txt").read_text()
    assert run.returncode == 3, run.stdout + run.stderr
    assert f"no GPU: part {part} needs an NVIDIA GPU" in log
    assert "Traceback" not in log and "No such file" not in run.stderr, log + run.stderr
    assert (tmp_path / "out" / "results.tgz").is_file()


def test_an_unknown_part_is_a_usage_error(tmp_path):
    run = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), "nosuchpart"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 2 and "part: expected main" in run.stdout
