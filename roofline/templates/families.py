"""What a template needs per kernel family beyond its space's data: one small adapter each.

For every family, per backend:

* :func:`shipped`: the configs the vendor's table ships (its best points), each as a flat
  point with the problem it was chosen for, read through the vendor module's own resolver so
  a point is what the kernel would run;
* :func:`check_point`: the target's own check of one point: compiled for sm_90a or gfx942
  (``kernels.isa``, static facts back), the TPU config rules (``kernels/tpu/*_rules.py``), or
  the NKI emulator's hardware rules in a dry run (trn1, trn2);
* :func:`write_point`: a found point written into the vendor's table (``ceiling import-point``).

A new family adds its branch to these three functions and a JSON file under kernels/spaces.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernels import spaces

REPO = Path(__file__).resolve().parents[2]
_BUCKETS = {"d<=32": 32, "d<=64": 64, "d<=128": 128, "any": 256}  # triangle attention's head-dim buckets (largest)


@dataclass
class Shipped:
    shape: dict[str, int] | None  # the problem (or the part of it: a head dim) it was chosen for; None: any
    config: dict[str, Any]  # flat (dotted) names
    device: str = ""  # published device key, "" for any device of the target
    label: str = ""
    source: str = ""


def _bytes(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


def _device_key(name: str) -> str:
    from roofline import devices

    spec = devices.match(name)
    return spec.key if spec else ""


def table_path(family: str, target: str) -> Path | None:
    table = spaces.get(family, target).table
    return REPO / table if table else None


def _read(family: str, target: str) -> dict:
    return json.loads(table_path(family, target).read_text())


# --------------------------------------------------------------------------------------- shipped


def _gemm_walk(data: Any, names: list[str], dtype: str) -> list[Shipped]:
    """The Triton GEMM tables: any dict holding BLOCK_M and BLOCK_N is a config; its shape is in
    its entry (``"shape": [M, N, K]``), its device the key it sits under ("H200"), its label the
    class it is named by ("skinny_m16"). Candidate lists are not best points."""
    found: list[Shipped] = []

    def walk(node: Any, ctx: dict[str, Any]) -> None:
        if isinstance(node, dict):
            ctx = dict(ctx)
            shape = node.get("shape")
            if isinstance(shape, (list, tuple)) and len(shape) == 3:
                ctx["shape"] = dict(zip(("M", "N", "K"), map(int, shape)))
            for key in ("dtype", "source"):
                if isinstance(node.get(key), str):
                    ctx[key] = node[key]
            if "BLOCK_M" in node and "BLOCK_N" in node:
                if ctx.get("dtype", dtype) == dtype:
                    found.append(Shipped(ctx.get("shape"), {k: node[k] for k in names if k in node},
                                         ctx.get("device", ""), ctx.get("label", ""), ctx.get("source", "")))
                return
            for key, value in node.items():
                if key in ("candidates", "about"):
                    continue
                sub = dict(ctx, label=str(key))
                if _device_key(str(key)):
                    sub["device"] = _device_key(str(key))
                walk(value, sub)
        elif isinstance(node, list):
            for item in node:
                walk(item, ctx)

    walk(data, {})
    return found


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
    if family == "gemm" and backend in ("nvidia", "amd"):
        return _gemm_walk(_read(family, target), names, dtype)
    if family == "gemm_fp8" and backend == "nvidia":  # entries per device, each for one shape and scaling
        for device, entries in _read(family, target)["devices"].items():
            out += [Shipped(dict(zip(("M", "N", "K"), e["shape"])), flat({**e["config"], "SCALES": e["scales"]}),
                            _device_key(device), f"{device} {e['scales']}", e.get("source", ""))
                    for e in entries if e["dtype"] == dtype]
        return out
    if family == "gemm_fp8" and backend == "amd":  # a config per shape class, labelled with the scaling it was sized for
        from kernels.amd import gemm_fp8 as amd_fp8

        for device, own in _read(family, target)["devices"].items():
            if "configs" in own:  # a device that only inherits another's tiles adds no point
                out += [Shipped(None, flat(c), _device_key(device), f"{device} {cls}", "")
                        for cls, c in amd_fp8.device_entry(device)["configs"].items()]
        return out
    if family == "gemm" and backend == "tpu":
        table = _read(family, target)[target][dtype if dtype in ("bfloat16", "float32") else "float32"]
        for entry in [table["fallback"], *table["entries"]]:
            bounds = "M>={min_m}, N>={min_n}, K>={min_k}"
            label = "fallback" if entry is table["fallback"] else bounds.format(**entry)
            out.append(Shipped(None, flat(entry), "", label, entry.get("provenance", "")))
        return out
    if family in ("gemm", "attention", "triangle_attention") and backend == "trainium":
        from kernels.trainium import attention as trn_attention
        from kernels.trainium import gemm as trn_gemm

        if family == "gemm":
            return [Shipped(None, flat(c), "", c.get("name", ""), "") for c in trn_gemm.configs(target)]
        rows = trn_attention.configs(target)
        if family == "triangle_attention":
            rows = [next(c for c in rows if c["head_dim"] >= 32)]
        head_dim = (lambda c: 32) if family == "triangle_attention" else (lambda c: c["head_dim"])
        return [Shipped({"head_dim": head_dim(c)}, flat(c), "", c["name"], "") for c in rows]
    if family in ("attention", "triangle_attention") and backend == "tpu":
        table = json.loads((REPO / spaces.get("attention", target).table).read_text())[target].get(dtype, {})
        for head_dim, entry in table.items():
            if family == "triangle_attention" and int(head_dim) != 128:
                continue
            shape = {"head_dim": 32 if family == "triangle_attention" else int(head_dim)}
            out.append(Shipped(shape, flat(entry), "", f"head_dim {head_dim}", entry.get("provenance", "")))
        return out
    if family == "attention_gluon":
        for head_dim, entry in _read(family, target)["sm90"].items():
            out.append(Shipped({"head_dim": int(head_dim)}, flat(entry), "", f"sm90 head_dim {head_dim}", ""))
        return out
    if family == "attention":
        import importlib

        module = importlib.import_module(f"kernels.{backend}.attention")
        key = "sm90" if backend == "nvidia" else target
        for pad, entry in module._tuned().get(key, {}).items():
            out.append(Shipped({"head_dim": int(pad)}, flat(module.select_config(int(pad), key)), "",
                               f"{key} head_dim {pad}", ""))
            if backend == "nvidia" and "causal" in entry:
                out.append(Shipped({"head_dim": int(pad)}, flat(module.select_config(int(pad), key, causal=True)), "",
                                   f"{key} head_dim {pad}, causal", ""))
        return out
    if family in ("triangle_attention", "triangle_multiplication") and backend in ("nvidia", "amd"):
        import importlib

        module = importlib.import_module(f"kernels.{backend}.{family}")
        table = _read(family, target)
        for device, entry in table.items():
            if device.startswith("_"):
                continue
            name = None if device == "default" else device
            if family == "triangle_attention":
                for bucket in entry:
                    head_dim = _BUCKETS[bucket]
                    config = module.resolve_config(name, head_dim, dtype, None)
                    out.append(Shipped({"head_dim": head_dim}, flat(config),
                                       _device_key(device) if name else "", f"{device} {bucket}", ""))
            else:
                out.append(Shipped(None, flat(module.resolve_config(name, dtype, None)),
                                   _device_key(device) if name else "", device, ""))
        return out
    if family == "triangle_multiplication" and backend == "tpu":
        entry = _read(family, target)[target].get(dtype if dtype in ("bfloat16", "float32") else "float32")
        return [Shipped(None, flat(entry), "", dtype, entry.get("provenance", ""))] if entry else []
    raise NotImplementedError(f"no shipped-config reader for {family} on {target}")


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
        from kernels import isa

        specs = compile_specs(family, target, config, shape, dtype, only)
        return [isa.profile(spec, target).as_dict() for spec in specs]
    if backend == "tpu":
        from kernels.tpu import attention_rules, gemm_rules, trimul_rules

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
            from kernels.trainium import gemm as trn_gemm

            m, n, k = ((shape or {}).get(a, 1024) for a in ("M", "N", "K"))
            report, resolved, ctx = trn_gemm.estimate(m, n, k, dtype=dtype, target=target, config=config)
        else:
            from kernels.trainium import attention as trn_attention

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
    from kernels.nvidia.gluon import static_check

    result = static_check.check(spec)
    if result["violations"]:
        raise ValueError(f"{spec.name} {spec.knobs}: " + "; ".join(result["violations"]))
    parts = result["facts"]["partitions"]
    return {"kernel": spec.name, "config": spec.config, "summary": result["summary"],
            "tensor_core_instructions": sum(p["hgmma"] for p in parts),
            "shared_bytes": result["facts"]["shared_bytes"], "spill_bytes": result["facts"]["spill_bytes"]}


def compile_specs(family: str, target: str, config: dict, shape: dict | None = None, dtype: str = "bfloat16",
                  only: str | None = None) -> list:
    """``kernels.isa.CompileSpec``s of every kernel of one point on a Triton target (of the ``only``
    kernel, a section's name, when given); sections a point leaves out take the table's entry."""
    backend = spaces.get(family, target).backend
    if family == "gemm":
        import importlib

        return [importlib.import_module(f"kernels.{backend}.gemm").compile_spec(dict(config), dtype)]
    if family == "gemm_fp8":  # e4m3 operands (e4m3fnuz on gfx942); dtype names them if FP8, else the output
        import importlib

        module = importlib.import_module(f"kernels.{backend}.gemm_fp8")
        a_kind, b_kind = config.get("SCALES", "1x128/128x128").split("/")
        fp8 = {"nvidia": "float8_e4m3fn", "amd": "float8_e4m3fnuz"}[backend]
        operands, out = (dtype, "bfloat16") if dtype.startswith("float8") else (fp8, dtype)
        if backend == "nvidia":
            return [module.compile_spec(dict(config), a_kind, b_kind, operands, operands, out)]
        return [module.compile_spec(dict(config), a_kind, b_kind, operands, out)]
    if family == "attention_gluon":  # kernels.nvidia.gluon.static_check specs: causal, the table's other kernel
        from kernels.nvidia.gluon import static_check

        head_dim = _heads(shape, 128)
        entry = static_check.table()["sm90"][str(head_dim)]
        return [static_check.spec(kernel, head_dim, True, {**entry[kernel], **config.get(kernel, {})}, dtype)
                for kernel in ("fwd", "bwd") if kernel in entry and only in (None, kernel)]
    if family == "attention":
        from kernels.triton import attention as flash

        head_dim = _heads(shape, 128)
        if backend == "nvidia":
            from kernels.nvidia import attention as A

            cfg = flash.merge_config(A.heuristic(flash.head_dim_pad(head_dim)), config)
            specs = flash.kernel_specs(head_dim, cfg, dtype=dtype, causal=True, prefix="point_")
        else:
            from kernels.amd import attention as M

            cfg = flash.merge_config(M.heuristic(flash.head_dim_pad(head_dim)), config)
            specs = flash.kernel_specs(head_dim, cfg, dtype=dtype, causal=True, use_tma=False,
                                       pre_load_v=bool(cfg.get("pre_load_v")), prefix="point_amd_")
        return [s for s in specs if only in (None, s.config["kernel"])]
    if family == "triangle_attention":
        from kernels.triton import triangle_attention as T

        extra = ("waves_per_eu", "matrix_instr_nonkdim") if backend == "amd" else ()
        head_dim = _heads(shape, 32)
        return [T.kernel_spec(name, cfg, dtype, head_dim, prefix=f"point_{backend}", extra_keys=extra, aligned=True)
                for name, cfg in config.items() if isinstance(cfg, dict) and only in (None, name)]
    if family == "triangle_multiplication":
        import importlib

        module = importlib.import_module(f"kernels.{backend}.triangle_multiplication")
        c_z, c = int((shape or {}).get("c_z", 128)), int((shape or {}).get("c", 128))
        cfgs = module.resolve_config(None, dtype, config)
        if backend == "nvidia":
            specs = module.compile_specs(dtype, c_z, c, cfgs=cfgs, prefix="point")
        else:
            from kernels.triton import triangle_multiplication as shared

            specs = shared.compile_specs(dtype, c_z, c, "", table=module.CONFIG_FILE, cfgs=cfgs, prefix="point_cdna3",
                                         extra_keys=module.AMD_OPTIONS)
        return [s for s in specs if only is None or f"_{only}_{dtype}_" in s.name]
    raise NotImplementedError(f"no compile specs for {family} on {target}")


# ------------------------------------------------------------------------------ writing a point back


def _table_device(backend: str, device_name: str) -> str:
    """The key a vendor's table files a device under ("NVIDIA H200" -> "H200")."""
    for word in device_name.replace("(", " ").replace(")", " ").split():
        if any(ch.isdigit() for ch in word) and word.upper() == word:
            return word
    return device_name


def write_point(family: str, target: str, config: dict, shape: dict | None, dtype: str, device_name: str,
                provenance: str, path: Path | None = None) -> tuple[Path, dict]:
    """The vendor table of ``family`` on ``target`` with ``config`` (sectioned, checked) filed for
    ``shape`` and ``dtype`` on ``device_name``, and a provenance line; returns (path, new table).
    Nothing is written here: the caller writes the table (``ceiling import-point --apply``)."""
    space = spaces.get(family, target)
    backend = space.backend
    path = path or table_path(family, target)
    if path is None:
        raise NotImplementedError(f"{family} on {target} has no config table")
    table = json.loads(path.read_text())
    device = _table_device(backend, device_name)
    key = None
    if family == "gemm" and backend == "nvidia":
        m, n, k = (int(shape[a]) for a in ("M", "N", "K"))
        entries = table["devices"].setdefault(device, [])
        entries[:] = [e for e in entries if not (e["dtype"] == dtype and list(e["shape"]) == [m, n, k])]
        entries.append({"dtype": dtype, "shape": [m, n, k], "source": "imported", "provenance": provenance,
                        "config": dict(config)})
    elif family == "gemm" and backend == "amd":
        from kernels.amd import gemm as G
        from kernels.gemm.spec import GemmProblem

        problem = GemmProblem("torch", None, int(shape["M"]), int(shape["N"]), int(shape["K"]), dtype, dtype, None,
                              None, "cpu", False)
        entry = table["devices"].setdefault(device, {"inherits": table["default_device"]})
        key = G.shape_class(problem, device if device in table["devices"] else None)
        entry.setdefault("configs", {})[key] = {**G.device_entry(device)["configs"][key], **config}
        entry.setdefault("imported", {})[key] = provenance
    elif family == "gemm_fp8" and backend == "nvidia":
        m, n, k = (int(shape[a]) for a in ("M", "N", "K"))
        scales = config["SCALES"]
        entries = table["devices"].setdefault(device, [])
        entries[:] = [e for e in entries if not (e["dtype"] == dtype and e["scales"] == scales
                                                  and list(e["shape"]) == [m, n, k])]
        entries.append({"dtype": dtype, "scales": scales, "shape": [m, n, k], "source": "imported",
                        "provenance": provenance, "config": {k_: v for k_, v in config.items() if k_ != "SCALES"}})
    elif family == "gemm_fp8" and backend == "amd":
        from kernels.amd import gemm_fp8 as amd_fp8

        a_kind, b_kind = config["SCALES"].split("/")
        entry = table["devices"].setdefault(device, {"inherits": table["default_device"]})
        known = device if device in amd_fp8._table()["devices"] else table["default_device"]
        key = amd_fp8.shape_class(int(shape["M"]), a_kind, b_kind)
        # a device's own "configs" replace its parent's whole (device_entry): start from all of them
        configs = entry.setdefault("configs", json.loads(json.dumps(amd_fp8.device_entry(known)["configs"])))
        configs[key] = {**configs[key], **config}
        entry.setdefault("imported", {})[key] = provenance
    elif family == "gemm" and backend == "tpu":
        entries = table[target][dtype]["entries"]
        entries.insert(0, {"min_m": int(shape["M"]), "min_n": int(shape["N"]), "min_k": int(shape["K"]), **config,
                           "provenance": f"{provenance} (the first entry a problem at least this large meets)"})
    elif family == "gemm" and backend == "trainium":
        rows = table["targets"][target]
        name = f"imported_{shape['M']}x{shape['N']}x{shape['K']}" if shape else "imported"
        rows.insert(0, {"name": name, **{k: v for k, v in config.items() if k != "target"},
                        "resident_m_blocks": config.get("resident_m_blocks")})
        table.setdefault("provenance", {})[f"{target}/{name}"] = provenance + " (the target's default config now)"
    elif family in ("attention", "triangle_attention") and backend == "tpu":
        head_dim = str(-(-_heads(shape, 128) // 128) * 128)
        table[target].setdefault(dtype, {})[head_dim] = {**config, "provenance": provenance}
    elif family in ("attention", "triangle_attention") and backend == "trainium":
        head_dim = _heads(shape, 128)
        buckets = table["targets"][target]
        bucket = next((b for b in sorted(buckets, key=int) if int(b) >= head_dim), max(buckets, key=int))
        buckets[bucket] = {**buckets[bucket], **{k: v for k, v in config.items() if k != "target"},
                           "name": f"imported_d{bucket}"}
        table.setdefault("provenance", {})[f"{target}/{bucket}"] = provenance
    elif family == "attention_gluon":  # the tiles only: a Gluon config becomes a default by a device run
        head_dim = str(_heads(shape, 128))
        entry = table["sm90"].setdefault(head_dim, {})
        for section, values in config.items():
            entry[section] = {**entry.get(section, {}), **values}
        table.setdefault("_provenance", {})[f"sm90/{head_dim}"] = provenance
    elif family == "attention":
        from kernels.triton import attention as flash

        key = "sm90" if backend == "nvidia" else target
        pad = str(flash.head_dim_pad(_heads(shape, 128)))
        entry = table.setdefault(key, {}).setdefault(pad, {})
        for section, values in config.items():
            if isinstance(values, dict):
                entry[section] = {**entry.get(section, {}), **values}
            else:
                entry[section] = values
        table.setdefault("_provenance", {})[f"{key}/{pad}"] = provenance
    elif family in ("triangle_attention", "triangle_multiplication") and backend in ("nvidia", "amd"):
        base = table.get(device) or json.loads(json.dumps(table["default"]))
        if family == "triangle_attention":
            head_dim = _heads(shape, 32)
            bucket = next(b for b, d in _BUCKETS.items() if head_dim <= d and b in base)
            target_entry = base[bucket]
        else:
            target_entry = base
        for section, values in config.items():
            if isinstance(values, dict):
                kept = {k: v for k, v in target_entry.get(section, {}).items() if k == "float32"}
                target_entry[section] = {**values, **kept}
            else:
                target_entry[section] = values
        table[device] = base
        table.setdefault("_provenance", {})[device] = provenance
    elif family == "triangle_multiplication" and backend == "tpu":
        table[target][dtype] = {**config, "provenance": provenance}
    else:
        raise NotImplementedError(f"no table writer for {family} on {target}")
    return path, table


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
