"""Hierarchical roofline plots (PNG and SVG): one roof per memory level, kernels placed by counted work.

A kernel appears once per memory level it has a byte count for, at that level's
arithmetic intensity (FLOPs / bytes at the level) and at its achieved FLOP/s;
the markers of one kernel sit on one horizontal line. Each roof's label says
whether the ceiling was measured here or taken from published figures.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from microbench.records import Record
from roofline import devices, work
from roofline.ceilings import DeviceCeilings

LEVEL_STYLE = {"dram": ("o", "tab:cyan"), "hbm": ("o", "tab:blue"), "l2": ("s", "tab:orange"), "smem": ("^", "tab:green"),
               "l1": ("v", "tab:red"), "vmem": ("D", "tab:purple"), "sbuf": ("D", "tab:brown")}


@dataclass(frozen=True)
class Placement:
    label: str  # "gemm nvidia 4096x4096x4096"
    flops_per_s: float
    intensity: dict[str, float]  # level -> FLOP/B
    name: str  # implementation (nvidia, torch.matmul, ...)


def placements(records: Iterable[Record], device_key: str) -> list[Placement]:
    """Every timed kernel record of one device, placed by its counted work (best time per kernel/config/shape)."""
    best: dict[tuple, tuple[float, Record]] = {}
    for r in records:
        if r.kind != "kernel" or r.metric != "time" or r.unit != "s":
            continue
        spec = devices.match(r.provenance.device)
        if (spec.key if spec else r.provenance.device) != device_key:
            continue
        seconds = float(r.median if r.median is not None else r.value)
        key = (r.op, r.name, str(sorted(r.shape.items())), str(sorted(r.config.items())))
        if seconds > 0 and (key not in best or seconds < best[key][0]):
            best[key] = (seconds, r)
    out = []
    for seconds, r in best.values():
        w = work.count(r.op, r.shape, r.config, r.extra)
        if w is None or not w.bytes:
            continue
        shape = work.normalize_shape(r.op, r.shape)
        dims = "x".join(str(shape[a]) for a in ("M", "N", "K") if a in shape) or ",".join(
            f"{k}={v}" for k, v in sorted(shape.items()) if k != "dtype")
        out.append(Placement(f"{r.op} {r.name} {dims}", w.flops / seconds,
                             {lvl: w.flops / b for lvl, b in w.bytes.items() if b > 0}, r.name))
    return out


def plot(dc: DeviceCeilings, points: list[Placement], out_stem: str | Path, dtype: str = "bfloat16",
         title: str | None = None, max_labels: int = 4) -> list[Path]:
    """Write ``<out_stem>.png`` and ``<out_stem>.svg``; returns both paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    out_stem = Path(out_stem)
    out_stem.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    ais = [a for p in points for a in p.intensity.values()]
    peak = dc.peak(dtype)
    ridge = [peak.value / c.value for c in dc.bandwidth.values()] if peak else []
    lo = min([*ais, *ridge, 1.0]) / 4
    hi = max([*ais, *ridge, 10.0]) * 4
    x = np.logspace(np.log10(lo), np.log10(hi), 256)
    for c in sorted(dc.compute.values(), key=lambda c: -c.value):
        if c is peak or c.name in ("float32", "tf32", dtype):
            style = "-" if c is peak else ":"
            ax.axhline(c.value, color="black", ls=style, lw=1.4 if c is peak else 0.8)
            ax.text(hi, c.value, f" {c.name} {c.value / 1e12:.1f} TFLOP/s ({c.source})", va="bottom", ha="right",
                    fontsize=7)
    for level, c in dc.bandwidth.items():
        marker, color = LEVEL_STYLE.get(level, ("x", "gray"))
        roof = np.minimum(c.value * x, peak.value) if peak else c.value * x
        ax.plot(x, roof, color=color, lw=1.6, ls="-" if c.source == "measured" else "--",
                label=f"{level.upper()} {c.value / 1e12:.2f} TB/s ({c.source})")
    labelled: set[str] = set()
    for p in sorted(points, key=lambda p: -p.flops_per_s):
        xs = sorted(p.intensity.values())
        ax.plot(xs, [p.flops_per_s] * len(xs), color="0.6", lw=0.6, zorder=2)
        for level, ai in p.intensity.items():
            marker, color = LEVEL_STYLE.get(level, ("x", "gray"))
            ax.scatter([ai], [p.flops_per_s], marker=marker, color=color, edgecolor="black", linewidth=0.4,
                       s=28, zorder=3)
        if p.label not in labelled and len(labelled) < max_labels:
            labelled.add(p.label)
            ax.annotate(p.label, (max(xs), p.flops_per_s), fontsize=6, xytext=(3, 0), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    top = peak.value if peak else max((c.value * hi for c in dc.bandwidth.values()), default=1.0)
    ymax = max([top, *(p.flops_per_s for p in points)]) * 2
    ymin = min([ymax / 1e5, *(p.flops_per_s / 2 for p in points)])
    ax.set_ylim(ymin, ymax)
    ax.set_xlabel("arithmetic intensity (FLOP/byte at each level)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(title or f"{dc.device}: hierarchical roofline")
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    from matplotlib.lines import Line2D

    handles, _ = ax.get_legend_handles_labels()
    handles += [Line2D([], [], marker=LEVEL_STYLE.get(lvl, ("x", "gray"))[0], ls="", color="gray",
                       label=f"kernel at {lvl.upper()} intensity") for lvl in sorted({l for p in points for l in p.intensity})]
    ax.legend(handles=handles, loc="lower right", fontsize=7)
    fig.tight_layout()
    paths = [out_stem.with_suffix(".png"), out_stem.with_suffix(".svg")]
    for path in paths:
        fig.savefig(path)
    plt.close(fig)
    return paths
