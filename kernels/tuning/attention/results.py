"""The sweep's results: the winners per group and kernel, the speedups against the baselines,
and the table entries they become (``apply_attention``, ``apply_triangle``)."""

from __future__ import annotations

from ceiling.tuning.attention.problems import (
    ATTENTION_KERNELS,
    TRIANGLE_KERNELS,
    attention_groups,
    plain,
    same_config,
    triangle_groups,
)

def winners(rows: list[dict]) -> dict:
    """kernel -> the fastest checked, timed row of our kernels among ``rows`` (one group)."""
    best: dict = {}
    for r in rows:
        if r.get("impl") != "ceiling.nvidia" or "median_ms" not in r:
            continue
        if r["kernel"] not in best or r["median_ms"] < best[r["kernel"]]["median_ms"]:
            best[r["kernel"]] = r
    return best


def backward_choice(best: dict, dkdv: dict, kernels=("dkdv", "dq", "dkdv_dq"), knob: str = "dq_atomic") -> dict:
    """The dK/dV config to ship: the fastest ``dkdv_dq`` (dQ accumulated in the dK/dV kernel)
    when it beats the fastest dkdv plus the fastest dq, else ``dkdv``; ``knob`` (``dq_atomic``)
    always set, so a causal override cannot inherit the other choice's. ``kernels`` and ``knob``:
    the sweep kernels' names and the config key (triangle attention's ``bwd_dkdv``, ``bwd_dq``,
    ``bwd_dkdv_dq`` and ``DQ_ATOMIC``)."""
    dkdv_k, dq_k, fused_k = kernels
    pair = [best[k]["median_ms"] for k in (dkdv_k, dq_k) if k in best]
    if fused_k in best and len(pair) == 2 and best[fused_k]["median_ms"] < sum(pair):
        return {**plain(best[fused_k]["config"]), knob: True}
    return {**plain(dkdv), knob: False}


TRIANGLE_DKDV = ("bwd_dkdv", "bwd_dq", "bwd_dkdv_dq")


def winners_by_group(rows: list[dict]) -> dict:
    groups: dict = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    return {name: winners(rs) for name, rs in groups.items()}


def speedups(rows: list[dict]) -> list[dict]:
    """Per group and direction: shipped, tuned and baseline milliseconds."""
    out = []
    for name, rs in _by_group(rows).items():
        best = winners(rs)
        base = {r["kernel"]: r for r in rs if r.get("impl") in ("sdpa", "torch-eager") and "median_ms" in r}
        shipped_rows = {r["kernel"]: r for r in rs if r.get("shipped") and "median_ms" in r}
        for k, r in best.items():
            ref = base.get("fwd") if k in ("fwd", "fwd_rows") else None
            out.append(dict(group=name, kernel=k, tuned_ms=r["median_ms"],
                            shipped_ms=shipped_rows.get(k, {}).get("median_ms"),
                            baseline=ref and ref["impl"], baseline_ms=ref and ref["median_ms"], tflops=r.get("tflops"),
                            config=r["config"]))
        whole = {r["impl"]: r for r in rs if r["kernel"] == "bwd" and "median_ms" in r}
        ref = base.get("bwd")
        for label in ("ceiling.nvidia-shipped", "ceiling.nvidia-tuned"):
            if label in whole:
                out.append(dict(group=name, kernel=f"bwd ({label.split('-')[-1]})", tuned_ms=whole[label]["median_ms"],
                                shipped_ms=None, baseline=ref and ref["impl"], baseline_ms=ref and ref["median_ms"],
                                tflops=whole[label].get("tflops"), config=whole[label]["config"]))
    return out


def _by_group(rows):
    groups: dict = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    return groups


def attention_entries(rows: list[dict]) -> dict:
    """{padded head dim: {"fwd": ..., "dkdv": ..., "dq": ..., "causal": {...}}} from the winners.
    A causal winner that equals the non-causal one is not repeated."""
    entries: dict = {}
    for g in attention_groups():
        best = winners([r for r in rows if r["group"] == g.name])
        entry = entries.setdefault(g.key, {})
        picked = {k: r["config"] for k, r in best.items() if k in ATTENTION_KERNELS}
        if "dkdv" in picked:
            picked["dkdv"] = backward_choice(best, picked["dkdv"])
        for k, cfg in picked.items():
            if g.causal:
                if not same_config(cfg, entry.get(k, {})):
                    entry.setdefault("causal", {})[k] = cfg
            else:
                entry[k] = cfg
    return entries


