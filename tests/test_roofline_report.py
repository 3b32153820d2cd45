"""The report folder of a run, checked in a real headless browser; and the fit / export CLI."""

from __future__ import annotations

import html
import json
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ceiling.microbench import records as store
from ceiling.microbench.records import Provenance, Record
from ceiling.roofline import analysis, report
from ceiling.roofline.store import EMBEDDED
from ceiling.roofline.cli import app
from tests.synthetic_records import gemm_records

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files", "--hide-scrollbars",
                 "--virtual-time-budget=8000"]
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no headless browser: apt-get install -y chromium")


def _run_records() -> tuple[list[Record], dict[int, str]]:
    """What a run on an H200 would leave: kernel timings with a vendor baseline, host and GPU microbenchmarks;
    the host measurement taken "here", the rest read from records."""
    recs = gemm_records(shapes=[{"M": 4096, "N": 4096, "K": 4096}, {"M": 2048, "N": 6144, "K": 4096},
                                {"M": 8192, "N": 8192, "K": 2048}, {"M": 1024, "N": 1024, "K": 8192}],
                        per_shape=25, seed=random.randrange(1000))
    prov = Provenance(device="NVIDIA H200", git_commit="abc1234def", timestamp="2026-11-30T01:00:00+00:00")
    recs.append(Record(kind="kernel", op="gemm", name="torch.matmul", backend="reference", metric="time",
                       value=2.1e-4, median=2.1e-4, unit="s", shape={"m": 4096, "n": 4096, "k": 4096},
                       config={"dtype": "bfloat16"}, method="synthetic", extra={"role": "baseline"}, provenance=prov))
    recs.append(Record(kind="microbench", op="hbm-bandwidth", name="torch.copy_", metric="bandwidth",
                       value=3.9e12, unit="B/s", provenance=prov))
    host = Record(kind="host", op="host-memory-bandwidth", name="read", metric="bandwidth", value=1.8e10,
                  unit="B/s", provenance=Provenance(device="cpu: x86_64", host="this-box"))
    recs.append(host)
    origins = {id(r): "committed records" for r in recs} | {id(host): "here"}
    return recs, origins


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    recs, origins = _run_records()
    messages = []
    data = analysis.analyze(recs, out, families=["gemm"], targets=["sm_90a"], progress=messages.append,
                            origins=origins)
    data.hardware = {"gpu": "none", "cpu cores": 2}
    data.steps.insert(0, report.Step("microbenchmarks", "skipped", 0.0, "no GPU | no driver"))
    data.records.append(Record(kind="static", op="gemm", name="gemm_128x256x64_g16_s3_w8_sub_ws_splitk4_bfloat16",
                               metric="registers", value=168.0, unit="count", backend="sm_90a",
                               config={"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 16, "num_stages": 3,
                                       "num_warps": 8, "EPILOGUE_SUBTILE": True, "WARP_SPECIALIZE": True,
                                       "SPLIT_K": 4},
                               method="static", provenance=Provenance(device="target sm_90a (compiled on the host)")))
    paths = report.write(data, out)
    return out, paths, data, messages


def test_analysis_fits_plots_and_exports(run_folder):
    out, paths, data, messages = run_folder
    assert any("plotting" in m for m in messages) and any("speedups" in m for m in messages)
    devices = {p["device"] for p in data.plots}
    assert {"NVIDIA H200", "cpu: x86_64"} <= devices
    assert all(p["png"].exists() and p["svg"].exists() for p in [*data.plots, *data.charts])
    assert [(c["device"], c["op"]) for c in data.charts] == [("h200", "gemm")]
    assert data.model_modes["h200|gemm"] == "fitted" and data.model_modes["mi300x|gemm"] == "analytic"
    assert (out / "fit" / "model.json").exists() and (out / "templates" / "gemm" / "sm_90a" / "template.json").exists()
    md = paths["markdown"].read_text()
    row = next(line for line in md.splitlines() if line.startswith("| gemm | 4096x4096x4096 | bf16 | nvidia |"))
    assert "torch.matmul" in row and "synthetic" in row and "measured on NVIDIA H200, " in row
    assert row.endswith("(committed records) |")
    assert "analytic" in md


