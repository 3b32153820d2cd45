"""``ceiling run``: its plan (representative ISA compiles, a smoke check of every op on every backend),
its progress in a terminal and in a log, and the command end to end on a small plan."""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console
from typer.testing import CliRunner

import ceiling
from ceiling import backends, smoke
from ceiling.isa import INSPECTORS, TARGETS
from ceiling.roofline import run_tasks
from ceiling.roofline.cli import app
from ceiling.roofline.commands import run as run_command
from ceiling.roofline.progress import StepProgress


def _fn(spec) -> str:
    return spec.fn.__name__


def test_representatives_compile_every_kernel_function_at_the_headline_config():
    for (op, target) in INSPECTORS:
        if target not in TARGETS:
            continue
        specs = run_tasks._triton_specs(op, target, "bfloat16")
        picked = run_tasks.representatives(op, target, specs)
        assert sorted(map(_fn, picked)) == sorted(set(map(_fn, specs))), (op, target)  # one per kernel function
        if op == "attention":
            assert all(s.config["head_dim"] == 128 and s.config["causal"] for s in picked)
    from ceiling.gemm.op import GEMM
    from ceiling.gemm.spec import shipped_problem
    from ceiling.op import resolve_config

    picked = run_tasks.representatives("gemm", "sm_90a", run_tasks._triton_specs("gemm", "sm_90a", "bfloat16"))
    assert sorted(map(_fn, picked)) == ["gemm_kernel", "gemm_streamk_kernel"]  # persistent, and the small-M schedule
    (gemm,) = [s for s in picked if _fn(s) == "gemm_kernel"]
    headline = shipped_problem(4096, 4096, 4096, gpu="NVIDIA H200", arch="sm_90")
    assert gemm.config == resolve_config(headline, GEMM.implementation("nvidia"), None)
    default, full = run_tasks.isa_tasks(), run_tasks.isa_tasks(full=True)
    assert {(t.op, t.where) for t in default} == {(t.op, t.where) for t in full} == set(INSPECTORS)
    assert len(full) > 2 * len(default)


def test_the_smoke_covers_every_op_on_every_backend():
    ops = backends.ops_by_name()
    assert set(smoke.SMOKES) == set(ops)  # every op has a smoke check
    expected = {(name, b) for name, op in ops.items() for b in op.backends()
                if b != "reference" and backends.op_availability(name, b).runs}
    assert set(smoke.cases("cpu")) == expected
    assert {b for op, b in expected if op == "attention"} == {"nvidia", "amd", "tpu", "trainium"}
    assert {(t.op, t.where) for t in run_tasks.smoke_tasks()} == expected


def test_attention_smoke_checks_the_output_and_every_gradient(monkeypatch):
    results = smoke.run_one("attention", "amd")
    assert [r.case.split()[-1] for r in results] == ["out", "dq", "dk", "dv", "dbias"]
    assert all(r.passed and r.mode == "interpreted" and 0 < r.error <= r.bound for r in results), results
    # a wrong kernel fails it: the output 3% off
    real = ceiling.attention
    monkeypatch.setattr(ceiling, "attention", lambda *a, **kw: real(*a, **kw) * 1.03)
    planted = smoke.run_one("attention", "trainium")
    assert not planted[0].passed and planted[0].case.endswith(" out")


def _lines(buffer: io.StringIO) -> list[str]:
    return buffer.getvalue().splitlines()


def test_progress_is_one_plain_line_per_event_when_not_in_a_terminal():
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=False, width=100)
    with StepProgress(console) as progress:
        assert not progress.live
        step = progress.step("ISA of shipped configs", 2)
        assert len(_lines(buffer)) == 1  # written at once, not at the end
        progress.advance(step, "gemm sm_90a gemm_128x256x64 ok (2.0 s)")
        assert len(_lines(buffer)) == 2
        progress.advance(step, "attention gfx942 fwd ok (3.0 s)")
        progress.finish(step, "ok: 2 kernels")
    lines = _lines(buffer)
    assert all(re.match(r"\[\s*\d+\.\ds\] ISA of shipped configs: ", line) for line in lines), lines
    assert lines[0].endswith("started, 2 items") and "1/2 gemm sm_90a" in lines[1] and "2/2 attention" in lines[2]
    assert lines[-1].endswith("ok: 2 kernels")