def apply_attention(rows: list[dict], about: str, measured: dict) -> dict:
    """Write the winners into the Hopper table (``tables/sm_90a/attention.json``) and return it.

    Per padded head dim that was timed, after the table's entry for it: an entry with the winning
    kernels and one for causal attention where its winners differ (replacing an earlier run's),
    each ``measured`` (``measured``: the device, date, commit, ... of this run). The ``narrow``
    entry (a bias or mask tile, or pointer loads: kernels the sweep does not time) is pinned to
    what those problems resolved to before, the tiles checked for spills, with the kernel switches
    off. ``about`` becomes the table's description."""
    from ceiling import tables
    from ceiling.attention.op import ATTENTION
    from ceiling.attention.spec import shipped_problem
    from ceiling.nvidia.attention_specs import H200
    from ceiling.op import resolve_config

    path = tables.path("nvidia", "sm_90a", "attention")
    table = tables.read(path)
    entries = list(table["entries"])
    impl = ATTENTION.implementation("nvidia")
    for key, fresh in attention_entries(rows).items():
        base = f"head_dim_pad == {key}"
        before = resolve_config(shipped_problem(int(key), "bfloat16", causal=False, biased=True, **H200), impl, None)
        narrow = {k: dict(before[k]) for k in ATTENTION_KERNELS}
        narrow["fwd"].update(pre_load_v=bool(narrow["fwd"].get("pre_load_v", False)), warp_specialize=False,
                             exp2_split=False)
        narrow["dkdv"]["dq_atomic"] = False  # its narrow tiles were never checked with the extra dot
        causal, narrowed = f"{base} and causal", f"{base} and narrow"
        timed = [{"when": base, "config": {k: fresh[k] for k in ATTENTION_KERNELS if k in fresh},
                  "source": "measured", "measured": measured}]
        if fresh.get("causal"):
            timed.append({"when": causal, "config": fresh["causal"], "source": "measured", "measured": measured})
        # an earlier run's entries give way; a causal entry this run did not find is dropped
        entries = [e for e in entries if e.get("when") != causal
                   and not (e.get("when") == base and e.get("source") == "measured")]
        at = max((i for i, e in enumerate(entries) if e.get("when") == base), default=len(entries) - 1) + 1
        entries[at:at] = timed  # after the head dim's own entry, before its narrow ones
        pinned = {"when": narrowed, "config": narrow, "source": "prior",
                  "why": f"the tiles these problems ran with before the sweep of {measured['date']}, which did not "
                         "time them: checked for spills on sm_90a"}
        old = [i for i, e in enumerate(entries) if e.get("when") == narrowed]
        if old:
            entries[old[0]] = pinned
        else:
            entries.insert(at + len(timed), pinned)
    table = {**table, "about": about, "entries": entries}
    tables.write(path, table)
    return table


def apply_triangle(rows: list[dict], provenance: str, measured: dict | None = None, device_key: str = "H200") -> dict:
    """Write the winners of N = 384 into the ``device_key`` table of triangle attention
    (``kernels/nvidia/tables/H200/triangle_attention.json``) for head dims up to 32, with
    ``provenance`` and ``measured`` (device, date, commit). ``fwd`` takes the faster of the plain
    and the row-sharing forward; ``bwd_dkdv`` gets ``DQ_ATOMIC`` when the dK/dV kernel with dQ in
    it beat dK/dV plus dQ (:func:`backward_choice`). The float32 entry of each written kernel is
    pinned to the float32 config that was in force, which the sweep did not measure (the knobs
    ROWS, DQ_ATOMIC, ROW_SPLIT off unless they were on). Returns the written table."""
    from ceiling import tables
    from ceiling.tuning.attention.problems import triangle_table

    g = triangle_groups()[0]
    best = winners([r for r in rows if r["group"] == g.name])
    if "fwd_rows" in best and ("fwd" not in best or best["fwd_rows"]["median_ms"] < best["fwd"]["median_ms"]):
        best = {**best, "fwd": best["fwd_rows"]}
    picked = {k: plain(r["config"]) for k, r in best.items() if k in TRIANGLE_KERNELS}
    if "bwd_dkdv" in picked:
        picked["bwd_dkdv"] = backward_choice(best, picked["bwd_dkdv"], TRIANGLE_DKDV, "DQ_ATOMIC")
    old_f32 = triangle_table("32", "float32", gpu=device_key)
    f32 = {}
    for k, cfg in picked.items():
        f32[k] = dict(old_f32[k])
        for knob, off in (("ROWS", 1), ("DQ_ATOMIC", False), ("ROW_SPLIT", 1)):
            if knob in cfg:  # the float32 entry overrides key by key: say the knob even where it was off
                f32[k].setdefault(knob, off)
    path = tables.path("nvidia", device_key, "triangle_attention")
    table = tables.read(path) if path.exists() else {
        "family": "triangle_attention", "device": device_key,
        "about": f"The {device_key}'s triangle-attention tiles, merged over the sm_90a entries.", "entries": []}
    written = {"head_dim <= 32": {"config": picked, "source": "measured", "why": provenance},
               "head_dim <= 32 and dtype == 'float32'": {
                   "config": f32, "source": "derived",
                   "why": "the float32 configs in force before the sweep, which timed 16-bit inputs only"}}
    if measured:
        written["head_dim <= 32"]["measured"] = measured
    entries = list(table["entries"])
    for when, entry in written.items():
        at = next((i for i, e in enumerate(entries) if e.get("when") == when), None)
        if at is None:
            entries.append({"when": when, **entry})
        else:  # the kernels not written keep their sections
            entries[at] = {"when": when, **entry, "config": {**entries[at]["config"], **entry["config"]}}
    table = {**table, "entries": entries}
    tables.write(path, table)
    return table


def _write_json(path, table: dict, indent: int) -> None:
    import json

    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(table, indent=indent) + "\n")
    tmp.replace(path)