def test_every_figure_says_where_it_comes_from(run_folder):
    _, paths, data, _ = run_folder
    by = {(c["device"], c["name"]): c["provenance"] for c in data.ceilings}
    assert by[("cpu: x86_64", "dram")].startswith("measured here (this-box, ")
    assert by[("NVIDIA H200", "hbm")] == "measured on NVIDIA H200, 2026-11-30, commit abc1234 (committed records)"
    assert by[("NVIDIA H200", "l2")].startswith("published: ")  # never measured: the datasheet, with its source
    assert all(c["provenance"].startswith(("measured here", "measured on", "published: ")) for c in data.ceilings)
    assert all(c["caption"] for c in [*data.plots, *data.charts])
    assert "measured on NVIDIA H200" in next(c["caption"] for c in data.charts)


def test_summary_markdown_escapes_pipes_in_cells(run_folder):
    _, paths, _, _ = run_folder
    lines = paths["markdown"].read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| step | status |"))
    row = next(line for line in lines[header:] if line.startswith("| microbenchmarks |"))
    assert "no GPU \\| no driver" in row
    cells = re.split(r"(?<!\\)\|", row)[1:-1]  # split on unescaped pipes only
    assert len(cells) == lines[header].count("|") - 1 == 4


def _dom(url: str, width: int = 1280) -> str:
    result = subprocess.run([CHROMIUM, *BROWSER_FLAGS, f"--window-size={width},2000", "--dump-dom", url],
                            capture_output=True, text=True, timeout=180)
    return result.stdout


@needs_chromium
def test_report_renders_in_a_headless_browser(run_folder):
    out, paths, data, _ = run_folder
    dom = _dom(paths["html"].resolve().as_uri())
    assert '<h1 id="title">ceiling run</h1>' in dom
    for table in ("hardware-table", "steps-table", "ceilings-table", "kernels-table", "model-table", "static-table",
                  "templates-table"):
        assert f'id="{table}"' in dom
    # every chart is inlined as SVG, and every point and bar carries its description for the hover
    figures = re.findall(r'<figure class="(roofline-plot|speedup-chart)".*?</figure>', dom, re.S)
    assert len(figures) == len(data.plots) + len(data.charts) >= 3
    svgs = re.findall(r"<svg.*?</svg>", dom, re.S)
    assert len(svgs) == len(figures)
    h200 = next(svg for svg in svgs if "NVIDIA H200: hierarchical roofline" in svg)
    hovers = re.findall(r"<title>([^<]*)</title>", h200)
    assert any("gemm" in t and "TFLOP/s" in t and "commit abc1234" in t for t in hovers), hovers[:3]
    # the kernel table has our GEMM against torch.matmul with a speedup, and where it was measured
    row = re.search(r'<tr><td data-label="op"[^>]*>gemm</td><td[^>]*>4096x4096x4096</td>.*?</tr>', dom, re.S)
    assert row and "torch.matmul" in row.group(0) and "(committed records)" in row.group(0)
    # the static table abbreviates the config and keeps the full key on hover
    static = re.search(r'<table id="static-table">.*?</table>', dom, re.S).group(0)
    assert 'title="BLOCK_K=64,BLOCK_M=128,BLOCK_N=256,' in static and ">128x256x64 w8 s3 g16 splitk4 sub ws<" in static
    shot = out / "page.png"
    subprocess.run([CHROMIUM, *BROWSER_FLAGS, "--window-size=1280,2000", f"--screenshot={shot}",
                    paths["html"].resolve().as_uri()], capture_output=True, timeout=180)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


