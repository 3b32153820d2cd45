"""Candidate configs for the attention and triangle-attention tuning sweeps, filtered on the CPU.

A search space is plain data (``kernels/nvidia/configs/<op>_space.json``): for each kernel a grid of values
per knob, and the rules that drop a grid point without compiling it (shared memory that cannot
fit, tile shapes the Triton tutorial's own Hopper filter drops). :func:`refresh` compiles every
remaining point for sm_90a with ``kernels.isa`` and keeps those that use tensor-core instructions
and spill nothing; a point whose SASS is byte-for-byte that of a point already kept (a knob the
compiler ignored at that shape) is dropped as a duplicate, so the device never times the same
binary twice. The survivors, the dropped points with their reason, and the Triton versions that
checked them are written back to the same file, and the device sweep (``kernels.tuning.attention``)
reads only the survivors.

    python -m kernels.tuning.space attention            # from the grid, with this Triton
    python -m kernels.tuning.space attention --recheck  # re-check the survivors only

Run it once with each Triton that matters (the device's and CI's): ``--recheck`` under a second
version keeps only what passes under both.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import time
from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parent.parent / "nvidia" / "configs"  # the sm_90a spaces sit by the tables
OPS = ("attention", "triangle_attention")
SMEM_LIMIT = 232448  # bytes of shared memory one block may use on sm_90 (227 KiB)


def space_file(op: str) -> Path:
    return CONFIG_DIR / f"{op}_space.json"


def load(op: str) -> dict:
    return json.loads(space_file(op).read_text())


def grid(knobs: dict) -> list[dict]:
    """Every combination of the knob values, in the order the JSON lists them."""
    names = list(knobs)
    return [dict(zip(names, values)) for values in itertools.product(*(knobs[n] for n in names))]


def candidates(op: str, key: str, kernel: str) -> list[dict]:
    """The statically checked candidates of ``kernel`` for ``key`` (padded head dim, or a bucket)."""
    return [dict(c) for c in load(op)["candidates"].get(key, {}).get(kernel, [])]


# ---------------------------------------------------------------------------------------------
# Rules that need no compile
# ---------------------------------------------------------------------------------------------


def _attention_smem(kernel: str, head_dim: int, c: dict) -> int:
    """Lower bound of the shared memory of one attention block (bf16 tiles, TMA path): the tiles
    that stay resident plus ``num_stages`` buffers of the streamed ones."""
    bm, bn, s = c["block_m"], c["block_n"], c["num_stages"]
    if kernel == "fwd":  # Q resident; K and V streamed
        return 2 * head_dim * (bm + s * 2 * bn)
    if kernel in ("dkdv", "dkdv_dq"):  # K, V resident; Q and dO streamed
        return 2 * head_dim * (2 * bn + s * 2 * bm)
    return 2 * head_dim * (2 * bm + s * 2 * bn)  # dq: Q, dO resident; K, V streamed


def rule_drop(op: str, kernel: str, key: str, c: dict, rules: dict) -> str | None:
    """Why ``c`` is dropped without compiling, or None."""
    if op == "attention":
        head_dim = int(key)
        if _attention_smem(kernel, head_dim, c) > SMEM_LIMIT:
            return f"needs at least {_attention_smem(kernel, head_dim, c)} B of shared memory"
        small = rules.get("eight_warps_min_tile")
        if kernel == "fwd" and small and c["num_warps"] == 8 and c["block_m"] * c["block_n"] < small:
            return f"8 warps on a forward tile under {small} elements (the tutorial's Hopper filter)"
    else:
        tile = c["BLOCK_M"] * c["BLOCK_N"] * c.get("ROWS", 1)
        if c["num_warps"] * 32 * rules.get("min_elements_per_thread", 0) > tile:
            return f"fewer than {rules['min_elements_per_thread']} score elements per thread"
        if tile > rules.get("max_tile_elements", 1 << 30):
            return f"a score tile over {rules['max_tile_elements']} elements"
    return None


# ---------------------------------------------------------------------------------------------
# The compile check
# ---------------------------------------------------------------------------------------------


def compile_spec(op: str, kernel: str, key: str, c: dict, dtype: str = "bfloat16"):
    """The ``kernels.isa.CompileSpec`` the device would compile for candidate ``c``: attention with
    TMA and causal masking (the causal kernel holds the non-causal one's code and more);
    triangle attention with a mask, bf16, head dim ``key``."""
    if op == "attention":
        from kernels.nvidia import attention as A
        from kernels.triton import attention as flash

        head_dim = int(key)
        if kernel == "dkdv_dq":  # the dK/dV kernel with dQ accumulated in it
            kernel, c = "dkdv", {**c, "dq_atomic": True}
        cfg = flash.merge_config(A.heuristic(head_dim), {kernel: c})
        return next(s for s in flash.kernel_specs(head_dim, cfg, dtype=dtype, causal=True)
                    if s.config["kernel"] == kernel)
    from kernels.triton import triangle_attention as T

    return T.kernel_spec(kernel, c, dtype, int(key), aligned=True)


def static_check(spec) -> dict:
    """Registers, spills, shared memory and tensor-core instruction count of ``spec`` on sm_90a,
    and a digest of its SASS; ``ok`` when it uses tensor cores, spills nothing and fits."""
    from kernels.isa import _resource_usage, compile_for, sass, sass_mix

    kernel = compile_for(spec, "sm_90a")
    cubin = kernel.asm["cubin"]
    text = sass(cubin)
    usage = _resource_usage(cubin)
    mix = sass_mix(text)
    facts = {
        "registers": usage.get("REG", 0),
        "spill_bytes": usage.get("LOCAL", 0) + usage.get("STACK", 0) + 4 * (mix.get("LDL", 0) + mix.get("STL", 0)),
        "shared_bytes": int(kernel.metadata.shared),
        "hgmma": mix.get("HGMMA", 0),
        "hmma": mix.get("HMMA", 0),
    }
    why = None
    if facts["hgmma"] + facts["hmma"] == 0:
        why = "no tensor-core instructions"
    elif facts["spill_bytes"]:
        why = f"spills ({facts['spill_bytes']} B)"
    elif facts["shared_bytes"] > SMEM_LIMIT:
        why = f"{facts['shared_bytes']} B of shared memory"
    digest = hashlib.sha1(text.encode() + str(facts["shared_bytes"]).encode()).hexdigest()[:16]
    return {**facts, "ok": why is None, "why": why, "sass_sha1": digest}


def refresh(op: str, recheck: bool = False, log=print, only: tuple[str, ...] | None = None) -> dict:
    """Re-derive the candidate lists of ``op`` with this Triton and write them to the space file;
    ``only`` names the kernels to re-derive (the others keep their lists)."""
    import triton

    table = load(op)
    version = triton.__version__
    rules = table.get("rules", {})
    out_candidates: dict = {k: dict(v) for k, v in table["candidates"].items()} if only else {}
    dropped: dict = table.get("dropped", {}) if recheck or only else {}
    for key, kernels in table["space"].items():
        for kernel, knobs in kernels.items():
            if only and kernel not in only:
                continue
            points = table["candidates"].get(key, {}).get(kernel, []) if recheck else grid(knobs)
            kept, seen = [], {}
            if not recheck:
                dropped.setdefault(key, {})[kernel] = []
            drops = dropped.setdefault(key, {}).setdefault(kernel, [])
            for point in points:
                c = {k: v for k, v in point.items() if k != "static"}
                why = rule_drop(op, kernel, key, c, rules)
                facts = None
                if why is None:
                    t0 = time.perf_counter()
                    try:
                        facts = static_check(compile_spec(op, kernel, key, c))
                        why = facts.pop("why")
                    except Exception as exc:  # noqa: BLE001 - a config the compiler rejects is dropped with the reason
                        why = f"compile error: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
                    log(f"{op} {key} {kernel} {c}: {why or 'ok'} ({time.perf_counter() - t0:.1f} s)")
                    if facts and why is None and not recheck:  # twins are judged by the first Triton only
                        twin = seen.get(facts["sass_sha1"])
                        if twin is not None:
                            why = f"same SASS as {twin}"
                if why is not None:
                    drops.append({"config": c, "why": why, "triton": version})
                    continue
                seen[facts["sass_sha1"]] = c
                static = point.get("static") if recheck else None  # keep the first Triton's facts
                kept.append({**c, "static": static or {k: facts[k] for k in ("registers", "shared_bytes", "hgmma", "hmma")}})
            out_candidates.setdefault(key, {})[kernel] = kept
    table["candidates"] = out_candidates
    table["dropped"] = dropped
    checked = [v for v in table.get("checked_with", []) if recheck] + [version]
    table["checked_with"] = sorted(set(checked))
    tmp = space_file(op).with_suffix(".tmp")
    tmp.write_text(_dump(table))
    tmp.replace(space_file(op))
    return table


def _dump(table: dict) -> str:
    """JSON with one candidate or dropped point per line, so diffs stay readable."""
    lines = ["{"]
    items = list(table.items())
    for i, (name, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if name in ("candidates", "dropped"):
            lines.append(f'  "{name}": {{')
            keys = list(value.items())
            for j, (key, kernels) in enumerate(keys):
                lines.append(f'    "{key}": {{')
                ks = list(kernels.items())
                for m, (kernel, rows) in enumerate(ks):
                    lines.append(f'      "{kernel}": [')
                    for n, row in enumerate(rows):
                        lines.append("        " + json.dumps(row) + ("," if n < len(rows) - 1 else ""))
                    lines.append("      ]" + ("," if m < len(ks) - 1 else ""))
                lines.append("    }" + ("," if j < len(keys) - 1 else ""))
            lines.append("  }" + comma)
        else:
            lines.append(f"  {json.dumps(name)}: {json.dumps(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("op", choices=OPS)
    parser.add_argument("--recheck", action="store_true", help="re-check the current candidates only")
    parser.add_argument("--kernel", action="append", help="re-derive only this kernel's list (repeatable)")
    args = parser.parse_args(argv)
    table = refresh(args.op, recheck=args.recheck, only=tuple(args.kernel) if args.kernel else None)
    for key, kernels in table["candidates"].items():
        print(key, {k: len(v) for k, v in kernels.items()})


if __name__ == "__main__":
    main()
