"""Candidate configs of the sm_90a tuning sweeps: the search spaces' points, filtered on the CPU.
A point is dropped when it breaks its space's constraints, then compiled for sm_90a and kept when it
uses tensor cores, spills nothing, fits in 227 KiB of shared memory and has SASS not already kept, so
the device never times the same binary twice; the lists are
``kernels/spaces/candidates/<family>.sm_90a.json``. How to run it is in ``docs/tuning.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

from ceiling import spaces

TARGET = "sm_90a"
FAMILIES = ("attention", "triangle_attention", "triangle_multiplication", "attention_gluon")
OPS = FAMILIES[:2]  # the attention sweep's ops (ceiling.tuning.attention)
SMEM_LIMIT = spaces.target_limits(TARGET)["smem_per_block"]  # bytes one block may use on sm_90 (227 KiB)
# What a kept point's binary showed, per family (the candidate file says it).
KEPT = {"": "with tensor-core instructions, no spills and shared memory within 227 KiB",
        "attention_gluon": ("to the Gluon design (ceiling.nvidia.gluon.static_check: HGMMA in both consumer "
                            "partitions, TMA loads in the producer, the register split, no spills beyond its known "
                            "bound for the config under that Triton, shared memory within 227 KiB)")}
# The kernels a sweep times, in its order, where they are not simply the space's sections: each is
# a section with some of its parameters pinned. Attention and triangle attention time the dK/dV kernel
# alone and the dK/dV kernel with dQ accumulated in it (which replaces dkdv + dq) as two kernels.
SWEEP_KERNELS = {
    "attention": {"fwd": ("fwd", {}), "dkdv": ("dkdv", {"dq_atomic": False}), "dq": ("dq", {}),
                  "dkdv_dq": ("dkdv", {"dq_atomic": True})},
    "triangle_attention": {"fwd": ("fwd", {}), "fwd_rows": ("fwd_rows", {}),
                           "bwd_dkdv": ("bwd_dkdv", {"DQ_ATOMIC": False}), "bwd_dq": ("bwd_dq", {}),
                           "bwd_dbias": ("bwd_dbias", {}), "bwd_dkdv_dq": ("bwd_dkdv", {"DQ_ATOMIC": True})},
}


def candidates_file(family: str) -> Path:
    return spaces.candidates_file(family, TARGET)


def load(family: str) -> dict:
    """The generated candidate lists of ``family`` (``candidates/<family>.sm_90a.json``)."""
    return json.loads(candidates_file(family).read_text())


def space(family: str) -> spaces.Space:
    return spaces.get(family, TARGET)


def keys(family: str) -> dict[str, dict]:
    """Problem key -> the problem's names the constraints read (``{"64": {"head_dim": 64}}``)."""
    return dict(space(family).tuning["keys"])


def sections(family: str) -> list[str]:
    return list(space(family).sections)


def grid(family: str, section: str) -> list[dict]:
    """Every combination of a kernel's search values, in the order the space lists them."""
    return space(family).grid(section)


def kernels(family: str) -> list[str]:
    """The kernels the sweep of ``family`` times, in its order."""
    return list(SWEEP_KERNELS.get(family, {s: None for s in sections(family)}))


def _kernel(family: str, kernel: str) -> tuple[str, dict]:
    return SWEEP_KERNELS.get(family, {}).get(kernel, (kernel, {}))


def candidates(family: str, key: str, kernel: str) -> list[dict]:
    """The statically checked candidates of a sweep kernel for ``key`` (each with its ``static``
    facts); a pinned parameter (``dkdv_dq``'s ``dq_atomic``) is left out of the points."""
    section, pinned = _kernel(family, kernel)
    rows = load(family)["candidates"].get(key, {}).get(section, [])
    return [{k: v for k, v in c.items() if k not in pinned} for c in rows
            if all(c.get(k) == v for k, v in pinned.items())]


def context(family: str, key: str, dtype: str = "bfloat16") -> dict:
    return {**keys(family)[key], "dtype_bytes": 4 if dtype == "float32" else 2}


def rule_drop(family: str, section: str, key: str, point: dict) -> str | None:
    """Why ``point`` is dropped without compiling (the first constraint it breaks), or None."""
    sp = space(family)
    broken = sp.grid_breaks(point, section, context(family, key))
    if not broken:
        return None
    why = {c.id: c.why for c in sp.flat_constraints()}[broken[0]]
    return f"{broken[0]}: {why}"


# ---------------------------------------------------------------------------------------------
# The compile check
# ---------------------------------------------------------------------------------------------


