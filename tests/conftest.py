# The benchmark files' options (--benchmark, --benchmark-shapes) and parametrization.
pytest_plugins = ["ceiling.microbench.benchmarks.pytest_plugin"]

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def real_run(tmp_path_factory):
    """One real ``ceiling run`` for the whole test session: every step and the report, from the records
    committed with the package and this machine's host ceilings, with the compile and smoke plan cut to
    one compile, one TPU export and one smoke check (the report's figures do not depend on the plan's
    length). Returns the run folder."""
    from typer.testing import CliRunner

    from ceiling.roofline import run_tasks
    from ceiling.roofline.cli import app

    out = tmp_path_factory.mktemp("ceiling-run") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_tasks, "isa_tasks", lambda full=False: [
            run_tasks.Task("isa", "triangle_multiplicative_update", "sm_90a", "trimul_ln_out_bwd_bfloat16_cz128_c128"),
            run_tasks.Task("isa", "gemm", "tpu-v5p")])
        patch.setattr(run_tasks, "smoke_tasks", lambda: [run_tasks.Task("smoke", "gemm", "trainium")])
        result = CliRunner().invoke(app, ["run", "--out", str(out), "--jobs", "2"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    return out
