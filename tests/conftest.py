# The benchmark files' options (--benchmark, --benchmark-shapes) and parametrization.
pytest_plugins = ["ceiling.microbench.benchmarks.pytest_plugin"]

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def real_run(tmp_path_factory, worker_id):
    """One real ``ceiling run`` for the whole test session: every step and the report, from the records
    committed with the package and this machine's host ceilings, with the compile and smoke plan cut to
    one compile, one TPU export and one smoke check (the report's figures do not depend on the plan's
    length). Under pytest-xdist the workers share it: the first to take the lock runs it, the others
    wait and read its folder. Returns the run folder (``.out``) and what the command printed (``.output``)."""
    from types import SimpleNamespace

    import fcntl

    from typer.testing import CliRunner

    from ceiling.roofline import run_tasks
    from ceiling.roofline.cli import app

    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    out, done = shared / "ceiling-run", shared / "ceiling-run.done"
    with open(shared / "ceiling-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(run_tasks, "isa_tasks", lambda full=False: [
                    run_tasks.Task("isa", "triangle_multiplicative_update", "sm_90a",
                                   "trimul_ln_out_bwd_bfloat16_cz128_c128"),
                    run_tasks.Task("isa", "gemm", "tpu-v5p")])
                patch.setattr(run_tasks, "smoke_tasks", lambda: [run_tasks.Task("smoke", "gemm", "trainium")])
                result = CliRunner().invoke(app, ["run", "--out", str(out), "--jobs", "2"], env={"COLUMNS": "120"})
            assert result.exit_code == 0, result.output
            done.write_text(result.output)
    return SimpleNamespace(out=out, output=done.read_text())