def compile_spec(family: str, kernel: str, key: str, c: dict, dtype: str = "bfloat16"):
    """The ``ceiling.isa.CompileSpec`` the device would compile for candidate ``c`` of a sweep
    kernel (a section, or one of :data:`SWEEP_KERNELS`): attention with TMA and causal masking
    (the causal kernel holds the non-causal one's code and more); triangle attention with a mask,
    bf16, head dim ``key``; the multiplicative update's kernel at c_z = c = ``key``, N = 768,
    the other stages at the H200 entry; the Gluon attention's kernel at head dim ``key``, causal
    (a ``ceiling.nvidia.gluon.static_check.Spec``)."""
    section, pinned = _kernel(family, kernel)
    c = {**c, **pinned}
    if family == "attention":  # the other sections at the Hopper heuristic's tiles
        from ceiling.attention.op import ATTENTION
        from ceiling.attention.spec import shipped_problem
        from ceiling.triton import attention as flash
        from ceiling.triton.attention_specs import kernel_specs

        head_dim = int(key)
        problem = shipped_problem(head_dim, dtype, causal=True, arch="sm_90")  # TMA: the wide tiles
        cfg = flash.merge_config(ATTENTION.implementation("nvidia").load().heuristic(problem), {section: c})
        return next(s for s in kernel_specs(head_dim, cfg, dtype=dtype, causal=True) if s.config["kernel"] == section)
    if family == "triangle_attention":
        from ceiling.triton.triangle_attention_specs import kernel_spec

        return kernel_spec(section, c, dtype, int(key), aligned=True)
    if family == "attention_gluon":
        from ceiling.nvidia.gluon import static_check as gluon_check

        return gluon_check.spec(section, int(key), True, c, dtype)
    from ceiling.triton import triangle_multiplication_specs as M

    width = int(key)
    table = M.shipped_config("sm_90a", dtype, width, width).as_dict()
    specs = M.compile_specs(dtype, width, width, "sm_90a", cfgs={**table, section: c}, prefix="tune")
    return next(s for s in specs if s.name == f"tune_{section}_{dtype}_cz{width}_c{width}")


def static_check(spec) -> dict:
    """Registers, spills, shared memory and tensor-core instruction count of ``spec`` on sm_90a,
    and a digest of its SASS; ``ok`` when it uses tensor cores, spills nothing and fits (a Gluon
    spec: when its SASS is the design)."""
    from ceiling.isa import _resource_usage, compile_for, sass, sass_mix
    from ceiling.nvidia.gluon import static_check as gluon_check

    if isinstance(spec, gluon_check.Spec):
        return _gluon_static_check(spec)
    kernel = compile_for(spec, TARGET)
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


def _gluon_static_check(spec) -> dict:
    """:func:`static_check`'s facts of a Gluon kernel, judged by the Gluon design's check."""
    from ceiling.isa import sass, sass_mix
    from ceiling.nvidia.gluon import sass_facts
    from ceiling.nvidia.gluon import static_check as gluon_check

    kernel = gluon_check.compile_spec(spec)
    f = sass_facts.facts(kernel, spec.config)
    text = sass(kernel.asm["cubin"])
    mix = sass_mix(text)
    facts = {
        "registers": max(p.budget or 0 for p in f.partitions),  # the consumers' budget after USETMAXREG
        "spill_bytes": f.spill_bytes + 4 * f.ldl_stl,
        "shared_bytes": f.shared_bytes,
        "hgmma": mix.get("HGMMA", 0),
        "hmma": mix.get("HMMA", 0),
    }
    bad = sass_facts.violations(f, spec.design)
    digest = hashlib.sha1(text.encode() + str(facts["shared_bytes"]).encode()).hexdigest()[:16]
    return {**facts, "ok": not bad, "why": "; ".join(bad) or None, "sass_sha1": digest}


def digests(family: str) -> dict[str, str]:
    """Each kernel's space digest (:meth:`ceiling.spaces.Space.digest`): what its list was made from."""
    return {s: space(family).digest(s) for s in sections(family)}


def stale(family: str) -> list[str]:
    """The kernels whose candidate list was made from another space than today's."""
    made = load(family).get("space_digest", {})
    return [s for s, d in digests(family).items() if made.get(s) != d]


