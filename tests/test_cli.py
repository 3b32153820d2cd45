"""The CLI as a reader meets it: plain flag help, --json wherever a table is printed, tables whose key
column stays whole at 120 columns, no warning noise, and ``ceiling.backends.report()`` as a table."""

from __future__ import annotations

import json
import re
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


# ------------------------------------------------------------------ user errors: one line, exit status 2

# (command line, what the one line must name): a bad op, target, dtype, config, JSON, path or number,
# for every command that takes one. None of them reaches a compile, a GPU or a fit.
BAD_INPUTS = [
    (["inspect", "gemm", "--target", "sm_77x"], "--target"),
    (["inspect", "nosuchop"], "OP"),
    (["inspect", "gemm", "--dtype", "bogus"], "--dtype"),
    (["inspect", "gemm", "--config", "{bad"], "--config"),
    (["inspect", "gemm", "--config", "[1]"], "--config"),
    (["inspect", "gemm", "--config", '{"BLOCK_M": 7}'], "--config"),  # not a shipped config
    (["inspect", "gemm", "--target", "tpu-v5e", "--config", '{"x": 1}'], "--config"),
    (["import-point", "/nonexistent-template", "--config", "{}"], "template_dir"),
    (["import-point", "{empty}", "--config", "{bad"], "--config"),
    (["import-point", "{empty}", "--config", "{}"], "TEMPLATE_DIR"),  # a folder without a template.json
    (["fit", "--store", "/nonexistent-store"], "--store"),
    (["fit", "--out", "{file}"], "--out"),
    (["fit", "--folds", "0"], "--folds"),
    (["fit", "--folds", "x"], "--folds"),
    (["export-templates", "--store", "/nonexistent-store"], "--store"),
    (["export-templates", "--out", "{file}"], "--out"),
    (["export-templates", "--op", "conv"], "--op"),
    (["export-templates", "--target", "sm_77x"], "--target"),
    (["sweep", "--op", "conv"], "--op"),
    (["sweep", "--target", "sm_77x"], "--target"),
    (["sweep", "--limit", "0"], "--limit"),
    (["sweep", "--store", "{file}"], "--store"),
    (["bench", "gemm", "--budget-s", "-1"], "--budget-s"),
    (["tune", "conv"], "OP"),
    (["tune", "gemm", "--dtype", "bogus"], "--dtype"),
    (["tune", "gemm", "--shapes", "nosuch"], "--shapes"),
    (["tune", "gemm-fp8", "--scalings", "tensor,bogus"], "--scalings"),
    (["tune", "trimul", "--n", "0"], "--n"),
    (["bench", "conv"], "OPS"),
    (["bench", "gemm", "--shapes", "nosuch"], "--shapes"),
    (["bench", "gemm", "--device", "tpu"], "--device"),
    (["device-check", "--op", "conv"], "--op"),
    (["device-check", "--budget-s", "0"], "--budget-s"),
    (["microbench", "nosuch"], "SUITES"),
    (["microbench", "host", "--device", "tpu"], "--device"),
    (["microbench", "host", "--runtime", "opencl"], "--runtime"),
    (["run", "--jobs", "-1"], "--jobs"),
    (["run", "--out", "{file}"], "--out"),
    (["backends", "--bogus"], "--bogus"),
]


def _main(argv: list[str], capsys) -> tuple[int, str, str]:
    """The program's entry point in this process: exit status, stdout, stderr."""
    from ceiling.roofline.cli import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capsys.readouterr()
    return exited.value.code, out, err


