"""The device sweep of the Gluon Hopper attention, ``python -m ceiling.tuning.attention.gluon --out DIR
--budget-s 150 [--apply]``: every statically sound Gluon config checked against float64 and timed on
this GPU next to the Triton kernels, and written into this GPU model's table (``--apply``) only where
it wins. The steps are in ``docs/tuning.md``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import json
import math
import subprocess
import sys
import time
from pathlib import Path

from ceiling import spaces, tables
from ceiling.nvidia.gluon import attention as gluon
from ceiling.tuning import space as candidate_filter

FAMILY = "attention_gluon"

# (head dim, (batch, seq, heads) timed, (batch, seq, heads) checked)
GROUPS = [(128, (4, 4096, 16), (1, 700, 4)), (64, (4, 4096, 32), (1, 700, 4))]


def candidates(kernel: str, head_dim: int) -> list[dict]:
    """The statically checked candidates of ``kernel`` at ``head_dim``, nearest the shipped config
    first: the shipped one, then those that change one knob (exp2_split, pingpong, ...), then two,
    and so on; a budget cut keeps the informative ones."""
    shipped = gluon.shipped().get(head_dim, {}).get(kernel) or {}
    found = [{k: v for k, v in c.items() if k != "static"}
             for c in candidate_filter.candidates(FAMILY, str(head_dim), kernel)]
    return sorted(found, key=lambda c: sum(c.get(k) != v for k, v in shipped.items()))


def sound_candidates(head_dims) -> dict[tuple, list[dict]]:
    """(kernel, head dim, causal) -> the candidates to time, in priority order, where the table
    has a config of that kernel at that head dim."""
    table = gluon.shipped()
    return {(kernel, d, causal): candidates(kernel, d) for d in head_dims for causal in (False, True)
            for kernel in ("fwd", "bwd") if kernel in table.get(d, {})}


def _inputs(b, s, h, d, seed):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(b, s, h, d, device="cuda", generator=g).to(torch.bfloat16) for _ in range(4)]


def _correct(config: dict, b, s, h, d, causal) -> tuple[bool, float]:
    """Whether the implementation ``config`` runs meets the error-ratio rule at one shape."""
    import torch

    from ceiling.attention import reference

    q, k, v, do = _inputs(b, s, h, d, seed=1)
    scale = 1.0 / math.sqrt(d)
    run, _, _ = _implementation(config, causal, q, k, v)
    ours = run(q, k, v, do)
    ex_out, ex_lse = reference.attention_fwd(q, k, v, None, None, causal, scale, compute_dtype=torch.float64)
    ex = (ex_out, *reference.attention_bwd(do, q, k, v, ex_out, ex_lse, None, None, causal, scale, False,
                                          compute_dtype=torch.float64)[:3])
    lp_out, _ = reference.attention_fwd(q, k, v, None, None, causal, scale, compute_dtype=torch.bfloat16)
    lp = (lp_out, *reference.attention_bwd(do, q, k, v, lp_out, None, None, None, causal, scale, False,
                                          compute_dtype=torch.bfloat16)[:3])
    worst = 0.0
    for a, f, r in zip(ours, lp, ex):
        if a is None or not torch.isfinite(a).all():
            return False, math.inf
        err = (a.double() - r).abs().max().item()
        bound = 2 * (f.double() - r).abs().max().item() + 2e-3 * max(1.0, r.abs().max().item())
        worst = max(worst, err / bound)
    return worst <= 1.0, worst


def _implementation(config: dict, causal: bool, q, k, v):
    """(run, fwd, bwd) for inputs shaped like ``q``, ``k``, ``v``: the launchers of the
    implementation the nvidia backend chooses under ``config`` (the Triton or the Gluon kernels),
    with the config it resolves, decided once: ``run(q, k, v, do) -> (out, dq, dk, dv)``,
    ``fwd(q, k, v) -> (out, lse)``, ``bwd(do, q, k, v, out, lse) -> (dq, dk, dv, None)``."""
    from ceiling.attention.op import ATTENTION
    from ceiling.attention.spec import check

    call = ATTENTION.select(check(q, k, v, causal=causal, backend="nvidia"), "nvidia", config)
    forward, backward = call.forward.implementation.load(), call.backward.implementation.load()

    def fwd(q, k, v):
        return forward.forward(call.problem, call.forward.config, q, k, v, None, None)

    def bwd(do, q, k, v, out, lse):
        saved = {"q": q, "k": k, "v": v, "bias": None, "mask": None, "out": out, "lse": lse}
        return backward.backward(call.problem, call.backward.config, saved, {"out": do}, {"bias": False})

    def run(q, k, v, do):
        out, lse = fwd(q, k, v)
        dq, dk, dv, _ = bwd(do, q, k, v, out, lse)
        return out, dq, dk, dv

    return run, fwd, bwd


def _time(config: dict, shape, causal: bool, rep_ms: int) -> dict:
    from ceiling.timers import time_graph

    b, s, h = shape[0], shape[1], shape[2]
    q, k, v, do = _inputs(b, s, h, shape[3], seed=0)
    _, fwd, bwd = _implementation(config, causal, q, k, v)
    out, lse = fwd(q, k, v)
    f = time_graph(lambda: fwd(q, k, v), rep_ms)
    g = time_graph(lambda: bwd(do, q, k, v, out, lse), rep_ms)
    flops = 4.0 * b * h * s * s * shape[3] * (0.5 if causal else 1.0)
    return {"fwd_ms": f[0], "fwd_p20_ms": f[1], "fwd_p80_ms": f[2], "fwd_tflops": flops / f[0] / 1e9,
            "bwd_ms": g[0], "bwd_p20_ms": g[1], "bwd_p80_ms": g[2], "bwd_tflops": 2.5 * flops / g[0] / 1e9}


def sweep(out: Path, budget_s: float, rep_ms: int) -> list[dict]:
    start = time.monotonic()
    sound = sound_candidates([d for d, _, _ in GROUPS])
    print(f"{sum(map(len, sound.values()))} statically checked candidates "
          f"({candidate_filter.candidates_file(FAMILY).name})", flush=True)
    rows: list[dict] = []
    groups = list(itertools.product(GROUPS, (False, True)))
    first = time.monotonic()
    for index, ((d, timed, checked), causal) in enumerate(groups):
        # Each group gets an equal share of what the static check left, unused time passing on.
        deadline = first + (index + 1) * (budget_s - (first - start)) / len(groups)
        shape = (*timed, d)
        base = {"head_dim": d, "causal": causal, "shape": list(shape)}
        triton_cfg = {"implementation": "triton"}
        ok, ratio = _correct(triton_cfg, *checked, d, causal)
        rows.append({**base, "impl": "triton", "config": None, "correct": ok, "error_ratio": ratio,
                     **_time(triton_cfg, shape, causal, rep_ms)})
        print(json.dumps(rows[-1]), flush=True)
        pairs = list(itertools.zip_longest(sound.get(("fwd", d, causal), []), sound.get(("bwd", d, causal), [])))
        for fwd_knobs, bwd_knobs in pairs:
            if time.monotonic() > deadline:
                print(f"d={d} causal={causal}: its share of the {budget_s:.0f} s budget is spent", flush=True)
                break
            tiles = {k: v for k, v in (("fwd", fwd_knobs), ("bwd", bwd_knobs)) if v}
            cfg = {"implementation": "gluon", "gluon": tiles}
            try:
                ok, ratio = _correct(cfg, *checked, d, causal)
                row = {**base, "impl": "gluon", "config": tiles, "correct": ok, "error_ratio": ratio}
                if ok:
                    row.update(_time(cfg, shape, causal, rep_ms))
            except Exception as exc:  # noqa: BLE001 - a failing candidate is a row, not the end of the sweep
                row = {**base, "impl": "gluon", "config": tiles, "correct": False,
                       "error": f"{type(exc).__name__}: {exc}"[:400]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    (out / "gluon-attention-rows.json").write_text(json.dumps(rows, indent=1))
    return rows


def winners(rows: list[dict]) -> list[dict]:
    """Per (head dim, causal, direction): the fastest correct Gluon knobs, when faster than Triton."""
    out = []
    for (d, causal), group in itertools.groupby(sorted(rows, key=lambda r: (r["head_dim"], r["causal"])),
                                                key=lambda r: (r["head_dim"], r["causal"])):
        group = list(group)
        triton = next((r for r in group if r["impl"] == "triton" and r.get("correct")), None)
        if triton is None:
            continue
        for direction in ("fwd", "bwd"):
            timed = [r for r in group if r["impl"] == "gluon" and r.get("correct") and f"{direction}_ms" in r
                     and direction in r["config"]]
            if not timed:
                continue
            best = min(timed, key=lambda r: r[f"{direction}_ms"])
            if best[f"{direction}_ms"] < triton[f"{direction}_ms"]:
                out.append({"head_dim": d, "causal": causal, "direction": direction,
                            "knobs": best["config"][direction], "ms": best[f"{direction}_ms"],
                            "triton_ms": triton[f"{direction}_ms"], "error_ratio": best["error_ratio"]})
    return out


def _provenance() -> dict:
    """Where and with what this run measured: the table entries' ``measured``."""
    import torch
    import triton

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        commit = ""
    return {"device": torch.cuda.get_device_name(), "date": _dt.date.today().isoformat(),
            "git_commit": commit or "unknown", "triton": triton.__version__, "torch": torch.__version__}