# Loads a page into a frame of the given width and records what sticks out: the page itself
# (scrollWidth beyond clientWidth) and any table, figure or paragraph wider than its container.
PROBE = """<!DOCTYPE html><html><body style="margin:0">
<iframe id="page" src="{src}" style="width:{width}px;height:3000px;border:0"></iframe>
<script>
document.getElementById("page").addEventListener("load", () => {{
  const doc = document.getElementById("page").contentDocument, root = doc.documentElement;
  const over = [...doc.querySelectorAll("table, figure, svg, p, pre, ul, h1, h2, h3")]
    .filter(e => e.scrollWidth > e.parentElement.clientWidth + 1 || e.getBoundingClientRect().right > root.clientWidth + 1)
    .map(e => (e.id || e.tagName) + " " + e.scrollWidth + " > " + e.parentElement.clientWidth);
  document.body.dataset.layout = JSON.stringify({{width: doc.defaultView.innerWidth, page: root.scrollWidth,
                                                  room: root.clientWidth, over}});
}});
</script></body></html>"""


def _layout(page, width: int) -> dict:
    probe = page.parent / f"probe-{page.stem}-{width}.html"
    probe.write_text(PROBE.format(src=page.name, width=width))
    dom = _dom(probe.resolve().as_uri(), width + 100)
    found = re.search(r'data-layout="([^"]*)"', dom)
    assert found, dom[-2000:]
    return json.loads(html.unescape(found.group(1)))


@needs_chromium
@pytest.mark.parametrize("width", [1280, 390])
def test_report_fits_the_screen_without_horizontal_scrolling(run_folder, width):
    _, paths, _, _ = run_folder
    layout = _layout(paths["html"], width)
    assert layout["width"] == width
    assert layout["page"] <= layout["room"] and not layout["over"], layout


@needs_chromium
def test_the_overflow_probe_sees_a_table_that_does_not_fit(run_folder):
    """The layout check can fail: a planted unbreakable cell makes a table wider than the page."""
    out, paths, _, _ = run_folder
    planted = paths["html"].with_name("planted.html")
    planted.write_text(paths["html"].read_text().replace(
        "</body>", '<table id="planted"><tr><td style="white-space:nowrap">' + "x" * 400 + "</td></tr></table></body>"))
    layout = _layout(planted, 1280)
    assert layout["page"] > layout["room"] and any(o.startswith("planted ") for o in layout["over"]), layout


