"""The sweep's results: the winners per group and kernel, the speedups against the baselines,
and the config-file entries they become (``apply_attention``, ``apply_triangle``)."""

from __future__ import annotations

from kernels.tuning.attention.problems import (
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


def apply_attention(rows: list[dict], provenance: str, path=None) -> dict:
    """Write the winners into the sm90 entries of ``configs/attention.json``. The ``"narrow"``
    overrides (bias, mask, pointer loads) are pinned to what they resolved to before, so the
    untimed biased/masked kernels keep the configs that were checked for spills."""
    import json

    from kernels.nvidia import attention as A
    from kernels.triton import attention as flash

    path = path or A.CONFIG_FILE
    table = json.loads(path.read_text())
    sm90 = table.setdefault("sm90", {})
    for key, fresh in attention_entries(rows).items():
        old = sm90.get(key, {})
        old_narrow = flash.merge_config(A.heuristic(int(key)), A.heuristic_narrow(int(key)),
                                        {k: v for k, v in old.items() if k not in ("narrow", "causal")},
                                        old.get("narrow"))
        entry = {k: v for k, v in old.items() if k not in ("narrow", "causal")}
        for k in ATTENTION_KERNELS:
            if k in fresh:
                entry[k] = fresh[k]
        if fresh.get("causal"):
            entry["causal"] = fresh["causal"]
        narrow = {k: dict(old_narrow[k]) for k in ATTENTION_KERNELS}
        narrow["fwd"].update({"pre_load_v": bool(old_narrow.get("pre_load_v", False)), "warp_specialize": False,
                              "exp2_split": False})
        narrow["dkdv"]["dq_atomic"] = False  # its narrow tiles were never checked with the extra dot
        entry["narrow"] = narrow
        sm90[key] = entry
    table["_about"] = provenance
    _write_json(path, table, indent=2)
    A._tuned.cache_clear()
    return table


def apply_triangle(rows: list[dict], provenance: str, device_key: str = "H200", path=None) -> dict:
    """Write the winners of N = 384 into ``configs/triangle_attention.json`` under ``device_key``
    (head dims up to 32). ``fwd`` takes the faster of the plain and the row-sharing forward;
    ``bwd_dkdv`` gets ``DQ_ATOMIC`` when the dK/dV kernel with dQ in it beat dK/dV plus dQ
    (:func:`backward_choice`). Each section keeps its float32 overrides, and where the bf16
    config changed they are pinned to the float32 config that was in force, which the sweep did
    not measure (the knobs ROWS, DQ_ATOMIC, ROW_SPLIT off unless they were on)."""
    import json

    from kernels.nvidia import triangle_attention as T
    from kernels.triton import triangle_attention as triangle

    path = path or T.CONFIG_FILE
    table = json.loads(path.read_text())
    g = triangle_groups()[0]
    best = winners([r for r in rows if r["group"] == g.name])
    if "fwd_rows" in best and ("fwd" not in best or best["fwd_rows"]["median_ms"] < best["fwd"]["median_ms"]):
        best = {**best, "fwd": best["fwd_rows"]}
    picked = {k: plain(r["config"]) for k, r in best.items() if k in TRIANGLE_KERNELS}
    if "bwd_dkdv" in picked:
        picked["bwd_dkdv"] = backward_choice(best, picked["bwd_dkdv"], TRIANGLE_DKDV, "DQ_ATOMIC")
    entry = table.setdefault(device_key, {}).setdefault("d<=32", {})
    old_f32 = T.config_for(device_key, 32, "float32", path)
    for k, cfg in picked.items():
        f32 = dict(old_f32[k])
        for knob, off in (("ROWS", 1), ("DQ_ATOMIC", False), ("ROW_SPLIT", 1)):
            if knob in cfg:  # the float32 entry overrides key by key: say the knob even where it was off
                f32.setdefault(knob, off)
        entry[k] = {**cfg, "float32": f32}
    key = "_doc" if "_doc" in table else "_about"
    table[key] = provenance
    _write_json(path, table, indent=1)
    triangle._table.cache_clear()
    return table


def _write_json(path, table: dict, indent: int) -> None:
    import json

    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(table, indent=indent) + "\n")
    tmp.replace(path)
