"""What a template needs per kernel family beyond its space's data: one small adapter each.

For every family, per backend:

* :func:`shipped`: the configs the vendor's table ships (its best points), each as a flat
  point with the problem it was chosen for, read through the vendor module's own resolver so
  a point is what the kernel would run;
* :func:`check_point`: the target's own check of one point: compiled for sm_90a or gfx942
  (``ceiling.isa``, static facts back), the TPU config rules (``kernels/tpu/*_rules.py``), or
  the NKI emulator's hardware rules in a dry run (trn1, trn2);
* :func:`write_point`: a found point written into the vendor's table (``ceiling import-point``).

A new family adds its branch to these three functions and a JSON file under kernels/spaces.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ceiling import spaces

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Shipped:
    shape: dict[str, int] | None  # the problem (or the part of it: a head dim) it was chosen for; None: any
    config: dict[str, Any]  # flat (dotted) names
    device: str = ""  # published device key, "" for any device of the target
    label: str = ""
    source: str = ""


def _bytes(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


def _newer_targets() -> dict[str, str]:
    """Blackwell and CDNA4 targets -> the target their configs are derived from (nothing is tuned
    on them: :mod:`ceiling.spaces.derive`)."""
    from ceiling.amd import cdna4
    from ceiling.nvidia import blackwell

    return {**{t: blackwell.HOPPER for t in blackwell.ARCH_TARGETS.values()},
            **{t: cdna4.CDNA3 for t in cdna4.ARCH_TARGETS.values()}}


def _base_target(target: str) -> str:
    return _newer_targets().get(target, target)


def _derived_gemm_shipped(family: str, target: str, dtype: str, flat) -> list[Shipped]:
    """What ``target``'s GPU (a B200, an MI355X) resolves for a few shapes, one per heuristic branch
    and scaling: the older target's configs fitted to this one's space."""
    import dataclasses

    from ceiling.nvidia.gemm_specs import HEURISTIC_SHAPES
    from ceiling.op import get, resolve_config
    from ceiling.triangle.spec import SHIPPED_GPUS

    gpu, arch = SHIPPED_GPUS[target]
    backend = spaces.target_info(target)["backend"]
    out: list[Shipped] = []
    if family == "gemm":
        from ceiling.gemm.spec import shipped_problem

        problems = [(dataclasses.replace(shipped_problem(*shape, dtype), device="cuda:0", gpu=gpu, arch=arch), None)
                    for shape in HEURISTIC_SHAPES]
        impl = get("gemm").implementation(backend)
    else:
        from ceiling.nvidia.gemm_fp8_specs import problem as fp8_problem

        fp8 = "float8_e4m3fn"  # OCP on Blackwell and on CDNA4 (ceiling.amd.cdna4.OCP_FP8)
        problems = [(fp8_problem(m, 4096, 4096, a, b, fp8, fp8, gpu={"gpu": gpu, "arch": arch}), f"{a}/{b}")
                    for m in (16, 4096) for a, b in (("1x128", "128x128"), ("tensor", "tensor"))]
        impl = get("scaled_gemm").implementation(backend)
    searched = spaces.get(family, target).searched()
    for problem, scales in problems:
        config = resolve_config(problem, impl, None).as_dict()
        if scales:
            config["SCALES"] = scales
        if any(k in searched and searched[k].search and v not in searched[k].search for k, v in config.items()):
            continue  # outside what a search explores (the stream-K schedule's six stages): no best point
        shape = {"M": problem.m, "N": problem.n, "K": problem.k}
        out.append(Shipped(shape, flat(config), "", f"{gpu} derived", f"derived from {_base_target(target)}"))
    return out


def _device_key(name: str) -> str:
    from ceiling.roofline import devices

    spec = devices.match(name)
    return spec.key if spec else ""


def table_path(family: str, target: str) -> Path | None:
    """The vendor table of ``family`` on ``target``: the target's in the one table format
    (``ceiling.tables``) where it has one, else the file the space names."""
    from ceiling import tables

    space = spaces.get(family, target)
    if tables.path(space.backend, target, family).exists():
        return tables.path(space.backend, target, family)
    return REPO / space.table if space.table else None


def _read(family: str, target: str) -> dict:
    return json.loads(table_path(family, target).read_text())


# --------------------------------------------------------------------------------------- shipped


def _gemm_shipped(backend: str, target: str, dtype: str, flat) -> list[Shipped]:
    """The GEMM tables' entries on ``target`` for ``dtype``: an exact problem's entry with its shape
    and device (NVIDIA), a shape class (CDNA3), a size class (TPU), a block shape (Trainium)."""
    from ceiling import tables

    kernel_dtype = "float32" if backend == "tpu" and dtype not in ("bfloat16", "float32") else dtype
    # the target's table and the device tables that refine it (H200's on sm_90a), not other targets'
    devices = [d for d in tables.devices(backend) if tables.path(backend, d, "gemm").exists()
               and (d == target or d not in spaces.targets("gemm"))]
    out = []
    for device in devices:
        for entry in tables.read(tables.path(backend, device, "gemm"))["entries"]:
            pinned = tables.pinned(entry)
            if pinned.get("dtype", dtype) != dtype or pinned.get("kernel_dtype", kernel_dtype) != kernel_dtype:
                continue
            if backend == "amd" and "label" not in entry:
                continue  # a class's float32 form, not a point of its own
            shape = {a: pinned[a] for a in ("M", "N", "K")} if {"M", "N", "K"} <= set(pinned) else None
            label = entry.get("label") or entry["config"].get("name") or entry.get("when", "default")
            own = device == target
            out.append(Shipped(shape, flat(entry["config"]), "" if own else _device_key(device),
                               label if own else f"{device} {label}", entry.get("source", "")))
    return out


def _fp8_shipped(backend: str, flat) -> list[Shipped]:
    """The FP8 GEMM's table entries on every device of ``backend``: a Hopper entry is for one shape
    and scaling (its condition pins them); a CDNA3 entry for a shape class, labelled with the first
    scaling it serves (block scales first: what the class was sized for)."""
    from ceiling import tables
    from ceiling.tuning.gemm_fp8 import pinned
    from ceiling.scaled_gemm.spec import ScaledGemmProblem

    out: list[Shipped] = []
    for device in tables.devices(backend):
        path = tables.path(backend, device, "gemm_fp8")
        if not path.exists():
            continue
        for i, e in enumerate(tables.read(path)["entries"]):
            label = f"{device} #{i}"
            if backend == "nvidia":
                p = pinned(e["when"])
                shape = {k: p[k] for k in ("M", "N", "K")}
                out.append(Shipped(shape, flat({**e["config"], "SCALES": p["SCALES"]}), _device_key(device),
                                   f"{label} {p['SCALES']}", e.get("source", "")))
                continue
            for scales in ("1x128/128x128", "tensor/tensor", "row/row"):
                kinds = scales.split("/")
                if any(tables.matches(e, ScaledGemmProblem("torch", "cpu", m=m, n=4096, k=4096, a_dtype="float8_e4m3fnuz",
                                                           b_dtype="float8_e4m3fnuz", a_scale=kinds[0], b_scale=kinds[1],
                                                           out_dtype="bfloat16").features()) for m in (16, 8192)):
                    out.append(Shipped(None, flat({**e["config"], "SCALES": scales}), _device_key(device),
                                       f"{label} {e.get('when', '')}", e.get("source", "")))
                    break
    return out


def shipped(family: str, target: str, dtype: str, names: list[str]) -> list[Shipped]:
    """The vendor table's configs of ``family`` on ``target`` for ``dtype``, as flat points
    restricted to ``names`` (the template's parameters)."""
    space = spaces.get(family, target)
    backend = space.backend
    if space.table is None:
        return []

    def flat(config: dict) -> dict:
        return {k: v for k, v in spaces.flatten(config, space.sections).items() if k in names}

    out: list[Shipped] = []
    if family in ("gemm", "gemm_fp8") and target in _newer_targets():
        return _derived_gemm_shipped(family, target, dtype, flat)
    if family == "gemm_fp8":  # the one table format (ceiling.tables)
        return _fp8_shipped(backend, flat)
    if family == "gemm":
        return _gemm_shipped(backend, target, dtype, flat)
    if family in ("attention", "triangle_attention") and backend == "trainium":
        from ceiling.trainium import attention as trn_attention

        rows = trn_attention.configs(target)
        if family == "triangle_attention":  # the smallest bucket that takes its head dim, 32
            rows = [min((c for c in rows if c["head_dim"] >= 32), key=lambda c: c["head_dim"])]
        head_dim = (lambda c: 32) if family == "triangle_attention" else (lambda c: c["head_dim"])
        return [Shipped({"head_dim": head_dim(c)}, flat(c), "", c["name"], "") for c in rows]
    if family in ("attention", "triangle_attention") and backend == "tpu":  # the attention table's blocks
        from ceiling import tables
        from ceiling.attention.spec import HEAD_DIM_RANGE
        from ceiling.tpu.attention import kernel_dtype, shipped_entries
        from ceiling.tpu.generations import LANES

        for head_dim in range(LANES, HEAD_DIM_RANGE[1] + 1, LANES):  # the padded head dims
            if family == "triangle_attention" and head_dim != LANES:
                continue
            features = {"kernel_dtype": kernel_dtype(dtype), "head_dim_pad": head_dim}
            held = [e for e in shipped_entries(target) if tables.matches(e, features)]
            if held:
                shape = {"head_dim": 32 if family == "triangle_attention" else head_dim}
                config = tables.lookup("tpu", "attention", None, target, features).config
                out.append(Shipped(shape, flat(config), "", f"head_dim {head_dim}",
                                   "; ".join(e.get("why", e["source"]) for e in held)))
        return out
    if family == "attention_gluon":
        from ceiling.nvidia.gluon.attention import shipped as gluon_shipped

        for head_dim, entry in gluon_shipped().items():
            out.append(Shipped({"head_dim": head_dim}, flat(entry), "", f"{target} head_dim {head_dim}", ""))
        return out
    if family == "attention":  # per padded head dim of the table: what its GPU resolves, causal where it differs
        from ceiling.triton.attention_specs import tuned_head_dims

        for pad in tuned_head_dims(backend, _base_target(target)):
            plain, causal = (flat(_attention_config(target, pad, dtype, c).as_dict()) for c in (False, True))
            out.append(Shipped({"head_dim": pad}, plain, "", f"{target} head_dim {pad}", ""))
            if causal != plain:
                out.append(Shipped({"head_dim": pad}, causal, "", f"{target} head_dim {pad}, causal", ""))
        return out
    if family in ("triangle_attention", "triangle_multiplication") and backend in ("nvidia", "amd"):
        return [Shipped(shape, flat(config), device, label, source)
                for shape, config, device, label, source in _triangle_shipped(family, target, dtype)]
    if family == "triangle_multiplication" and backend == "tpu":
        from ceiling import tables
        from ceiling.tpu.triangle_multiplication import kernel_dtype

        found = tables.lookup("tpu", family, None, target, {"kernel_dtype": kernel_dtype(dtype)})
        why = "; ".join(tables.read(tables.path("tpu", t, family))["entries"][i].get("why", "") for t, i in found.held)
        return [Shipped(None, flat(found.config), "", dtype, why)] if found.config else []
    raise NotImplementedError(f"no shipped-config reader for {family} on {target}")


def _attention_problem(target: str, head_dim: int, dtype: str, causal: bool):
    """A PyTorch attention problem on the device the Triton target's configs are written for (an
    H200 on sm_90a, a B200 on sm_100a, an MI300X on gfx942, ...)."""
    from ceiling.attention.spec import shipped_problem
    from ceiling.triangle.spec import SHIPPED_GPUS

    return shipped_problem(head_dim, dtype, causal=causal, **dict(zip(("gpu", "arch"), SHIPPED_GPUS[target])))


def _attention_config(target: str, head_dim: int, dtype: str, causal: bool):
    """The config the Triton attention resolves for that problem on ``target`` (``ceiling.op``)."""
    from ceiling.attention.op import ATTENTION
    from ceiling.op import resolve_config

    return resolve_config(_attention_problem(target, head_dim, dtype, causal),
                          ATTENTION.implementation(spaces.target_info(target)["backend"]), None)


def unit_problem(family: str, section: str | None) -> dict[str, Any]:
    """What the performance model must know of the problem to time one kernel (a section) of it:
    attention's dK/dV and dQ kernels run in the backward."""
    if (family, section) in (("attention", "dkdv"), ("attention", "dq"), ("attention_gluon", "bwd")):
        return {"direction": "bwd"}
    return {}


# ---------------------------------------------------------------------------------- checking a point


def _heads(shape: dict | None, default: int) -> int:
    return int((shape or {}).get("head_dim", default))


def check_point(family: str, target: str, config: dict, shape: dict | None = None, dtype: str = "bfloat16",
                only: str | None = None) -> list[dict]:
    """The target's own verdict on one point (a sectioned kernel config): the static facts of
    each kernel (or of the ``only`` one) compiled for sm_90a or gfx942, the TPU rules' VMEM
    estimates, or the NKI emulator's dry run (its hardware rules raise on a break). Raises on a
    point the target refuses."""
    space = spaces.get(family, target)
    backend = space.backend
    if family == "attention_gluon":
        return [_gluon_verdict(spec) for spec in compile_specs(family, target, config, shape, dtype, only)]
    if backend in ("nvidia", "amd"):
        from ceiling import isa

        specs = compile_specs(family, target, config, shape, dtype, only)
        return [isa.profile(spec, target).as_dict() for spec in specs]
    if backend == "tpu":
        from ceiling.tpu import attention_rules, gemm_rules, trimul_rules

        if family == "gemm":
            return [gemm_rules.check_config(config, dtype, dtype, target).as_dict()]
        if family in ("attention", "triangle_attention"):
            head_dim = -(-_heads(shape, 32 if family == "triangle_attention" else 128) // 128) * 128
            estimates = attention_rules.check_config(config, dtype, head_dim, target, "float32", True)
            return [e.as_dict() for e in estimates.values()]
        c_z, c = int((shape or {}).get("c_z", 128)), int((shape or {}).get("c", 128))
        return [e.as_dict() for e in trimul_rules.check_config(config, dtype, c_z, c, target).values()]
    if backend == "trainium":
        config = {**config, "target": target}
        if family == "gemm":
            from ceiling.trainium import gemm as trn_gemm

            m, n, k = ((shape or {}).get(a, 1024) for a in ("M", "N", "K"))
            report, resolved, ctx = trn_gemm.estimate(m, n, k, dtype=dtype, target=target, config=config)
        else:
            from ceiling.trainium import attention as trn_attention

            head_dim = _heads(shape, 32 if family == "triangle_attention" else 128)
            seq = int((shape or {}).get("seq", (shape or {}).get("n", 1024)))
            results = []
            for direction in ("fwd", "bwd"):
                report, resolved, ctx = trn_attention.estimate(seq=seq, head_dim=head_dim, direction=direction,
                                                               dtype=dtype, target=target, config=config)
                results.append({"direction": direction, "config": resolved, "sbuf_peak": ctx.sbuf_peak,
                                "psum_peak": ctx.psum_peak, "estimated_s": report.estimated_s})
            return results
        return [{"config": resolved, "sbuf_peak": ctx.sbuf_peak, "psum_peak": ctx.psum_peak,
                 "estimated_s": report.estimated_s}]
    raise NotImplementedError(f"no check for {family} on {target}")


def _gluon_verdict(spec) -> dict:
    """The Gluon kernels' static check of one compiled point: its facts, or a ValueError naming
    what in its SASS is not the design (two HGMMA consumers, a TMA producer, the register split,
    no spills, shared memory)."""
    from ceiling.nvidia.gluon import static_check

    result = static_check.check(spec)
    if result["violations"]:
        raise ValueError(f"{spec.name} {spec.knobs}: " + "; ".join(result["violations"]))
    parts = result["facts"]["partitions"]
    return {"kernel": spec.name, "config": spec.config, "summary": result["summary"],
            "tensor_core_instructions": sum(p["hgmma"] for p in parts),
            "shared_bytes": result["facts"]["shared_bytes"], "spill_bytes": result["facts"]["spill_bytes"]}


def compile_specs(family: str, target: str, config: dict, shape: dict | None = None, dtype: str = "bfloat16",
                  only: str | None = None) -> list:
    """``ceiling.isa.CompileSpec``s of every kernel of one point on a Triton target (of the ``only``
    kernel, a section's name, when given); sections a point leaves out take the table's entry."""
    backend = spaces.get(family, target).backend
    if family == "gemm":
        import importlib

        module = importlib.import_module(f"ceiling.{backend}.gemm_specs")
        if backend == "nvidia":
            return [module.compile_spec(dict(config), dtype, target=target)]
        return [module.compile_spec(dict(config), dtype)]
    if family == "gemm_fp8":  # e4m3 operands (e4m3fnuz on gfx942); dtype names them if FP8, else the output
        import importlib

        module = importlib.import_module(f"ceiling.{backend}.gemm_fp8_specs")
        a_kind, b_kind = config.get("SCALES", "1x128/128x128").split("/")
        from ceiling.amd import cdna4

        fp8 = "float8_e4m3fnuz" if backend == "amd" and target not in cdna4.OCP_FP8 else "float8_e4m3fn"
        operands, out = (dtype, "bfloat16") if dtype.startswith("float8") else (fp8, dtype)
        if backend == "nvidia":
            return [module.compile_spec(dict(config), a_kind, b_kind, operands, operands, out, target)]
        return [module.compile_spec(dict(config), a_kind, b_kind, operands, out, target=target)]
    if family == "attention_gluon":  # ceiling.nvidia.gluon.static_check specs: causal, the table's other kernel
        from ceiling.nvidia.gluon import static_check
        from ceiling.nvidia.gluon.attention import shipped as gluon_shipped

        head_dim = _heads(shape, 128)
        entry = gluon_shipped()[head_dim]
        return [static_check.spec(kernel, head_dim, True, {**entry[kernel], **config.get(kernel, {})}, dtype)
                for kernel in ("fwd", "bwd") if kernel in entry and only in (None, kernel)]
    if family == "attention":  # sections the point leaves out take the heuristic's
        import importlib

        from ceiling.triton import attention as flash
        from ceiling.triton.attention_specs import kernel_specs

        head_dim = _heads(shape, 128)
        heuristic = importlib.import_module(f"ceiling.{backend}.attention").heuristic
        cfg = flash.merge_config(heuristic(_attention_problem(target, head_dim, dtype, True)), config)
        if backend == "nvidia":
            specs = kernel_specs(head_dim, cfg, dtype=dtype, causal=True, prefix="point_")
        else:
            specs = kernel_specs(head_dim, cfg, dtype=dtype, causal=True, use_tma=False,
                                 pre_load_v=bool(cfg.get("pre_load_v")), prefix="point_amd_")
        return [s for s in specs if only in (None, s.config["kernel"])]
    if family == "triangle_attention":
        from ceiling.triton.triangle_attention_specs import kernel_spec

        head_dim = _heads(shape, 32)
        return [kernel_spec(name, cfg, dtype, head_dim, target=target, prefix=f"point_{backend}", aligned=True)
                for name, cfg in config.items() if isinstance(cfg, dict) and only in (None, name)]
    if family == "triangle_multiplication":
        import dataclasses

        from ceiling.op import get, resolve_config
        from ceiling.triton import triangle_multiplication_specs as M

        c_z, c = int((shape or {}).get("c_z", 128)), int((shape or {}).get("c", 128))
        problem = dataclasses.replace(_triangle_problem(family, dtype, None, target, None), c_z=c_z, c=c)
        impl = get(_TRIANGLE_OPS[family]).implementation(spaces.target_info(target)["backend"], "triton")
        cfgs = resolve_config(problem, impl, config).as_dict()
        specs = M.compile_specs(dtype, c_z, c, target, cfgs=cfgs, prefix="point" if backend == "nvidia" else "point_cdna3")
        return [s for s in specs if only is None or f"_{only}_{dtype}_" in s.name]
    raise NotImplementedError(f"no compile specs for {family} on {target}")


# ------------------------------------------------------------------------------ writing a point back


def _table_device(backend: str, device_name: str) -> str:
    """The key a vendor's table files a device under ("NVIDIA H200" -> "H200")."""
    from ceiling import tables

    return tables.model(backend, device_name)


def _write_fp8_point(backend: str, config: dict, shape: dict, dtype: str, device_name: str, provenance: str,
                     path: Path | None) -> tuple[Path, dict]:
    """An FP8 point as a table entry of its device: on Hopper for its exact shape and scaling, on
    CDNA3 for the shape class the gfx942 table files the problem under (the condition of the last
    entry that holds for it)."""
    from ceiling import tables
    from ceiling.scaled_gemm.spec import ScaledGemmProblem
    from ceiling.tuning import gemm_fp8 as sweep

    m, n, k = (int(shape[a]) for a in ("M", "N", "K"))
    a_kind, b_kind = config["SCALES"].split("/")
    if backend == "nvidia":
        device, when = sweep.device_key(device_name), sweep.when((m, n, k), dtype, config["SCALES"])
    else:
        from ceiling.amd import devices

        problem = ScaledGemmProblem("torch", "cpu", m=m, n=n, k=k, a_dtype=dtype, b_dtype=dtype, a_scale=a_kind,
                                    b_scale=b_kind, out_dtype="bfloat16")
        held = tables.lookup("amd", "gemm_fp8", None, "gfx942", problem.features()).held
        table_name, i = held[-1]
        device = devices.model(device_name)
        when = tables.read(tables.path("amd", table_name, "gemm_fp8"))["entries"][i]["when"]
    path = path or tables.path(backend, device, "gemm_fp8")
    table = tables.read(path) if path.exists() else {
        "family": "gemm_fp8", "device": device, "about": f"FP8 GEMM configs found for the {device}.", "entries": []}
    entry = {"when": when, "config": {key: v for key, v in config.items() if key != "SCALES"}, "source": "derived",
             "why": provenance}
    table = dict(table, entries=[e for e in table["entries"] if e.get("when") != when] + [entry])
    return path, table


def write_point(family: str, target: str, config: dict, shape: dict | None, dtype: str, device_name: str,
                provenance: str, path: Path | None = None) -> tuple[Path, dict]:
    """The vendor table of ``family`` on ``target`` with ``config`` (sectioned, checked) filed for
    ``shape`` and ``dtype`` on ``device_name``, and a provenance line; returns (path, new table).
    Nothing is written here: the caller writes the table (``ceiling import-point --apply``)."""
    space = spaces.get(family, target)
    backend = space.backend
    if family == "gemm_fp8":  # the one table format (ceiling.tables)
        return _write_fp8_point(backend, config, shape, dtype, device_name, provenance, path)
    if family == "gemm":
        return _write_gemm_point(backend, target, config, shape, dtype, device_name, provenance, path)
    if (family, backend) in _TRIANGLE_TABLES:
        return _write_triangle_point(family, target, config, shape, dtype, device_name, provenance, path)
    path = path or table_path(family, target)
    if path is None:
        raise NotImplementedError(f"{family} on {target} has no config table")
    table = json.loads(path.read_text())
    device = _table_device(backend, device_name)
    key = None
    if family in ("attention", "triangle_attention") and backend == "tpu":  # the last entry that holds wins
        from ceiling.tpu.attention import kernel_dtype

        when = f"kernel_dtype == '{kernel_dtype(dtype)}' and head_dim_pad == {-(-_heads(shape, 128) // 128) * 128}"
        _file_after(table, when, config, provenance, lambda e: True)
    elif family in ("attention", "triangle_attention") and backend == "trainium":
        from ceiling.trainium.attention import configs as trn_configs

        head_dim = _heads(shape, 128)
        buckets = sorted(c["head_dim"] for c in trn_configs(target))
        bucket = next((b for b in buckets if b >= head_dim), buckets[-1])
        when = f"head_dim <= {bucket}" if bucket != buckets[-1] else None  # the first entry serves the largest
        config = {**{k: v for k, v in config.items() if k != "target"}, "name": f"imported_d{bucket}"}
        _file_after(table, when, config, provenance, lambda e: e.get("when") == when)  # before the smaller buckets
    elif family == "attention_gluon":  # the tiles only: a Gluon config becomes a default by a device run
        _file_after(table, f"head_dim == {_heads(shape, 128)}", config, provenance, lambda e: not e.get("default"))
    elif family == "attention":
        from ceiling.triton import attention as flash

        when = f"head_dim_pad == {flash.head_dim_pad(_heads(shape, 128))}"
        _file_after(table, when, config, provenance, lambda e: e.get("when") == when)  # before its narrow entries
    else:
        raise NotImplementedError(f"no table writer for {family} on {target}")
    return path, table


def _file_after(table: dict, when: str | None, config: dict, provenance: str, after) -> None:
    """A found point filed in a one-format table (``ceiling.tables``) as an entry holding where
    ``when`` holds, placed after the last entry ``after(entry)`` accepts (at the end when none
    does): later entries that hold refine it, as a narrower condition's entries refine the
    point's problem class."""
    entry = {"when": when, "config": config, "source": "derived", "why": provenance}
    entries = table["entries"]
    at = max((i for i, e in enumerate(entries) if after(e)), default=len(entries) - 1) + 1
    entries.insert(at, entry if when is not None else {k: v for k, v in entry.items() if k != "when"})


def _write_gemm_point(backend: str, target: str, config: dict, shape: dict | None, dtype: str, device_name: str,
                      provenance: str, path: Path | None) -> tuple[Path, dict]:
    """A GEMM point as an entry of the table it refines, where it wins where it holds: on NVIDIA the
    device's entry for this exact problem (replacing one for the same problem); on CDNA3 the
    device's form of the problem's shape class for this dtype's width; on TPU the target's entry
    for problems at least this large; on Trainium the target's default block (before the named
    ones, which a name still picks)."""
    from ceiling import tables
    from ceiling.gemm.spec import BYTES, shipped_problem

    m, n, k = (int(shape[a]) for a in ("M", "N", "K")) if shape else (None, None, None)
    device, after = target, (lambda e: True)
    if backend == "nvidia":
        device = tables.model(backend, device_name)
        when = f"dtype == '{dtype}' and M == {m} and N == {n} and K == {k}"
    elif backend == "amd":
        device = tables.model(backend, device_name)
        found = tables.lookup(backend, "gemm", None, target, shipped_problem(m, n, k, dtype).features())
        when = next(e["when"] for e in tables.read(tables.path(backend, target, "gemm"))["entries"]
                    if e.get("label") == found.labels[-1])
        when = f"dtype_bytes == {BYTES[dtype]} and {when}"
    elif backend == "tpu":
        kernel_dtype = "bfloat16" if dtype == "bfloat16" else "float32"
        when = f"kernel_dtype == '{kernel_dtype}' and M >= {m} and N >= {n} and K >= {k}"
        provenance += " (for problems at least this large)"
    else:
        when, after = None, (lambda e: "when" not in e)
        name = f"imported_{m}x{n}x{k}" if shape else "imported"
        config = {"name": name, **{key: v for key, v in config.items() if key != "target"},
                  "resident_m_blocks": config.get("resident_m_blocks")}
        provenance += " (the target's default config now)"
    path = path or tables.path(backend, device, "gemm")
    table = tables.read(path) if path.exists() else {
        "family": "gemm", "device": device, "about": f"GEMM configs that refine {target}'s on the {device}.",
        "entries": []}
    table = {**table, "entries": [e for e in table["entries"] if when is None or e.get("when") != when]}
    _file_after(table, when, dict(config), provenance, after)
    return path, table
# ------------------------------------------------------------------- the triangle ops' tables (ceiling.tables)

_TRIANGLE_OPS = {"triangle_attention": "triangle_attention", "triangle_multiplication": "triangle_multiplicative_update"}
# the triangle tables of their own (on TPU and Trainium triangle attention reads attention's)
_TRIANGLE_TABLES = {("triangle_attention", "nvidia"), ("triangle_attention", "amd"), ("triangle_multiplication", "nvidia"),
                    ("triangle_multiplication", "amd"), ("triangle_multiplication", "tpu")}


def _triangle_problem(family: str, dtype: str, head_dim: int | None, target: str, gpu: str | None):
    import dataclasses

    from ceiling.triangle.spec import SHIPPED_GPUS, shipped_attention_problem, shipped_trimul_problem

    problem = (shipped_attention_problem(head_dim or 32, dtype) if family == "triangle_attention"
               else shipped_trimul_problem(dtype))
    return dataclasses.replace(problem, device="cuda:0" if gpu else "cpu", gpu=gpu,
                               arch=SHIPPED_GPUS[target][1] if gpu else None)


def _head_dims(entries: list[dict]) -> list[int]:
    """One head dim per bucket of a triangle-attention table: each ``head_dim <= d`` bound, and 256
    for the bucket above them."""
    import re

    bounds = {int(m) for e in entries for m in re.findall(r"head_dim <= (\d+)", e.get("when") or "")}
    return sorted(bounds | {256})


def _triangle_shipped(family: str, target: str, dtype: str) -> list[tuple]:
    """(shape, config, device key, label, source) of what each table of ``family`` on ``target``
    (the target's, then each device's own) resolves to, per head-dim bucket for attention."""
    from ceiling import tables
    from ceiling.op import get, resolve_config

    backend = spaces.get(family, target).backend
    impl = get(_TRIANGLE_OPS[family]).implementation(spaces.target_info(target)["backend"], "triton")
    devices = [target, *(d for d in tables.devices(backend) if d != target and tables.path(backend, d, family).exists()
                         and target not in _newer_targets())]  # no device's own table serves a newer target
    entries = tables.read(tables.path(backend, _base_target(target), family))["entries"]
    out = []
    from ceiling.triangle.spec import SHIPPED_GPUS

    for device in devices:
        # the target's own configs; a newer target's are its GPU's (derived: nothing is tuned there)
        own = SHIPPED_GPUS[target][0] if target in _newer_targets() else None
        gpu = own if device == target else device
        for head_dim in _head_dims(entries) if family == "triangle_attention" else [None]:
            config = resolve_config(_triangle_problem(family, dtype, head_dim, target, gpu), impl, None)
            label = f"{device}" + (f" head_dim {head_dim}" if head_dim else "")
            out.append(({"head_dim": head_dim} if head_dim else None, config.as_dict(),
                        _device_key(device) if device != target else "", label, config.source))
    return out


def _write_triangle_point(family: str, target: str, config: dict, shape: dict | None, dtype: str,
                          device_name: str, provenance: str, path: Path | None) -> tuple[Path, dict]:
    """``config`` filed as an entry of the device's table (nvidia, amd: the device the point was
    found for; tpu: the generation's) for the problems of ``shape`` and ``dtype``, replacing the
    sections of an entry with the same condition. A new device table also repeats the target's
    float32 entries of that bucket, which stay in force over it as they did over the target's."""
    from ceiling import tables

    backend = spaces.get(family, target).backend
    if backend == "tpu":
        from ceiling.tpu.triangle_multiplication import kernel_dtype

        device, when, extra = target, f"kernel_dtype == '{kernel_dtype(dtype)}'", []
    else:
        device = _table_device(backend, device_name)
        head_dim = _heads(shape, 32) if family == "triangle_attention" else None
        half, single = (_triangle_problem(family, d, head_dim, target, None).features()
                        for d in ("bfloat16", "float32"))
        target_entries = tables.read(tables.path(backend, target, family))["entries"]
        bucket = next(e for e in target_entries if tables.matches(e, half) and tables.matches(e, single))
        when = bucket.get("when")
        extra = [e for e in target_entries if tables.matches(e, single) and not tables.matches(e, half)]
    path = path or tables.path(backend, device, family)
    table = tables.read(path) if path.exists() else {
        "family": family, "device": device, "about": f"{family} configs of the {device}, merged over the {target} "
                                                     "entries.", "entries": []}
    entries = [dict(e) for e in table["entries"]]
    entry = {**({"when": when} if when else {}), "config": config, "source": "derived", "why": provenance}
    at = next((i for i, e in enumerate(entries) if e.get("when") == when), None)
    if at is None:
        entries += [entry, *(e for e in extra if e not in entries)]
    else:  # the kernels the point does not name keep their sections
        entries[at] = {**entry, "config": {**entries[at]["config"], **config}}
    return path, {**table, "entries": entries}


def format_json(data: Any, width: int = 110, indent: int = 0) -> str:
    """JSON with every object or list that fits in ``width`` on one line: tables stay readable
    and a written point is a one-line diff."""
    flat = json.dumps(data)
    if not isinstance(data, (dict, list)) or len(flat) + indent <= width:
        return flat
    pad = " " * (indent + 1)
    if isinstance(data, dict):
        items = [f"{pad}{json.dumps(k)}: {format_json(v, width, indent + 1 + len(json.dumps(k)) + 2)}"
                 for k, v in data.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    return "[\n" + ",\n".join(pad + format_json(v, width, indent + 1) for v in data) + "\n" + " " * indent + "]"
