"""The CLI as a reader meets it: plain flag help, --json wherever a table is printed, tables whose key
column stays whole at 120 columns, no warning noise, and ``ceiling.backends.report()`` as a table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

from ceiling import backends
from ceiling.roofline.cli import app
from ceiling.roofline.commands import inspect as inspect_command
from ceiling.roofline.tables import key_table

REPO = Path(__file__).resolve().parents[1]
COMMANDS = sorted(typer.main.get_command(app).commands)
# every command that prints a table
TABLES = ("backends", "bench", "device-check", "fit", "inspect", "microbench", "run", "tune")


@pytest.mark.parametrize("command", COMMANDS)
def test_flags_render_as_flags_in_help(command):
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output
    assert any(line.split()[:1] == ["--help"] and "<" not in line for line in result.output.splitlines())
    if command in TABLES:
        json_line = next(line for line in result.output.splitlines() if line.strip().startswith("--json"))
        assert json_line.split()[0] == "--json" and "<" not in json_line.split()[1]


def test_every_command_that_prints_a_table_has_json():
    commands = typer.main.get_command(app).commands
    for name in TABLES:
        assert "--json" in {opt for p in commands[name].params for opt in p.opts}, name


def _render(table: Table, width: int = 120) -> str:
    console = Console(width=width, record=True, force_terminal=False, color_system=None)
    with console.capture() as captured:
        console.print(table)
    return captured.get()


def test_the_inspect_table_keeps_every_kernel_name_whole_at_120_columns():
    from ceiling.nvidia.gemm_specs import compile_specs

    names = [s.name for s in compile_specs()]
    rows = [{"name": n, "registers": 168, "spill_bytes": 0, "shared_bytes": 213_504, "tensor_core_instructions": 96,
             "threads": 256, "occupancy": 1, "instruction_mix": {"HGMMA": 96, "LDG": 20, "STS": 10, "IMAD": 1000,
                                                                  "MOV": 200}} for n in names]
    text = _render(inspect_command.table(rows, "gemm on sm_90a (bfloat16)"))
    assert all(name in text for name in names), text
    assert max(map(len, text.splitlines())) <= 120
    # the plain table this replaced cut them at this width: the check can fail
    plain = Table()
    for col in ["name", "registers", "spill_bytes", "shared_bytes", "tensor_core_instructions", "threads", "occupancy",
                "top instructions"]:
        plain.add_column(col)
    for r in rows:
        plain.add_row(r["name"], "168", "0", "213504", "96", "256", "1", "HGMMA:96, LDG:20, STS:10, IMAD:1000, MOV:200")
    assert not all(name in _render(plain) for name in names)


def test_a_key_table_wraps_other_columns_before_its_keys():
    keys = ["h200|attention|fwd", "h200|attention|bwd", "h200|gemm|underfilled", "h200|triangle_multiplicative_update|fwdbwd"]
    table = key_table("model", "device|op|shape class", ["mode", "timing", "excluded", "MAPE", "Spearman", "regret",
                                                         "meets targets"], text=["excluded", "meets targets"])
    for key in keys:
        table.add_row(key, "fitted", "cuda-graph", "12 baseline, 3 other-method, 1 host-overhead", "4.1%", "0.993",
                      "3.4% (6.8%)", "no: too few records to fit")
    text = _render(table)
    assert all(key in text for key in keys), text


def test_kernels_backends_report_prints_a_table_and_stays_a_list():
    rows = backends.report()
    text = str(rows)
    assert text == repr(rows) and "Backends on this machine" in text
    for op in backends.ops_by_name():
        assert op in text
    assert isinstance(rows, list) and all({"op", "backend", "mode", "reason"} == set(r) for r in rows)
    result = CliRunner().invoke(app, ["backends", "--json"])
    assert result.exit_code == 0 and json.loads(result.output) == json.loads(json.dumps(rows))


# A compile for sm_90a that goes through Triton's option parsing, where the FP-fusion warning comes from.
COMPILE = """
import warnings, sys
warnings.simplefilter("error")  # any warning fails the run
if sys.argv[1] == "cli":
    import ceiling.roofline.cli  # noqa: F401
from ceiling.isa import compile_for
from ceiling.triton.triangle_multiplication_specs import compile_specs
spec = next(s for s in compile_specs(dtype="bfloat16") if "ln_out_bwd" in s.name)
compile_for(spec, "sm_90a")
"""


def test_commands_compile_without_the_fp_fusion_warning(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_DEFAULT_FP_FUSION"}
    env.update(PYTHONPATH=str(REPO), TRITON_CACHE_DIR=str(tmp_path / "triton"))

    def compile_(mode: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", COMPILE, mode], env=env, capture_output=True, text=True,
                              timeout=300, cwd=REPO)

    quiet = compile_("cli")
    assert quiet.returncode == 0 and "TRITON_DEFAULT_FP_FUSION" not in quiet.stderr, quiet.stderr[-2000:]
    noisy = compile_("bare")  # without the CLI's setting, Triton 3.9 warns (a cache hit still parses the options)
    if "TRITON_DEFAULT_FP_FUSION" not in (noisy.stderr + noisy.stdout):
        import triton

        pytest.skip(f"Triton {triton.__version__} does not warn about the FP-fusion default")
    assert noisy.returncode != 0
