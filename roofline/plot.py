"""The report's charts (PNG and SVG): hierarchical rooflines and per-op speedups.

Roofline: one roof per memory level, kernels placed by counted work. A kernel appears once
per memory level it has a byte count for, at that level's arithmetic intensity (FLOPs /
bytes at the level) and at its achieved FLOP/s; the markers of one kernel sit on one
horizontal line. Colour says the op of our kernel, marker shape the memory level; a baseline
(vendor library, framework) is a hollow grey marker with its own legend entry. Each
implementation and problem has one point, the time the report's kernels table shows. Only the fastest
kernel of each op is labelled in the plot (labels pushed apart so none overprints
another); every point carries its full description as an SVG ``<title>``, which a browser
shows on hover. Each roof's legend entry says whether the ceiling was measured or taken
from published figures.

Speedups: one horizontal bar per problem and baseline, our time over the baseline's (1.0x
marked), for one op on one device.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ceiling.microbench.records import Record
from ceiling.roofline import selection, work
from ceiling.roofline.ceilings import DeviceCeilings
from ceiling.roofline.report import dims_label, rate

LEVEL_MARKERS = {"dram": "o", "hbm": "o", "l2": "s", "smem": "^", "l1": "v", "vmem": "D", "sbuf": "D"}
# Roofs in cool colours, ops in warm ones, so a point is never read as belonging to a roof.
LEVEL_COLORS = {"dram": "#1f77b4", "hbm": "#1f77b4", "l2": "#17becf", "smem": "#2ca02c", "l1": "#7f7f7f",
                "vmem": "#1f77b4", "sbuf": "#1f77b4"}
OP_COLORS = ("#d62728", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#bcbd22", "#000000")
BASELINE_COLOR = "#7f7f7f"  # hollow grey markers: no op colour is grey



@dataclass(frozen=True)
class Placement:
    label: str  # "gemm ceiling:nvidia 4096x4096x4096"
    flops_per_s: float
    intensity: dict[str, float]  # level -> FLOP/B
    name: str  # implementation (nvidia, torch.matmul, ...)
    op: str = ""
    detail: str = ""  # the hover text: config, time, where and when it was measured
    baseline: bool = False  # a vendor library or framework, not one of our kernels


def placements(records: Iterable[Record], device_key: str) -> list[Placement]:
    """The timed kernels of one device, placed by their counted work: one point per implementation and
    problem, the very time the kernels table shows for it (``ceiling.roofline.report.problems``: each
    implementation's best under the problem's one timing method), not one per config a sweep tried."""
    from ceiling.roofline.report import problems

    out = []
    for row in problems(list(records)):
        if row["device"] != device_key:
            continue
        chosen = [(row["ours_record"], False)] if row["ours_record"] else []
        chosen += [(b, True) for b in row["baseline_records"].values()]
        for r, baseline in chosen:
            seconds = float(r.median if r.median is not None else r.value)
            w = work.count(r.op, r.shape, r.config, r.extra)
            if w is None or not w.bytes or not seconds > 0:
                continue
            dims = dims_label(r.op, r.shape)
            config = ", ".join(f"{k}={v}" for k, v in sorted(r.config.items()) if k != "dtype")
            p = r.provenance
            detail = (("baseline " if baseline else "ours ") + f"{r.op} {r.name} {dims}" + (f" [{config}]" if config else "")
                      + f": {seconds * 1e3:.4g} ms, {w.flops / seconds / 1e12:.3g} TFLOP/s; {selection.timing_label(r)}, "
                      f"{p.device} {p.timestamp[:10]} commit {(p.git_commit or '?')[:7]}")
            out.append(Placement(f"{r.op} {r.name} {row['label']}", w.flops / seconds,
                                 {lvl: w.flops / b for lvl, b in w.bytes.items() if b > 0}, r.name, r.op, detail,
                                 baseline))
    return out


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out_stem: Path, titles: dict[str, str]) -> list[Path]:
    """PNG and SVG of ``fig``; ``titles`` maps an artist's gid to its hover text (an SVG ``<title>``)."""
    import io

    plt = _pyplot()
    out_stem.parent.mkdir(parents=True, exist_ok=True)
    png, svg = out_stem.with_suffix(".png"), out_stem.with_suffix(".svg")
    fig.savefig(png)
    buffer = io.StringIO()
    with plt.rc_context({"svg.hashsalt": out_stem.name, "svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg")
    text = buffer.getvalue()
    for gid, title in titles.items():  # the group matplotlib writes for an artist with that gid
        text = re.sub(rf'(<g id="{re.escape(gid)}"[^>]*>)', lambda m: f"{m.group(1)}<title>{html.escape(title)}</title>",
                      text, count=1)
    svg.write_text(text)
    plt.close(fig)
    return [png, svg]


def _spread_labels(ax, anchors: list[tuple[float, float, str]], min_gap_px: float = 14.0) -> None:
    """Annotate each (x, y, text) beside its point: right of it where the label fits inside the axes, else
    left of it; labels on one side are nudged down so that no two overlap."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    to_px = ax.transData.transform
    box = ax.get_window_extent()
    placed: dict[bool, list[float]] = {True: [], False: []}
    for x, y, text in sorted(anchors, key=lambda a: -a[1]):
        px, py = to_px((x, y))
        label = ax.annotate(text, (x, y), xytext=(10, 0), textcoords="offset pixels", fontsize=7, va="center",
                            arrowprops=dict(arrowstyle="-", lw=0.5, color="0.3"),
                            bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="0.7", lw=0.4, alpha=0.9), zorder=5)
        left = label.get_window_extent(renderer).x1 > box.x1
        target = py
        while any(abs(target - other) < min_gap_px for other in placed[left]):
            target -= min_gap_px
        placed[left].append(target)
        label.set_position((-10 if left else 10, target - py))
        label.set_horizontalalignment("right" if left else "left")


def plot(dc: DeviceCeilings, points: list[Placement], out_stem: str | Path, dtype: str = "bfloat16",
         title: str | None = None, max_labels: int = 6) -> list[Path]:
    """Write ``<out_stem>.png`` and ``<out_stem>.svg`` (points with hover titles); returns both paths."""
    import numpy as np
    from matplotlib.lines import Line2D

    plt = _pyplot()
    out_stem = Path(out_stem)
    fig, ax = plt.subplots(figsize=(10, 5.6 if points else 4.0), dpi=110)
    ais = [a for p in points for a in p.intensity.values()]
    peak = dc.peak(dtype)
    ridge = [peak.value / c.value for c in dc.bandwidth.values()] if peak else []
    lo = min([*ais, *ridge, 1.0]) / 4
    hi = max([*ais, *ridge, 10.0]) * 12  # room right of the points for their labels
    x = np.logspace(np.log10(lo), np.log10(hi), 256)
    roofs = []
    for c in sorted(dc.compute.values(), key=lambda c: -c.value):
        if c is peak or c.name in ("float32", "tf32", dtype):
            roofs.append(ax.axhline(c.value, color="black" if c is peak else "0.45", lw=1.4 if c is peak else 0.8,
                                    ls="-" if c.source == "measured" else "--",
                                    label=f"{c.name} {rate(c.value, 'FLOP/s')} ({c.source})"))
    for level, c in dc.bandwidth.items():
        roof = np.minimum(c.value * x, peak.value) if peak else c.value * x
        roofs.append(ax.plot(x, roof, color=LEVEL_COLORS.get(level, "gray"), lw=1.6,
                             ls="-" if c.source == "measured" else "--",
                             label=f"{level.upper()} {rate(c.value, 'B/s')} ({c.source})")[0])
    ops = sorted({p.op for p in points if not p.baseline})
    color = {op: OP_COLORS[i % len(OP_COLORS)] for i, op in enumerate(ops)}
    titles: dict[str, str] = {}
    for i, p in enumerate(sorted(points, key=lambda p: -p.flops_per_s)):
        xs = sorted(p.intensity.values())
        # a baseline is hollow and grey, so it is never read as one of our kernels of its op's colour
        edge = BASELINE_COLOR if p.baseline else color[p.op]
        ax.plot(xs, [p.flops_per_s] * len(xs), color=edge, lw=0.5, alpha=0.5, zorder=2,
                ls=":" if p.baseline else "-")
        for level, ai in p.intensity.items():
            gid = f"{out_stem.name}-point-{i}-{level}"
            if p.baseline:
                dot = ax.scatter([ai], [p.flops_per_s], marker=LEVEL_MARKERS.get(level, "x"), facecolors="none",
                                 edgecolors=BASELINE_COLOR, linewidth=0.9, s=30, zorder=3)
            else:
                dot = ax.scatter([ai], [p.flops_per_s], marker=LEVEL_MARKERS.get(level, "x"), color=color[p.op],
                                 edgecolor="black", linewidth=0.4, s=30, zorder=3)
            dot.set_gid(gid)
            titles[gid] = f"{p.detail or p.label} (at {level.upper()} intensity {ai:.3g} FLOP/B)"
    # label our fastest kernel of each op (a baseline's where the op has none of ours), at its rightmost marker
    fastest: dict[str, Placement] = {}
    for p in sorted(points, key=lambda p: (not p.baseline, p.flops_per_s)):
        fastest[p.op] = p
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    top = peak.value if peak else max((c.value * hi for c in dc.bandwidth.values()), default=1.0)
    ymax = max([top, *(p.flops_per_s for p in points)]) * 2
    ymin = max(ymax / 1e6, min([ymax / 1e3, *(p.flops_per_s / 3 for p in points)])) if points else top / 100
    ax.set_ylim(ymin, ymax)
    ax.set_xlabel("arithmetic intensity (FLOP/byte at each level)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(title or f"{dc.device}: hierarchical roofline", fontsize=10)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    levels = sorted({lvl for p in points for lvl in p.intensity})
    kernel_handles = [Line2D([], [], marker="o", ls="", color=color[op], markeredgecolor="black", markeredgewidth=0.4,
                             label=f"{op} (ours)") for op in ops]
    if any(p.baseline for p in points):
        kernel_handles.append(Line2D([], [], marker="o", ls="", markerfacecolor="none", markeredgecolor=BASELINE_COLOR,
                                     markeredgewidth=0.9, label="baselines (vendor library, framework)"))
    kernel_handles += [Line2D([], [], marker=LEVEL_MARKERS.get(lvl, "x"), ls="", color="0.7", markeredgecolor="black",
                              markeredgewidth=0.4, label=f"at {lvl.upper()} intensity") for lvl in levels]
    first = ax.legend(handles=roofs, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, title="roofs",
                      title_fontsize=7, alignment="left")
    if kernel_handles:
        ax.add_artist(first)
        ax.legend(handles=kernel_handles, loc="lower left", bbox_to_anchor=(1.01, 0.0), fontsize=7,
                  title="kernels (hover each point)", title_fontsize=7, alignment="left")
    fig.tight_layout()
    anchors = [(max(p.intensity.values()), p.flops_per_s,
                f"{p.op} {_short(p.label)}: {p.flops_per_s / 1e12:.3g} TFLOP/s")
               for p in sorted(fastest.values(), key=lambda p: -p.flops_per_s)[:max_labels]]
    _spread_labels(ax, anchors)
    return _save(fig, out_stem, titles)


def _short(label: str) -> str:
    """The problem part of a placement label ("gemm ceiling:nvidia 4096x4096x4096" -> "4096x4096x4096")."""
    parts = label.split(" ", 2)
    return parts[2] if len(parts) == 3 else label


def speedups(rows: list[dict], out_stem: str | Path, title: str) -> list[Path]:
    """Bars of our speedup over each baseline, one group per problem (``rows``: ``report.problems`` rows
    of one device and op, each with ``label`` and ``baselines`` {name: (seconds, speedup)})."""
    import numpy as np

    plt = _pyplot()
    out_stem = Path(out_stem)
    names = sorted({b for r in rows for b in r["baselines"]})
    height = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 0.32 * len(rows) * max(1, len(names)) ** 0.5), dpi=110)
    titles: dict[str, str] = {}
    y = np.arange(len(rows))
    for j, name in enumerate(names):
        values = [r["baselines"].get(name, (None, None))[1] or 0.0 for r in rows]
        bars = ax.barh(y + (j - (len(names) - 1) / 2) * height, values, height=height, label=f"over {name}",
                       color=OP_COLORS[j % len(OP_COLORS)])
        for i, (bar, r) in enumerate(zip(bars, rows)):
            seconds, speedup = r["baselines"].get(name, (None, None))
            if speedup is None:
                continue
            gid = f"{out_stem.name}-bar-{i}-{j}"
            bar.set_gid(gid)
            titles[gid] = (f"{r['label']}: ours {r['ours_s'] * 1e3:.4g} ms, {name} {seconds * 1e3:.4g} ms, "
                           f"{speedup:.2f}x; {r['method']}, {r['measured']}")
            ax.text(speedup, bar.get_y() + bar.get_height() / 2, f" {speedup:.2f}x", va="center", fontsize=7)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_yticks(y, [r["label"] for r in rows], fontsize=7)
    ax.invert_yaxis()
    right = max([1.2, *(s or 0 for r in rows for _, s in r["baselines"].values())]) * 1.18
    ax.set_xlim(0, right)
    ax.set_xlabel("speedup = baseline time / our time (> 1: ours is faster)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="x", lw=0.3, alpha=0.5)
    if names:
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return _save(fig, out_stem, titles)