ABOUT = ("Gluon Hopper attention entries measured on this GPU model by the device sweep "
         "(python -m ceiling.tuning.attention.gluon --apply): per head dim, causality and direction where the "
         "fastest correct Gluon config beat the Triton kernels, its knobs, and an entry with \"default\": true that "
         "makes the Gluon kernels the default for those problems.")


def apply(wins: list[dict]) -> dict:
    """Write ``wins`` into this GPU model's Gluon table: per win, its knobs for the head dim,
    causality and direction, and the entry that makes the Gluon kernels the default there, each
    with the run's provenance (a win replaces the entries of an earlier run for the same problem
    and direction). Returns the table written."""
    prov = _provenance()
    device = tables.model("nvidia", prov["device"])
    path = tables.path("nvidia", device, FAMILY)
    table = tables.read(path) if path.exists() else {"family": FAMILY, "device": device, "about": ABOUT, "entries": []}
    entries = list(table["entries"])
    for w in wins:
        direction = w["direction"]
        spaces.check(FAMILY, candidate_filter.TARGET, {direction: w["knobs"]},
                     {"head_dim": w["head_dim"], "dtype_bytes": 2})
        problem = f"head_dim == {w['head_dim']} and {'' if w['causal'] else 'not '}causal"
        default = f"{problem} and direction == '{direction}'"
        measured = {**prov, "median_ms": round(w["ms"], 4), "triton_ms": round(w["triton_ms"], 4),
                    "provenance": (f"{prov['date']} {prov['device']} triton {prov['triton']} commit "
                                   f"{prov['git_commit']}: {w['ms']:.3f} ms vs Triton {w['triton_ms']:.3f} ms at "
                                   f"S=4096, error ratio {w['error_ratio']:.2f} of the bound")}
        entries = [e for e in entries if e.get("when") != default
                   and not (e.get("when") == problem and list(e.get("config", {})) == [direction])]
        entries += [{"when": problem, "config": {direction: w["knobs"]}, "source": "measured", "measured": measured},
                    {"when": default, "default": True, "source": "measured", "measured": measured}]
    table = {**table, "entries": entries}
    tables.write(path, table)
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ceiling.tuning.attention.gluon", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=150.0)
    parser.add_argument("--rep-ms", type=int, default=10)
    parser.add_argument("--apply", action="store_true", help="write the winners into this GPU model's Gluon table")
    opts = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("the Gluon sweep needs a Hopper GPU", file=sys.stderr)
        return 2
    opts.out.mkdir(parents=True, exist_ok=True)
    rows = sweep(opts.out, opts.budget_s, opts.rep_ms)
    wins = winners(rows)
    (opts.out / "gluon-attention-winners.json").write_text(json.dumps(wins, indent=1))
    for w in wins:
        print(f"winner d={w['head_dim']} causal={w['causal']} {w['direction']}: {w['knobs']} {w['ms']:.3f} ms "
              f"(Triton {w['triton_ms']:.3f} ms)")
    if not wins:
        print("no Gluon config beat the Triton kernels: nothing to apply")
    if opts.apply and wins:
        table = apply(wins)
        print(f"applied {len(wins)} winners to {tables.path('nvidia', table['device'], FAMILY)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
