"""Build a template per (kernel family, target) from the search space, the shipped configs and the records.

The space (``kernels/spaces/<family>.json``) gives the parameters (its ``search`` values are a
template's domains), the constraints, the device limits and the problem; the vendor's table
(read through :mod:`ceiling.roofline.templates.families`) the hand-tuned best points; the records the
measurements, the priors and the Kernel Tuner caches. Written per template folder
``<out>/<family>/<target>/``:

* ``template.json``: the template (``ceiling.roofline.templates.schema.Template``);
* ``records.jsonl``: every kernel record of that family and backend, one
  ``ceiling.microbench.records.Record`` per line (the store's data, cited or not);
* ``kernel_tuner/<shape>.json`` (``<shape>.<section>.json`` for one kernel of a sectioned
  family): for every shape with measured configs, a Kernel Tuner cache file that its
  simulation mode replays (``ceiling.roofline.templates.adapters.kernel_tuner_search``).

Best points, priors and caches cite only the timings the performance model is
fit by (``ceiling.roofline.selection.select``: our kernels, device time, one timing
method per fit unit), each with the method it was timed by; a shipped point
measured only by timings the rules leave out says why instead of citing them.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from ceiling import spaces
from ceiling.spaces import expressions
from ceiling.microbench.records import Record, _git_commit
from ceiling.roofline import ceilings as _ceilings
from ceiling.roofline import devices, model as _model
from ceiling.roofline import selection as _selection
from ceiling.roofline.machine import Machine, from_ceilings
from ceiling.roofline.templates import families as _families
from ceiling.roofline.templates import numerics as _numerics
from ceiling.roofline.templates.schema import BestPoint, CostModel, Constraint, Measured, Parameter, Template, config_key
from ceiling.roofline.work import normalize_shape, record_dtype


def targets(family: str) -> list[str]:
    """The targets with a template: those where the family's space has parameters to search."""
    return [t for t in spaces.targets(family) if spaces.get(family, t).searched()]


def families() -> list[str]:
    return [f for f in spaces.families() if targets(f)]


def _check_family(family: str) -> None:
    if family not in families():
        raise KeyError(f"no search template for {family!r}; known: {families()}")


# --- records ------------------------------------------------------------------------------------


def _records_for(records: list[Record], op: str, backend: str, dtype: str) -> list[Record]:
    return [r for r in records if r.kind == "kernel" and r.op == op and (r.backend == backend or r.name == backend)
            and r.metric == "time" and record_dtype(r.shape, r.config, r.extra) == dtype]


def _measured(r: Record, flops: float | None, timing: str | None) -> Measured:
    median = float(r.median if r.median is not None else r.value)
    prov = r.provenance.model_dump()
    return Measured(median_s=median, p20_s=r.p20, p80_s=r.p80, tflops=(flops / median / 1e12) if flops else None,
                    method=r.method, timing=timing, harness=_selection.harness(r), repetitions=r.repetitions,
                    provenance=prov)


def cited(records: list[Record], op: str, backend: str, dtype: str, device: devices.DeviceSpec
          ) -> tuple[list[tuple[Record, str]], dict[int, str]]:
    """Our kernel timings of one family and target that a template may cite, each with the timing method
    it was admitted under, by the same rules the model is fit by (``ceiling.roofline.selection.select``: device
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
    """Probability per value: how often it appears among the good points (add-one smoothed), blended
    half and half with the space's hand priors where it states them."""
    for p in parameters:
        counts = Counter(str(c.get(p.name)) for c in good if p.name in c)
        total = sum(counts[str(v)] + 1 for v in p.values)
        learned = {str(v): (counts[str(v)] + 1) / total for v in p.values}
        hand = p.prior
        p.prior = {v: round(0.5 * learned[v] + 0.5 * hand[v] if hand else learned[v], 4) for v in learned}


