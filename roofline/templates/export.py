"""Build a template per (kernel family, target) from the space data, the shipped configs and the records.

Written per template folder ``<out>/<family>/<target>/``:

* ``template.json``: the template (``roofline.templates.schema.Template``);
* ``records.jsonl``: every kernel record of that family and backend, one
  ``microbench.records.Record`` per line (the store's data, cited or not);
* ``kernel_tuner/<MxNxK>.json``: for every shape with measured configs, a Kernel
  Tuner cache file that its simulation mode replays
  (``roofline.templates.adapters.kernel_tuner_search``).

Best points, priors and caches cite only the timings the performance model is
fit by (``roofline.selection.select``: our kernels, device time, one timing
method per fit unit), each with the method it was timed by; a shipped point
measured only by timings the rules leave out says why instead of citing them.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from microbench.records import Record, _git_commit
from roofline import devices, model as _model
from roofline import selection as _selection
from roofline.machine import Machine, from_ceilings
from roofline.work import normalize_shape, record_dtype
from roofline import ceilings as _ceilings
from roofline.templates.schema import BestPoint, CostModel, Constraint, Measured, Parameter, Template, config_key

SPACES = Path(__file__).parent / "spaces"
REPO = Path(__file__).resolve().parents[2]


def families() -> list[str]:
    return sorted(p.stem for p in SPACES.glob("*.json"))


def space(family: str) -> dict[str, Any]:
    path = SPACES / f"{family}.json"
    if not path.exists():
        raise KeyError(f"no search space for {family!r}; known: {families()}")
    return json.loads(path.read_text())


def targets(family: str) -> list[str]:
    return list(space(family)["targets"])


# --- shipped configs ------------------------------------------------------------------------------

_SHAPE_KEY = re.compile(r"^\D*(\d+)\D+(\d+)\D+(\d+)\D*$")


def _shape_from(d: dict[str, Any], axes: list[str]) -> dict[str, int] | None:
    lowered = {str(k).upper(): v for k, v in d.items()}
    if all(a in lowered for a in axes):
        try:
            return {a: int(lowered[a]) for a in axes}
        except (TypeError, ValueError):
            return None
    for key in ("shape", "problem", "workload"):
        if isinstance(d.get(key), dict):
            return _shape_from(d[key], axes)
        if isinstance(d.get(key), (list, tuple)) and len(d[key]) == len(axes):
            return dict(zip(axes, map(int, d[key])))
    return None


def shipped_points(data: Any, names: list[str], axes: list[str], dtype: str) -> list[dict[str, Any]]:
    """Every config in a vendor's config file: ``{shape, config, device, label, source}``.

    The vendor files are plain JSON written by the kernel authors; any dict that
    holds the template's tile parameters is a config. Its shape is read from the
    dict itself, its parent, or the key it sits under ("4096x4096x4096"); the
    device from an enclosing key that names one ("H200", "MI300X"). A parameter the
    config leaves out is taken from an enclosing entry that names it (the FP8 table's
    ``"scales"`` for ``SCALES``). Entries for another dtype and candidate lists
    (``candidates``) are not best points.
    """
    found: list[dict[str, Any]] = []

    def walk(node: Any, ctx: dict[str, Any]) -> None:
        if isinstance(node, dict):
            ctx = dict(ctx)
            ctx["shape"] = _shape_from(node, axes) or ctx.get("shape")
            for key in ("dtype", "source"):
                if isinstance(node.get(key), str):
                    ctx[key] = node[key]
            if "BLOCK_M" in node and "BLOCK_N" in node:
                if ctx.get("dtype", dtype) == dtype:
                    inherited = {k: v for k, v in ctx.get("params", {}).items() if k not in node}
                    found.append({"shape": ctx.get("shape"),
                                  "config": {**inherited, **{k: node[k] for k in names if k in node}},
                                  "device": ctx.get("device", ""), "label": ctx.get("label", ""),
                                  "source": ctx.get("source", "")})
                return
            params = {n: node[k] for n in names for k in (n, n.lower()) if isinstance(node.get(k), (str, int, bool))}
            if params:
                ctx["params"] = {**ctx.get("params", {}), **params}
            for key, value in node.items():
                if key in ("candidates", "about"):
                    continue
                sub = dict(ctx, label=str(key))
                m = _SHAPE_KEY.match(str(key))
                if m and len(axes) == 3:
                    sub["shape"] = dict(zip(axes, map(int, m.groups())))
                spec = devices.match(str(key))
                if spec is not None:
                    sub["device"] = spec.key
                walk(value, sub)
        elif isinstance(node, list):
            for item in node:
                walk(item, ctx)

    walk(data, {})
    return found


def _shipped(family: str, backend: str, names: list[str], axes: list[str], dtype: str) -> tuple[list, str | None]:
    path = REPO / "kernels" / backend / "configs" / f"{family}.json"
    if not path.exists():
        return [], None
    return shipped_points(json.loads(path.read_text()), names, axes, dtype), str(path.relative_to(REPO))


# --- building ---------------------------------------------------------------------------------------


def _records_for(records: list[Record], op: str, backend: str, dtype: str) -> list[Record]:
    return [r for r in records if r.kind == "kernel" and r.op == op and (r.backend == backend or r.name == backend)
            and r.metric == "time" and record_dtype(r.shape, r.config, r.extra) == dtype]


def _measured(r: Record, flops: float | None, timing: str | None) -> Measured:
    median = float(r.median if r.median is not None else r.value)
    prov = r.provenance.model_dump()
    return Measured(median_s=median, p20_s=r.p20, p80_s=r.p80, tflops=(flops / median / 1e12) if flops else None,
                    method=r.method, timing=timing, repetitions=r.repetitions, provenance=prov)


def cited(records: list[Record], op: str, backend: str, dtype: str, device: devices.DeviceSpec
          ) -> tuple[list[tuple[Record, str]], dict[int, str]]:
    """Our kernel timings of one family and target that a template may cite, each with the timing method
    it was admitted under, by the same rules the model is fit by (``roofline.selection.select``: device
    time, one method per fit unit); and, for the others, ``id(record)`` -> why not."""
    chosen = _selection.select(records)
    admitted = _selection.admitted(chosen)
    why = {id(e.record): e.reason for e in chosen.excluded}
    mine = [r for r in _records_for(records, op, backend, dtype) if devices.match(r.provenance.device) in (device, None)]
    return [(r, admitted[id(r)]) for r in mine if id(r) in admitted], {id(r): why[id(r)] for r in mine if id(r) in why}


def _shape_of(r: Record, axes: list[str]) -> dict[str, int]:
    shape = normalize_shape(r.op, r.shape)
    return {a: int(shape[a]) for a in axes if a in shape}


def _priors(parameters: list[Parameter], good: list[dict]) -> None:
    """Probability per value: how often it appears among the good points (add-one smoothed)."""
    for p in parameters:
        counts = Counter(str(c.get(p.name)) for c in good)
        total = sum(counts[str(v)] + 1 for v in p.values)
        p.prior = {str(v): round((counts[str(v)] + 1) / total, 4) for v in p.values}


def build(family: str, target: str, records: list[Record], perf: _model.PerfModel | None = None,
          machine: Machine | None = None, accuracy: dict | None = None, top_k: int = 5) -> Template:
    sp = space(family)
    tgt = sp["targets"][target]
    spec = devices.get(tgt["device"])
    if machine is None:
        machine = from_ceilings(_ceilings.for_device(records, spec.key))
    perf = perf or _model.PerfModel()
    axes, op, backend = sp["axes"], sp["op"], tgt["backend"]
    parameters = [Parameter(name=n, **d) for n, d in tgt["parameters"].items()]
    names = [p.name for p in parameters]
    template = Template(
        family=family, op=op, target=target, backend=backend, device=spec.key, device_name=spec.name,
        entry=sp["entry"], axes=axes, dtype=sp["dtype"], parameters=parameters,
        launch_options=tgt.get("launch_options", []),
        device_limits={k: v for k, v in spec.limits.items()},
        constraints=[Constraint(**c) for c in tgt["constraints"]],
        workloads=list(sp["workloads"]),
        cost_model=CostModel(
            flops=sp["cost"]["flops"], bytes=sp["cost"]["bytes"], mode=perf.mode(machine.key, op),
            terms=list(_model.TERMS), coefficients=dict(perf.coefs(machine.key, op)),
            machine={"key": machine.key, "units": machine.units, "flops": machine.flops,
                     "bandwidth": machine.bandwidth, "measured": machine.measured},
            accuracy=accuracy,
        ),
        provenance={"git_commit": _git_commit(),
                    "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    "author": "hand-tuned kernels; space and constraints from roofline/templates/spaces"},
    )

    def predict(shape: dict, config: dict) -> float:
        return perf.predict(op, {**shape, "dtype": sp["dtype"]}, config, machine, sp["dtype"]).seconds

    admitted, left_out = cited(records, op, backend, sp["dtype"], spec)
    timing: dict[int, str] = {}
    mine = []
    for r, method in admitted:
        r = r.model_copy(update={"config": template.complete(r.config)})
        if set(names) <= set(r.config):
            timing[id(r)] = method
            mine.append(r)
    # the points measured only by timings the rules leave out: cited with the reason, never with the number
    unmeasured: dict[tuple[str, str], str] = {}
    for r in _records_for(records, op, backend, sp["dtype"]):
        if id(r) in left_out:
            config = template.complete(r.config)
            if set(names) <= set(config):
                key = (config_key(_shape_of(r, axes)), config_key({k: config[k] for k in names}))
                unmeasured.setdefault(key, left_out[id(r)])
    template.measurements = {
        "selection": "roofline.selection.select (the rules the model is fit by)",
        "event_min_seconds": _selection.EVENT_MIN_SECONDS,
        "cited": len(mine), "timing": dict(Counter(timing.values())),
        "left_out": dict(Counter(left_out.values())),
    }
    shapes = {config_key(_shape_of(r, axes)): _shape_of(r, axes) for r in mine}
    shipped, shipped_from = _shipped(family, backend, names, axes, sp["dtype"])
    shipped = [p for p in shipped if p["device"] in ("", spec.key)]
    for p in shipped:
        if p["shape"]:
            shapes.setdefault(config_key(p["shape"]), p["shape"])
    for w in template.workloads:
        shapes.setdefault(config_key(w), w)
    template.workloads = list(shapes.values())

    # the hand-tuned points, with their measurement where one exists
    by_point: dict[tuple[str, str], Record] = {}
    for r in mine:
        key = (config_key(_shape_of(r, axes)), config_key({k: r.config[k] for k in names}))
        if key not in by_point or (r.median or r.value) < (by_point[key].median or by_point[key].value):
            by_point[key] = r
    baselines = _baselines(records, op, axes, spec)
    good: list[dict] = []
    for p in shipped:
        shape, config = p["shape"], template.complete(p["config"])
        key = (config_key(shape), config_key(config)) if shape else None
        rec = by_point.get(key) if key else None
        flops = _flops(shape)
        detail = ", ".join(x for x in (p["label"] if not shape else "", p["source"]) if x)
        template.best_points.append(BestPoint(
            shape=shape, config=config, source=f"shipped config {shipped_from}" + (f" ({detail})" if detail else ""),
            measured=_measured(rec, flops, timing[id(rec)]) if rec else None,
            unmeasured=unmeasured.get(key) if key and not rec else None,
            predicted_s=predict(shape, config) if shape and set(config) == set(names) and template.is_valid(config)
            else None,
            baseline=baselines.get(config_key(shape)) if shape else None,
        ))
        good.append(config)
    # the measured best per shape, where the records found one the shipped table does not hold
    per_shape: dict[str, list[tuple[dict, Record]]] = defaultdict(list)
    for (skey, _), r in by_point.items():
        per_shape[skey].append(({k: r.config[k] for k in names}, r))
    for skey, rows in per_shape.items():
        rows.sort(key=lambda cr: cr[1].median or cr[1].value)
        good.extend(c for c, _ in rows[: max(1, len(rows) // 10)])
        best_cfg, best_rec = rows[0]
        shape = json.loads(skey)
        if not any(b.shape == shape and b.config == best_cfg for b in template.best_points):
            template.best_points.append(BestPoint(
                shape=shape, config=best_cfg, source="records: fastest measured config",
                measured=_measured(best_rec, _flops(shape), timing[id(best_rec)]), predicted_s=predict(shape, best_cfg),
                baseline=baselines.get(skey)))
    _priors(template.parameters, good)
    for p in template.parameters:
        if p.prior:
            p.default = max(p.values, key=lambda v: p.prior[str(v)])

    # the model's picks per workload
    for shape in template.workloads:
        valid = template.valid_points(shape)
        scored = sorted(((predict(shape, c), c) for c in valid), key=lambda sc: sc[0])[:top_k]
        template.cost_model.predictions.append({
            "shape": shape, "valid_points": len(valid),
            "top": [{"config": c, "predicted_s": s} for s, c in scored],
        })
    return template


def _flops(shape: dict | None) -> float | None:
    if not shape:
        return None
    return 2.0 * shape["M"] * shape["N"] * shape["K"] * int(shape.get("batch") or 1)


def _baselines(records: list[Record], op: str, axes: list[str], spec: devices.DeviceSpec) -> dict[str, dict]:
    """The vendor library's time per shape (records named like ``torch.matmul``), held to the same
    timing rule as our kernels (``roofline.selection.timing_reason``)."""
    out: dict[str, dict] = {}
    for r in records:
        if r.kind != "kernel" or r.op != op or not r.name.startswith("torch") or r.metric != "time":
            continue
        if _selection.timing_reason(r) is not None:
            continue
        if devices.match(r.provenance.device) is not spec:
            continue
        key = config_key(_shape_of(r, axes))
        median = float(r.median if r.median is not None else r.value)
        if key not in out or median < out[key]["median_s"]:
            out[key] = {"name": r.name, "median_s": median, "device": r.provenance.device, "method": r.method,
                        "timing": _selection.method_family(r.method)}
    return out


def write(template: Template, records: list[Record], out: str | Path) -> Path:
    """Write the template folder; returns it."""
    from roofline.templates.adapters import kernel_tuner_cache

    folder = Path(out) / template.family / template.target
    folder.mkdir(parents=True, exist_ok=True)
    template.save(folder / "template.json")
    mine = [r for r in _records_for(records, template.op, template.backend, template.dtype)
            if devices.match(r.provenance.device) in (devices.get(template.device), None)]
    # the caches replay device times only: the timings the model's selection admits
    admitted, left_out = cited(records, template.op, template.backend, template.dtype, devices.get(template.device))
    failed = [r for r in mine if left_out.get(id(r)) == "failed"]  # written as Kernel Tuner's failure markers
    complete = [r.model_copy(update={"config": template.complete(r.config)}) for r in [r for r, _ in admitted] + failed]
    with open(folder / template.records_file, "w") as fh:
        for r in mine:
            fh.write(r.model_dump_json() + "\n")
    measured_shapes = {config_key(_shape_of(r, template.axes)): _shape_of(r, template.axes)
                       for r in complete if set(template.names) <= set(r.config)}
    for shape in measured_shapes.values():
        name = "x".join(str(shape[a]) for a in template.axes)
        kernel_tuner_cache(template, shape, complete, folder / "kernel_tuner" / f"{name}.json")
    return folder


def export(out: str | Path, records: list[Record], families_: list[str] | None = None,
           targets_: list[str] | None = None, perf: _model.PerfModel | None = None,
           accuracy: dict[str, dict] | None = None) -> list[Path]:
    """Export every requested (family, target); returns the template folders."""
    folders = []
    for family in families_ or families():
        for target in targets(family):
            if targets_ and target not in targets_:
                continue
            spec = devices.get(space(family)["targets"][target]["device"])
            acc = (accuracy or {}).get(f"{spec.key}|{space(family)['op']}")
            template = build(family, target, records, perf, accuracy=acc)
            folders.append(write(template, records, out))
    return folders