@pytest.mark.parametrize("argv, names", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_a_user_error_is_one_line_naming_the_argument_with_exit_status_2(argv, names, tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    (tmp_path / "empty").mkdir()
    places = {"{file}": str(tmp_path / "a-file"), "{empty}": str(tmp_path / "empty")}
    argv = [places.get(a, a) for a in argv]
    code, out, err = _main(argv, capsys)
    assert code == 2, (code, out, err)
    assert "Traceback" not in out + err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and names in lines[0], err
    assert "expected" in lines[0] or "does not exist" in lines[0] or "is a file" in lines[0] \
        or "No such option" in lines[0] or "should be" in lines[0], lines[0]
    assert out == ""


def test_inspect_names_the_valid_ops_and_targets(capsys):
    from ceiling.isa import inspect_ops, inspect_targets

    _, _, err = _main(["inspect", "nosuchop"], capsys)
    assert all(op in err for op in inspect_ops()) and "[]" not in err
    _, _, err = _main(["inspect", "gemm", "--target", "sm_77x"], capsys)
    assert all(t in err for t in inspect_targets("gemm")) and "'sm_77x'" in err


def test_the_installed_program_reports_a_bad_argument_in_one_line(tmp_path):
    """The entry point as a shell runs it (a fresh process), for the JSON case the report named."""
    result = subprocess.run([sys.executable, "-c", "from ceiling.roofline.cli import main; main()", "import-point",
                             str(tmp_path), "--config", "{bad"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == "", result
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("Error: Invalid value for --config: "), \
        result.stderr


def test_help_and_no_arguments_still_answer_as_before(capsys):
    code, out, _ = _main(["backends", "--help"], capsys)
    assert code == 0 and "Usage: ceiling backends" in out
    code, out, err = _main([], capsys)
    assert code == 2 and "Commands:" in out + err


# ------------------------------------------------------------------ tables: numbers whole, floats rounded

TRN2_ROW = {  # a row of `ceiling inspect gemm --target trn2 --json` (the emulator's cost model)
    "config": "m16n2k8", "shape": [4096, 4096, 4096], "rules": "ok", "fraction_of_peak": 0.9877588593555665,
    "estimated_s": 0.0017692847298852407, "bound_s": 0.0017476266666668471, "bottleneck": "tensor",
    "instructions": {"tensor": 8192, "vector": 1024, "scalar": 256, "gpsimd": 0, "dma": 512, "total": 9984},
    "busy_s": {"tensor": 0.0017476266666668471}, "dma_bytes": 201326592, "flops": 137438953472.0,
    "sbuf_peak_bytes_per_partition": 184320, "psum_peak_banks": 2, "method": "cost model", "op": "gemm",
    "target": "trn2", "dtype": "bfloat16"}


@pytest.mark.parametrize("width", [80, 120])
def test_trainium_inspect_floats_are_rounded_to_what_they_mean(width):
    rows = [TRN2_ROW, dict(TRN2_ROW, config="m8n4k8", rules="fail", fraction_of_peak=0.9865749614913744,
                           estimated_s=0.0017714078857473075)]
    text = _render(inspect_command.table(rows, "gemm on trn2 (bfloat16)"), width)
    assert max(map(len, text.splitlines())) <= width
    assert not re.search(r"\d\.\d{5,}", text), text  # no float printed with all its digits
    for cell in ("98.8%", "98.7%", "1.77 ms", "1.75 ms", "9984", "4096x4096x4096", "m16n2k8", "m8n4k8"):
        assert cell in text, (cell, text)


@pytest.mark.parametrize("width", [80, 120])
def test_numbers_never_wrap_across_lines(width):
    """A table too wide for the terminal wraps its text, never a number ("2490368", not "2490" over "368")."""
    numbers = ["2490368", "213504", "8404992", "16777216", "137438953472", "1.77 ms", "98.8%"]
    table = key_table("static facts", "triangle_multiplicative_update|fwdbwd",
                      ["note", "regs", "smem B", "vmem B", "vmem limit B", "flops", "time", "of peak"],
                      numeric=["regs", "smem B", "vmem B", "vmem limit B", "flops", "time", "of peak"], text=["note"])
    for i in range(3):
        table.add_row(f"tpu-v5e|trimul|row{i}", "the Mosaic lowering's scoped VMEM estimate, both directions",
                      *numbers)
    text = _render(table, width)
    assert max(map(len, text.splitlines())) <= width
    for n in numbers:
        assert sum(line.count(n) for line in text.splitlines()) == 3, (n, text)