def _units(template: Template) -> list[str | None]:
    """What a measurement times: the whole config (flat families) or one kernel (a section)."""
    return list(template.sections) if template.sections else [None]


# --- building ---------------------------------------------------------------------------------------


def build(family: str, target: str, records: list[Record], perf: _model.PerfModel | None = None,
          machine: Machine | None = None, accuracy: dict | None = None, top_k: int = 5) -> Template:
    _check_family(family)
    fam = spaces.family(family)
    sp = spaces.get(family, target)
    problem = fam.problem
    spec = devices.get(sp.device)
    if machine is None:
        machine = from_ceilings(_ceilings.for_device(records, spec.key))
    perf = perf or _model.PerfModel()
    axes, op, backend, dtype = problem["axes"], fam.op, sp.backend, problem["dtype"]
    searched = sp.searched()
    parameters = [Parameter(name=n, values=list(p.search), tag=p.tag, prior=dict(p.prior),
                            implied=p.implied if p.has_implied else None) for n, p in searched.items()]
    names = [p.name for p in parameters]
    # the keys nobody searches stay at their implied values, for the constraints that read them
    fixed = {n: p.implied for n, p in sp.flat().items() if n not in searched and p.has_implied and not p.meta
             and isinstance(p.implied, (int, float))}
    template = Template(
        family=family, op=op, target=target, backend=backend, device=spec.key, device_name=spec.name,
        entry=fam.entry, axes=axes, dtype=dtype, parameters=parameters, sections=list(sp.sections),
        launch_options=list(sp.launch_options), device_limits=dict(sp.limits),
        problem_defaults={**sp.context, **fixed}, derived=dict(sp.derived),
        constraints=[Constraint(**c.model_dump()) for c in sp.flat_constraints()],
        workloads=list(problem["workloads"]),
        cost_model=CostModel(
            flops=problem["cost"]["flops"], bytes=problem["cost"]["bytes"], mode=perf.mode(machine.key, op),
            terms=list(_model.TERMS), coefficients=dict(perf.coefs(machine.key, op)),
            machine={"key": machine.key, "units": machine.units, "flops": machine.flops,
                     "bandwidth": machine.bandwidth, "measured": machine.measured},
            accuracy=accuracy,
        ),
        provenance={"git_commit": _git_commit(),
                    "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    "author": f"hand-tuned kernels; space and constraints from kernels/spaces/{family}.json"},
    )
    if family == "gemm_fp8":
        numerics, defaults, constraints = _numerics.fp8_promotion(target)
        template.numerics = numerics
        template.problem_defaults.update(defaults)
        template.constraints.extend(constraints)
    # the model reads tiles for these (of the attention kernels, the Triton ones': it knows nothing of
    # the Gluon kernels' schedule); elsewhere it would rank every point alike
    modelled = (op == "gemm" and "BLOCK_M" in names) or (family == "attention" and backend in ("nvidia", "amd"))
    defaults = template.default_point()

    def predict(shape: dict, config: dict, unit: str | None = None) -> float | None:
        if not modelled or not set(axes) <= set(shape):
            return None
        point = template.nest({**defaults, **template.complete(config)})
        problem_ = {**shape, **_families.unit_problem(family, unit), "dtype": dtype}
        return perf.predict(op, problem_, point, machine, dtype).seconds

    def flops(shape: dict | None) -> float | None:
        if not shape:
            return None
        values = {**template.context(shape), **shape}
        expr = template.cost_model.flops
        return float(expressions.evaluate(expr, values)) if expressions.names(expr) <= set(values) else None

    admitted, left_out = cited(records, op, backend, dtype, spec)
    timing: dict[int, str] = {}
    mine: dict[str | None, list[Record]] = defaultdict(list)  # unit -> records that time it
    for r, method in admitted:
        config = template.complete(r.config)
        for unit in _units(template):
            if set(template.section_names(unit) if unit else names) <= set(config):
                rr = r.model_copy(update={"config": config})
                timing[id(rr)] = method
                mine[unit].append(rr)
                break
    # the points measured only by timings the rules leave out: cited with the reason, never with the number
    unmeasured: dict[tuple[str, str], str] = {}
    for r in _records_for(records, op, backend, dtype):
        if id(r) in left_out:
            config = template.complete(r.config)
            if set(names) <= set(config):
                key = (config_key(_shape_of(r, axes)), config_key({k: config[k] for k in names}))
                unmeasured.setdefault(key, left_out[id(r)])
    template.measurements = {
        "selection": "ceiling.roofline.selection.select (the rules the model is fit by)",
        "event_min_seconds": _selection.EVENT_MIN_SECONDS,
        "cited": sum(len(v) for v in mine.values()), "timing": dict(Counter(timing.values())),
        "left_out": dict(Counter(left_out.values())),
    }
    shapes = {config_key(_shape_of(r, axes)): _shape_of(r, axes) for rs in mine.values() for r in rs}
    shipped = [p for p in _families.shipped(family, target, dtype, names) if p.device in ("", spec.key)]
    table = sp.table or ""
    for p in shipped:
        if p.shape and set(axes) <= set(p.shape):
            shapes.setdefault(config_key(p.shape), p.shape)
    for w in template.workloads:
        shapes.setdefault(config_key(w), w)
    template.workloads = list(shapes.values())

    # the hand-tuned points, with their measurement where one exists
    by_point: dict[tuple[str, str | None, str], Record] = {}
    for unit, rs in mine.items():
        unit_names = template.section_names(unit) if unit else names
        for r in rs:
            key = (config_key(_shape_of(r, axes)), unit, config_key({k: r.config[k] for k in unit_names}))
            if key not in by_point or (r.median or r.value) < (by_point[key].median or by_point[key].value):
                by_point[key] = r
    baselines = _baselines(records, op, axes, spec)
    good: list[dict] = []
    for p in shipped:
        shape, config = p.shape, template.complete(p.config)
        key = (config_key(shape), None, config_key(config)) if shape else None
        rec = by_point.get(key) if key else None
        detail = ", ".join(x for x in (p.label if not shape or not set(axes) <= set(shape) else "", p.source) if x)
        full = shape and set(axes) <= set(shape)
        template.best_points.append(BestPoint(
            shape=shape, config=config, source=f"shipped config {table}" + (f" ({detail})" if detail else ""),
            measured=_measured(rec, flops(shape), timing[id(rec)]) if rec else None,
            unmeasured=unmeasured.get(key[::2]) if key and not rec else None,
            predicted_s=predict(shape, config) if full and set(config) == set(names) and template.is_valid(config)
            else None,
            baseline=baselines.get(config_key(shape)) if shape else None,
        ))
        good.append(config)
    # the measured best per shape (and kernel), where the records found one the shipped table does not hold
    per_shape: dict[tuple[str, str | None], list[tuple[dict, Record]]] = defaultdict(list)
    for (skey, unit, _), r in by_point.items():
        unit_names = template.section_names(unit) if unit else names
        per_shape[(skey, unit)].append(({k: r.config[k] for k in unit_names}, r))
    for (skey, unit), rows in per_shape.items():
        rows.sort(key=lambda cr: cr[1].median or cr[1].value)
        good.extend(c for c, _ in rows[: max(1, len(rows) // 10)])
        best_cfg, best_rec = rows[0]
        shape = json.loads(skey)
        if not any(b.shape == shape and b.config == best_cfg for b in template.best_points):
            template.best_points.append(BestPoint(
                shape=shape, section=unit, config=best_cfg,
                source="records: fastest measured config" + (f" of the {unit} kernel" if unit else ""),
                measured=_measured(best_rec, flops(shape) if not unit else None, timing[id(best_rec)]),
                predicted_s=predict(shape, best_cfg) if not unit else None, baseline=baselines.get(skey)))
    _priors(template.parameters, good)
    for p in template.parameters:
        if p.prior:
            p.default = max(p.values, key=lambda v: p.prior[str(v)])

    # the model's picks per workload (and kernel), with the number of valid points
    defaults = template.default_point()
    for shape in template.workloads:
        for unit in _units(template):
            valid = template.valid_points(shape, unit if unit else None)
            scored = sorted(((s, c) for c in valid if (s := predict(shape, c, unit)) is not None), key=lambda sc: sc[0])
            entry = {"shape": shape, "valid_points": len(valid),
                     "top": [{"config": c, "predicted_s": s} for s, c in scored[:top_k]]}
            template.cost_model.predictions.append({**entry, "section": unit} if unit else entry)
    return template


def _baselines(records: list[Record], op: str, axes: list[str], spec: devices.DeviceSpec) -> dict[str, dict]:
    """The vendor library's time per shape (records named like ``torch.matmul``, or marked as the
    baseline), held to the same timing rule as our kernels (``ceiling.roofline.selection.timing_reason``)."""
    out: dict[str, dict] = {}
    for r in records:
        baseline = r.name.startswith("torch") or r.extra.get("role") == "baseline"
        if r.kind != "kernel" or r.op != op or not baseline or r.metric != "time":
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


def write(template: Template, records: list[Record], out: str | Path, prove: bool = True) -> Path:
    """Write the template folder; returns it. ``prove`` False: the certificate holds the proofs already
    cached (``ceiling.verify.project.certificate``)."""
    from ceiling.roofline.templates.adapters import kernel_tuner_cache

    folder = Path(out) / template.family / template.target
    folder.mkdir(parents=True, exist_ok=True)
    template.save(folder / "template.json")
    from ceiling.verify import project

    # The proofs that travel with the template: its kernels' contracts, the points proved, the versions.
    (folder / "certificate.json").write_text(json.dumps(project.certificate(template.family, template.target, prove),
                                                        indent=1))
    mine = [r for r in _records_for(records, template.op, template.backend, template.dtype)
            if devices.match(r.provenance.device) in (devices.get(template.device), None)]
    # the caches replay device times only: the timings the model's selection admits
    admitted, left_out = cited(records, template.op, template.backend, template.dtype, devices.get(template.device))
    failed = [r for r in mine if left_out.get(id(r)) == "failed"]  # written as Kernel Tuner's failure markers
    complete = [r.model_copy(update={"config": template.complete(r.config)}) for r in [r for r, _ in admitted] + failed]
    with open(folder / template.records_file, "w") as fh:
        for r in mine:
            fh.write(r.model_dump_json() + "\n")
    for unit in _units(template):
        unit_names = template.section_names(unit) if unit else template.names
        measured_shapes = {config_key(_shape_of(r, template.axes)): _shape_of(r, template.axes)
                           for r in complete if set(unit_names) <= set(r.config)}
        for shape in measured_shapes.values():
            name = "x".join(str(shape[a]) for a in template.axes if a in shape) + (f".{unit}" if unit else "")
            kernel_tuner_cache(template, shape, complete, folder / "kernel_tuner" / f"{name}.json", section=unit)
    return folder


def export(out: str | Path, records: list[Record], families_: list[str] | None = None,
           targets_: list[str] | None = None, perf: _model.PerfModel | None = None,
           accuracy: dict[str, dict] | None = None, prove: bool = True) -> list[Path]:
    """Export every requested (family, target); returns the template folders (``prove``: see ``write``)."""
    folders = []
    for family in families_ or families():
        for target in targets(family):
            if targets_ and target not in targets_:
                continue
            sp = spaces.get(family, target)
            acc = (accuracy or {}).get(f"{devices.get(sp.device).key}|{spaces.family(family).op}")
            template = build(family, target, records, perf, accuracy=acc)
            folders.append(write(template, records, out, prove))
    return folders