def test_progress_is_a_live_display_in_a_terminal():
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100)
    with StepProgress(console) as progress:
        assert progress.live
        step = progress.step("correctness smoke", 1)
        progress.advance(step, "gemm nvidia 2/2 within bounds")
        progress.finish(step, "ok")
    assert "correctness smoke: ok" in buffer.getvalue() and "1/1" in buffer.getvalue()
    assert "started" not in buffer.getvalue()  # bars, not log lines


def test_ceiling_run_end_to_end_on_a_small_plan(tmp_path, monkeypatch):
    """Every step on two workers, with the plan cut to one compile, one TPU export and one smoke check."""
    monkeypatch.setattr(run_tasks, "isa_tasks", lambda full=False: [
        run_tasks.Task("isa", "triangle_multiplicative_update", "sm_90a", "trimul_ln_out_bwd_bfloat16_cz128_c128"),
        run_tasks.Task("isa", "gemm", "tpu-v5p")])
    monkeypatch.setattr(run_tasks, "smoke_tasks", lambda: [run_tasks.Task("smoke", "gemm", "trainium")])
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", "--out", str(out), "--jobs", "2"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    lines = result.output.rstrip().splitlines()
    # progress as plain lines while it ran, the table, and last the report's path
    assert any(re.match(r"\[\s*\d+\.\ds\] ISA of shipped configs \(representatives\): 2/2 ", line) for line in lines)
    assert any(re.match(r"\[\s*\d+\.\ds\] correctness smoke: 1/1 gemm trainium 2/2 within bounds", line)
               for line in lines)
    assert lines[-1] == f"report: {out / 'report' / 'index.html'} (and {out / 'report' / 'summary.md'})"
    summary = json.loads((out / "summary.json").read_text())
    assert all(step["status"].startswith("ok") for step in summary["steps"].values()), summary["steps"]
    assert summary["isa"] == {"triangle_multiplicative_update/sm_90a": 1, "gemm/tpu-v5p": 2}
    assert {row["task"] for row in json.loads((out / "timings.json").read_text())} == {
        "triangle_multiplicative_update sm_90a trimul_ln_out_bwd_bfloat16_cz128_c128", "gemm tpu-v5p", "gemm trainium"}
    assert [r["case"].split()[-1] for r in json.loads((out / "correctness.json").read_text())] == [
        "transposed", "transposed"]
    page = (out / "report" / "index.html").read_text()
    # this machine's ceilings were measured by the run, the H200's come from the committed records
    assert re.search(r"<td[^>]*>cpu: [^<]+</td>.*?measured here \(", page, re.S)
    assert "measured on NVIDIA H200, 2026-11-30, commit " in page
    assert "measured on cpu: " not in page  # the committed records' host (another machine's CPU) is left out
    # the proofs step: the project's contracts, all proved, in the report's Proofs table
    assert summary["proofs"]["proved"] > 0 and summary["proofs"]["counterexample"] == 0
    assert re.search(r'id="proofs-table".*?gemm\.splitk_reduce@sm_90a.*?proved', page, re.S)


def test_ceiling_run_json_prints_the_summary_and_keeps_progress_off_stdout(tmp_path, monkeypatch):
    def host(out, summary, say):
        say("host memory bandwidth")
        return "ok: 1 record"

    def pool(out, summary, progress, full_isa, jobs):
        summary["steps"]["ISA"] = {"status": "ok: stand-in", "seconds": 0.0}

    def report(out, summary, say):
        summary["report"] = {"html": str(out / "index.html"), "markdown": str(out / "summary.md")}
        return "ok"

    monkeypatch.setattr(run_command, "step_host", host)
    monkeypatch.setattr(run_command, "steps_in_pool", pool)
    monkeypatch.setattr(run_command, "step_report", report)
    monkeypatch.setattr(run_command, "step_proofs", lambda out, summary, say: "ok: stand-in")
    result = CliRunner().invoke(app, ["run", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["report"]["html"].endswith("index.html") and list(doc["steps"])[:2] == [
        "backend report", "host ceilings (microbench host --quick)"]
    assert "host memory bandwidth" in result.stderr and "host memory bandwidth" not in result.stdout


@pytest.mark.parametrize("flag", ["--full-isa", "--jobs"])
def test_run_help_names_its_options(flag):
    result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "120"})
    assert flag in result.output
