"""The report folder of a run, checked in a real headless browser; and the fit / export CLI."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from microbench import records as store
from microbench.records import Provenance, Record
from roofline import analysis, report
from roofline.cli import app
from tests.synthetic_records import gemm_records

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


def _run_records() -> list[Record]:
    """What a run on an H200 would leave: kernel timings with a vendor baseline, host and GPU microbenchmarks."""
    recs = gemm_records(shapes=[{"M": 4096, "N": 4096, "K": 4096}, {"M": 2048, "N": 6144, "K": 4096},
                                {"M": 8192, "N": 8192, "K": 2048}, {"M": 1024, "N": 1024, "K": 8192}],
                        per_shape=25, seed=random.randrange(1000))
    prov = Provenance(device="NVIDIA H200")
    recs.append(Record(kind="kernel", op="gemm", name="torch.matmul", backend="reference", metric="time",
                       value=2.1e-4, median=2.1e-4, unit="s", shape={"m": 4096, "n": 4096, "k": 4096},
                       config={"dtype": "bfloat16"}, extra={"role": "baseline"}, provenance=prov))
    recs.append(Record(kind="microbench", op="hbm-bandwidth", name="torch.copy_", metric="bandwidth",
                       value=3.9e12, unit="B/s", provenance=prov))
    recs.append(Record(kind="microbench", op="dram-stream", name="numpy", metric="bandwidth", value=1.8e10,
                       unit="B/s", provenance=Provenance(device="cpu: x86_64")))
    return recs


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    recs = _run_records()
    messages = []
    data = analysis.analyze(recs, out, families=["gemm"], targets=["sm_90a"], progress=messages.append)
    data.hardware = {"gpu": "none", "cpu cores": 2}
    data.steps.insert(0, report.Step("microbenchmarks", "skipped", 0.0, "no GPU"))
    paths = report.write(data, out)
    return out, paths, data, messages


def test_analysis_fits_plots_and_exports(run_folder):
    out, paths, data, messages = run_folder
    assert any("plotting" in m for m in messages)
    devices = {p["device"] for p in data.plots}
    assert {"NVIDIA H200", "cpu: x86_64"} <= devices
    assert all(p["png"].exists() and p["svg"].exists() for p in data.plots)
    assert data.model_modes["h200|gemm"] == "fitted" and data.model_modes["mi300x|gemm"] == "analytic"
    assert (out / "fit" / "model.json").exists() and (out / "templates" / "gemm" / "sm_90a" / "template.json").exists()
    md = paths["markdown"].read_text()
    assert "| h200 | gemm | M=4096, N=4096, K=4096 | bfloat16 | nvidia |" in md
    assert "torch.matmul" in md and "analytic" in md


@pytest.mark.skipif(CHROMIUM is None, reason="no headless browser: apt-get install -y chromium")
def test_report_renders_in_a_headless_browser(run_folder):
    out, paths, data, _ = run_folder
    url = paths["html"].resolve().as_uri()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
             "--virtual-time-budget=5000"]
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    assert '<h1 id="title">ceiling run</h1>' in dom
    for table in ("hardware-table", "steps-table", "ceilings-table", "kernels-table", "model-table", "templates-table"):
        assert f'id="{table}"' in dom
    # every roofline plot was fetched and decoded by the browser
    imgs = re.findall(r"<img[^>]*>", dom)
    assert len(imgs) == len(data.plots) >= 2
    assert all('data-rendered="yes"' in tag for tag in imgs), imgs
    # the kernel table has our GEMM against torch.matmul with a speedup
    row = re.search(r"<tr><td>h200</td><td>gemm</td><td>M=4096, N=4096, K=4096</td>.*?</tr>", dom, re.S)
    assert row and "torch.matmul" in row.group(0)
    shot = out / "page.png"
    subprocess.run([CHROMIUM, *flags, "--window-size=1280,2000", f"--screenshot={shot}", url],
                   capture_output=True, timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_fit_and_export_commands(tmp_path):
    recs = gemm_records(shapes=[{"M": 4096, "N": 4096, "K": 4096}, {"M": 2048, "N": 6144, "K": 4096},
                                {"M": 8192, "N": 8192, "K": 2048}, {"M": 1024, "N": 1024, "K": 8192}], per_shape=30)
    bad = recs[0].model_dump() | {"value": float("nan")}
    written, refused = store.append(tmp_path / "records", [*recs, bad])
    assert written == len(recs) and len(refused) == 1 and "finite" in refused[0][1]
    runner = CliRunner()
    res = runner.invoke(app, ["fit", "--store", str(tmp_path / "records"), "--out", str(tmp_path / "fit"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    e = doc["evaluations"]["h200|gemm"]
    assert e["mode"] == "fitted" and e["n_test"] > 0 and {"mape", "spearman", "regret"} <= set(e)
    assert doc["modes"]["tpu-v5e|gemm"] == "analytic"
    res = runner.invoke(app, ["export-templates", "--op", "gemm", "--target", "gfx942", "--out", str(tmp_path / "t"),
                              "--store", str(tmp_path / "records")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "t" / "gemm" / "gfx942" / "template.json").exists()
    assert not (tmp_path / "t" / "gemm" / "sm_90a").exists()
    res = runner.invoke(app, ["export-templates", "--op", "conv", "--out", str(tmp_path / "t")])
    assert res.exit_code != 0 and "gemm" in res.output
