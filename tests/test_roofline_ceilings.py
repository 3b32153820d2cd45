"""Ceilings from microbenchmark records with published fallback, and the hierarchical roofline plot."""

from __future__ import annotations

import random
import xml.etree.ElementTree as ET

import pytest

from ceiling.microbench.records import Provenance, Record
from ceiling.roofline import ceilings, devices, plot, work
from tests.synthetic_records import gemm_records


def _bw(device: str, op: str, value: float, **extra) -> Record:
    return Record(kind="microbench", op=op, name="copy", metric="bandwidth", value=value, unit="B/s",
                  median=value, extra=extra, provenance=Provenance(device=device))


def test_measured_levels_override_published_and_the_rest_stay_published():
    rng = random.Random()
    hbm = rng.uniform(3.5e12, 4.0e12)
    recs = [_bw("NVIDIA H200", "hbm-bandwidth", hbm), _bw("NVIDIA H200", "hbm-bandwidth", hbm * 0.9),
            _bw("NVIDIA H200", "cache", 9.9e12, level="l2"),
            Record(kind="microbench", op="peak-flops", name="torch.matmul", metric="flops", value=7.1e14,
                   unit="FLOP/s", config={"dtype": "bfloat16"}, provenance=Provenance(device="NVIDIA H200"))]
    table = ceilings.fit(recs)
    h200 = table["h200"]
    assert h200.bandwidth["hbm"].source == "measured" and h200.bandwidth["hbm"].value == pytest.approx(hbm)
    assert h200.bandwidth["l2"].value == pytest.approx(9.9e12) and h200.bandwidth["l2"].source == "measured"
    assert h200.compute["bfloat16"].value == pytest.approx(7.1e14) and h200.compute["bfloat16"].source == "measured"
    assert h200.bandwidth["smem"].source == "published"
    assert h200.compute["float8"].source == "published"
    # every published device is present even though none of it was measured, each figure marked
    for key in ("h100-sxm", "mi300x", "tpu-v5e", "tpu-v5p", "tpu-v6e", "trn1", "trn2"):
        dc = table[key]
        assert not dc.measured()
        assert all(c.source == "published" and c.detail for c in (*dc.bandwidth.values(), *dc.compute.values()))


def test_a_host_without_published_figures_gets_only_what_was_measured():
    host_bw = _bw("cpu: x86_64", "host-memory-bandwidth", 2.1e10).model_copy(update={"kind": "host"})
    blas = Record(kind="host", op="host-blas", name="matmul-float32-peak", metric="peak-flops", value=9e11,
                  unit="FLOP/s", config={"dtype": "float32"}, provenance=Provenance(device="cpu: x86_64"))
    table = ceilings.fit([host_bw, blas], include_published=False)
    (host,) = table.values()
    assert host.key is None and set(host.bandwidth) == {"dram"} and set(host.compute) == {"float32"}


def test_device_names_and_levels_are_recognised():
    assert devices.match("NVIDIA H100 80GB HBM3").key == "h100-sxm"
    assert devices.match("AMD Instinct MI300X").key == "mi300x"
    assert devices.match("target gfx942").key == "mi300x"
    assert devices.match("Intel Xeon") is None
    assert ceilings.level_of(_bw("x", "lds-bandwidth", 1.0)) == "smem"
    assert ceilings.level_of(_bw("x", "l2-bandwidth", 1.0)) == "l2"
    assert ceilings.level_of(_bw("x", "smem-bandwidth", 1.0)) == "smem"
    wgmma = Record(kind="microbench", op="tensor-core", name="wgmma-m64n256k16-bf16-f32", metric="flops", value=1.0,
                   unit="FLOP/s", provenance=Provenance(device="NVIDIA H200"))
    assert ceilings.dtype_of(wgmma) == "bfloat16"
    assert ceilings.dtype_of(wgmma.model_copy(update={"op": "fp32-fma", "name": "ffma-8-chains"})) == "float32"


def test_gemm_work_counts_levels_from_the_tiling():
    w = work.gemm({"m": 1000, "n": 3000, "k": 512}, {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, "bfloat16")
    assert w.flops == 2 * 1000 * 3000 * 512
    assert w.bytes["hbm"] == 2 * (1000 * 512 + 512 * 3000 + 1000 * 3000)
    tiles = 8 * 12  # ceil(1000/128) * ceil(3000/256)
    assert w.bytes["l2"] == 2 * tiles * (128 * 512 + 512 * 256) + 2 * 1000 * 3000
    assert w.intensity("hbm") > w.intensity("l2") > w.intensity("smem")


def test_roofline_plot_places_kernels_and_writes_png_and_svg(tmp_path):
    recs = gemm_records(shapes=[{"M": 4096, "N": 4096, "K": 4096}], per_shape=6, seed=random.randrange(1000))
    dc = ceilings.fit(recs)["h200"]
    points = plot.placements(recs, "h200")
    # one point per implementation and problem: the best of the six configs a sweep tried
    (best,) = points
    assert set(best.intensity) == {"hbm", "l2", "smem"}
    fastest = min(recs, key=lambda r: r.median)
    assert best.flops_per_s == pytest.approx(2 * 4096**3 / fastest.median)
    png, svg = plot.plot(dc, points, tmp_path / "h200")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = svg.read_text()
    ET.fromstring(text)  # well-formed
    assert "published" in text and "HBM" in text
    assert text.count("<title>") == 3 and "gemm nvidia 4096x4096x4096 [BLOCK_K=" in text  # a hover per marker


def test_roofline_labels_do_not_overprint_each_other():
    """Labels of points that sit on top of each other are pushed apart (and kept inside the axes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(1, 1e4)
    ax.set_ylim(1e12, 1e15)
    anchors = [(2000.0, 7.0e14 * (1 - 0.01 * i), f"op{i} 4096x4096x4096: {700 - i} TFLOP/s") for i in range(5)]
    anchors.append((3.0, 5e14, "gemm B1 S16384 H16 D128: 409 TFLOP/s"))
    plot._spread_labels(ax, anchors)
    renderer = fig.canvas.get_renderer()
    from matplotlib.text import Text

    boxes = [Text.get_window_extent(t, renderer) for t in ax.texts]  # the labels, without their leader lines
    assert len(boxes) == len(anchors)
    for i, a in enumerate(boxes):
        assert ax.get_window_extent().x0 - 1 <= a.x0 and a.x1 <= ax.get_window_extent().x1 + 1
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), (a, b)
    plt.close(fig)