def test_fit_and_export_commands(tmp_path, capsys):
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
    assert all(c["provenance"].startswith(("measured on", "published: ")) for c in doc["ceilings"])
    # the table's key column stays whole at 120 columns, and the ceilings say where they come from
    res = runner.invoke(app, ["fit", "--store", str(tmp_path / "records"), "--out", str(tmp_path / "fit")],
                        env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.output
    assert "h200|attention|fwd " in res.output and "h200|gemm|underfilled " in res.output
    hbm = next(line for line in res.output.splitlines() if "NVIDIA H200" in line and " hbm " in line)
    assert "measured on NVIDIA H200," in hbm  # the rest of the provenance wraps onto the next lines
    res = runner.invoke(app, ["export-templates", "--op", "gemm", "--target", "gfx942", "--out", str(tmp_path / "t"),
                              "--store", str(tmp_path / "records")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "t" / "gemm" / "gfx942" / "template.json").exists()
    assert not (tmp_path / "t" / "gemm" / "sm_90a").exists()
    res = runner.invoke(app, ["export-templates", "--op", "conv", "--out", str(tmp_path / "t")])
    assert res.exit_code != 0 and "gemm" in res.output
    # a point outside the template's space: one line naming --config, from the program's entry point
    from ceiling.roofline.cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["import-point", str(tmp_path / "t" / "gemm" / "gfx942"), "--config", '{"BLOCK_M": 3}'])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("Error: Invalid value for --config: expected a valid point of the gemm/gfx942 template"), err


def test_kernels_table_puts_the_hbm_floor_beside_memory_bound_problems():
    """A decode-sized GEMM is under the memory roof: its floor is A + B + C over the measured HBM
    bandwidth, and beside it our share of it; a 4096^3 GEMM is compute-bound and has none."""
    prov = Provenance(device="NVIDIA H200", git_commit="abc1234def", timestamp="2026-11-30T01:00:00+00:00")
    ours = random.uniform(1.2e-5, 2e-5)

    def timing(m, seconds, name="ceiling.nvidia", backend="nvidia", extra=None):
        return Record(kind="kernel", op="gemm", name=name, backend=backend, metric="time", value=seconds,
                      median=seconds, unit="s", shape={"m": m, "n": 4096, "k": 4096}, config={"dtype": "bfloat16"},
                      method="cuda-graph", extra=extra or {}, provenance=prov)

    recs = [timing(16, ours), timing(16, 1.5e-5, "torch.matmul", "reference", {"role": "baseline"}),
            timing(4096, 1.8e-4),
            Record(kind="microbench", op="hbm-bandwidth", name="torch.copy_", metric="bandwidth", value=4.0e12,
                   unit="B/s", provenance=prov)]
    rows = {r["label"]: r for r in report.problems(recs)}
    floor = 2 * (16 * 4096 + 4096 * 4096 + 16 * 4096) / 4.0e12
    assert rows["16x4096x4096"]["hbm_floor_s"] == pytest.approx(floor)
    assert rows["16x4096x4096"]["hbm_fraction"] == pytest.approx(floor / ours)
    assert rows["4096x4096x4096"]["hbm_floor_s"] is None and rows["4096x4096x4096"]["hbm_fraction"] is None
    table = report.tables(report.ReportData(records=recs))["kernels"]
    at = table.columns.index("HBM floor (of ours)")
    assert [row[at].text for row in table.rows] == [f"{report.duration(floor)} ({floor / ours:.0%})", "-"]


# ------------------------------------------------------------------ the real report of `ceiling run`

def _real_report(real_run) -> tuple[Path, str]:
    page = real_run.out / "report" / "index.html"
    return page, page.read_text()


@needs_chromium
@pytest.mark.real_report
@pytest.mark.parametrize("width", [1280, 390, 1920, 1024])
def test_the_real_report_fits_the_screen(real_run, width):
    """The page `ceiling run` writes, from the committed records, at a laptop, a phone and a desktop width:
    nothing wider than the page or than its container (the kernels table was 1294 px at 1280)."""
    page, _ = _real_report(real_run)
    layout = _layout(page, width)
    assert layout["width"] == width
    assert layout["page"] <= layout["room"] and not layout["over"], layout


@pytest.mark.real_report
def test_the_real_roofline_draws_baselines_apart_and_counts_them_apart(real_run):
    _, text = _real_report(real_run)
    svg = re.search(r'<figure class="roofline-plot".*?</figure>', text, re.S).group(0)
    assert "NVIDIA H200: hierarchical roofline" in svg
    titles = re.findall(r"<title>([^<]*)</title>", svg)
    ours = {t.split(" (at ")[0] for t in titles if t.startswith("ours ")}
    baselines = {t.split(" (at ")[0] for t in titles if t.startswith("baseline ")}
    assert ours and baselines and len(ours) + len(baselines) == len({t.split(" (at ")[0] for t in titles})
    assert any("torch.matmul" in t or "sdpa" in t for t in baselines) and not any("ceiling" in t for t in baselines)
    caption = re.search(r"<figcaption>NVIDIA H200: (.*?)</figcaption>", svg, re.S).group(1)
    assert f"{len(ours)} of our kernels and {len(baselines)} baselines" in caption, caption
    # a baseline's marker is hollow and grey: its group's path has no fill and a grey edge
    group = re.search(r"<g id=\"[^\"]*-point-\d+-\w+\">\s*<title>baseline [^<]*</title>(.*?)</g>", svg, re.S).group(1)
    assert "fill: none" in group and "#7f7f7f" in group, group[:400]
    legend = re.search(r'<g id="legend_2">.*', svg, re.S).group(0)
    assert "baselines (vendor library, framework)" in legend


@pytest.mark.real_report
def test_every_point_of_the_real_report_names_a_real_commit(real_run):
    _, text = _real_report(real_run)
    groups = re.findall(r"commits? ((?:[0-9A-Za-z]{4,40}(?:, )?)+)", text)
    cited = {c.strip() for group in groups for c in group.split(",") if c.strip()}
    assert cited and "HEAD" not in cited and all(re.fullmatch(r"[0-9a-f]{7}", c) for c in cited), cited
    assert "9adc234" in cited  # the tuning sweep whose records said "HEAD", resolved through commits.json


@pytest.mark.real_report
def test_one_figure_per_kernel_and_problem_in_the_real_report(real_run):
    """GEMM 4096^3 on the H200: the kernels table's TFLOP/s is the roofline's, and the template's best
    point (a tuning sweep's time of one config) names its method and harness beside its figure."""
    _, text = _real_report(real_run)
    row = re.search(r'<tr><td data-label="op"[^>]*>gemm</td><td[^>]*>layout NT 4096x4096x4096</td>.*?</tr>', text, re.S)
    cells = dict(re.findall(r'<td data-label="([^"]+)"[^>]*>([^<]*)</td>', row.group(0)))
    tflops, timing = cells["our TFLOP/s"], cells["timing"]
    assert "harness" in timing or "sweep" in timing, timing
    svg = re.search(r'<figure class="roofline-plot".*?</figure>', text, re.S).group(0)
    hovers = [t for t in re.findall(r"<title>([^<]*)</title>", svg)
              if t.startswith("ours gemm ") and " 4096x4096x4096 " in t.split(": ")[0]]
    assert hovers and {re.search(r"([\d.]+) TFLOP/s", t).group(1) for t in hovers} == {tflops}, (hovers, tflops)
    assert all(timing in t for t in hovers)  # the same method and harness beside the same figure
    assert f"gemm layout NT 4096x4096x4096: {tflops} TFLOP/s" in svg  # the label of the fastest GEMM
    template = json.loads((real_run.out / "report" / "templates" / "gemm" / "sm_90a" / "template.json").read_text())
    measured = [b["measured"] for b in template["best_points"] if b.get("measured")]
    assert measured and all(m["method"] and m["harness"] in ("tuning sweep", "benchmark harness") for m in measured)


@needs_chromium
@pytest.mark.real_report
def test_the_real_reports_phone_cards_say_whose_time_is_whose(real_run):
    page, _ = _real_report(real_run)
    dom = _dom(page.resolve().as_uri(), 390)
    table = re.search(r'<table id="kernels-table">.*?</table>', dom, re.S).group(0)
    for row in re.findall(r"<tr>(<td data-label.*?)</tr>", table, re.S)[:5]:
        labels = re.findall(r'data-label="([^"]+)"', row)
        assert len(labels) == len(set(labels)), labels  # no two "time:" lines on one card
        assert {"our time", "our TFLOP/s", "baseline time", "baseline TFLOP/s"} <= set(labels), labels


# ------------------------------------------------------------------ provenance names a commit

def test_every_committed_record_names_a_commit_hash():
    records = store.load(EMBEDDED)
    commits = {r.provenance.git_commit for r in records}
    assert commits and all(re.fullmatch(r"[0-9a-f]{7,40}", c) for c in commits), commits
    assert "9adc23463d1bafed4ba95e2cd5ac056db3954cbd" in commits


def test_records_refuse_a_commit_that_is_not_a_hash(tmp_path):
    import pandas as pd
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="commit hash"):
        Provenance(device="NVIDIA H200", git_commit="HEAD")
    good = Record(kind="host", op="host-blas", name="x", metric="flops", value=1.0, unit="FLOP/s",
                  provenance=Provenance(device="cpu", git_commit="abc1234"))
    bad = good.model_dump() | {"provenance": {"device": "cpu", "git_commit": "HEAD"}}
    written, refused = store.append(tmp_path / "s", [good, bad])
    assert written == 1 and "git_commit" in refused[0][1]
    # a part written before the rule, naming "HEAD": refused on load unless the store maps it to a hash
    part = next((tmp_path / "s").glob("part-*.parquet"))
    frame = pd.read_parquet(part)
    frame["prov_git_commit"] = "HEAD"
    frame.to_parquet(part, index=False)
    with pytest.raises(ValueError, match="commits.json"):
        store.load(tmp_path / "s")
    (tmp_path / "s" / "commits.json").write_text(json.dumps({"parts": {part.name: {"HEAD": "0123abc"}}}))
    assert store.load(tmp_path / "s")[0].provenance.git_commit == "0123abc"