def refresh(family: str, recheck: bool = False, log=print, only: tuple[str, ...] | None = None) -> dict:
    """Re-derive the candidate lists of ``family`` with this Triton and write them; ``only``
    names the kernels (sections) to re-derive (the others keep their lists)."""
    import triton

    path = candidates_file(family)
    table = json.loads(path.read_text()) if path.exists() else {"candidates": {}, "dropped": {}, "checked_with": []}
    version = triton.__version__
    kept_before = {k: dict(v) for k, v in table["candidates"].items()}
    out_candidates: dict = {k: dict(v) for k, v in kept_before.items()} if only else {}
    dropped: dict = table.get("dropped", {}) if recheck or only else {}
    for key in keys(family):
        for section in sections(family):
            if only and section not in only:
                continue
            points = kept_before.get(key, {}).get(section, []) if recheck else grid(family, section)
            kept, seen = [], {}
            if not recheck:
                dropped.setdefault(key, {})[section] = []
            drops = dropped.setdefault(key, {}).setdefault(section, [])
            for point in points:
                c = {k: v for k, v in point.items() if k != "static"}
                why = rule_drop(family, section, key, c)
                facts, compiled = None, why is None
                if why is None:
                    t0 = time.perf_counter()
                    try:
                        facts = static_check(compile_spec(family, section, key, c))
                        why = facts.pop("why")
                    except Exception as exc:  # noqa: BLE001 - a config the compiler rejects is dropped with the reason
                        why = f"compile error: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
                    log(f"{family} {key} {section} {c}: {why or 'ok'} ({time.perf_counter() - t0:.1f} s)")
                    if facts and why is None and not recheck:  # twins are judged by the first Triton only
                        twin = seen.get(facts["sass_sha1"])
                        if twin is not None:
                            why = f"same SASS as {twin}"
                if why is not None:
                    drops.append({"config": c, "why": why, "triton": version if compiled else None})
                    continue
                seen[facts["sass_sha1"]] = c
                static = point.get("static") if recheck else None  # keep the first Triton's facts
                kept.append({**c, "static": static or {k: facts[k] for k in ("registers", "shared_bytes", "hgmma", "hmma")}})
            out_candidates.setdefault(key, {})[section] = kept
    checked = [v for v in table.get("checked_with", []) if recheck] + [version]
    table = {
        "_about": (f"Generated by python -m ceiling.tuning.space {family} from kernels/spaces/{family}.json "
                   f"(target {TARGET}): per problem key ({space(family).tuning.get('compiled', '')}) and kernel, the "
                   f"search-grid points that compiled {KEPT.get(family, KEPT[''])} "
                   "under every Triton in 'checked_with', each with its static facts from the first; "
                   "'dropped' says why each other point was left out ('triton': null when a constraint of the space "
                   "dropped it without compiling); 'space_digest' is each kernel's space digest when the list was "
                   "made. Do not edit by hand."),
        "family": family,
        "target": TARGET,
        "checked_with": sorted(set(checked)),
        "space_digest": {**table.get("space_digest", {}), **{s: d for s, d in digests(family).items()
                                                             if not only or s in only}},
        "candidates": out_candidates,
        "dropped": dropped,
    }
    tmp = path.with_suffix(".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(dump(table))
    tmp.replace(path)
    return table


def dump(table: dict) -> str:
    """JSON with one candidate or dropped point per line, so diffs stay readable."""
    lines = ["{"]
    items = list(table.items())
    for i, (name, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if name in ("candidates", "dropped"):
            lines.append(f'  "{name}": {{')
            keys_ = list(value.items())
            for j, (key, kernels) in enumerate(keys_):
                lines.append(f'    "{key}": {{')
                ks = list(kernels.items())
                for m, (kernel, rows) in enumerate(ks):
                    lines.append(f'      "{kernel}": [')
                    for n, row in enumerate(rows):
                        lines.append("        " + json.dumps(row) + ("," if n < len(rows) - 1 else ""))
                    lines.append("      ]" + ("," if m < len(ks) - 1 else ""))
                lines.append("    }" + ("," if j < len(keys_) - 1 else ""))
            lines.append("  }" + comma)
        else:
            lines.append(f"  {json.dumps(name)}: {json.dumps(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", choices=FAMILIES)
    parser.add_argument("--recheck", action="store_true", help="re-check the current candidates only")
    parser.add_argument("--kernel", action="append", help="re-derive only this kernel's list (repeatable)")
    args = parser.parse_args(argv)
    table = refresh(args.family, recheck=args.recheck, only=tuple(args.kernel) if args.kernel else None)
    for key, kernels in table["candidates"].items():
        print(key, {k: len(v) for k, v in kernels.items()})


if __name__ == "__main__":
    main()
