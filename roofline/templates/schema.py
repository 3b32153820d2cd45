"""The search-template schema, and the questions a template answers about a point.

A template describes one kernel family on one target: parameter domains as value
lists, validity constraints as expressions over parameters, problem axes and
device limits, priors, the model's predicted cost, and the hand-tuned best
points with their measurements and provenance. It is plain JSON
(``template.json``); the measurements behind it sit beside it as JSON lines.
It is exported from the family's search space (``kernels/spaces``), whose
``search`` lists become the parameters' domains here.

A family with several kernels (attention: fwd, dkdv, dq) has one section per
kernel, and its parameters have dotted names (``fwd.block_m``): the flat list a
tool like Kernel Tuner or Optuna wants. :meth:`Template.nest` turns a flat point
back into the sectioned config the kernels take; each kernel can be searched on
its own (``section=``), its time being its own.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr

from ceiling.spaces import expressions, flatten, nest
from ceiling.roofline.work import dtype_bytes

SCHEMA_VERSION = "ceiling-template/2"
MAX_POINTS = 200_000  # a whole sectioned space is the product of its sections'; search one section past this

Value = int | float | str | bool


class Parameter(BaseModel):
    name: str  # dotted for a section's parameter: "fwd.block_m"
    values: list[Value]
    default: Value | None = None
    tag: str | None = None  # what the knob means: tile_m, pipeline_stages, swizzle, ...
    implied: Value | None = None  # the kernel's value when a config leaves this parameter out
    prior: dict[str, float] = Field(default_factory=dict)  # str(value) -> probability


class Constraint(BaseModel):
    id: str
    expr: str  # over parameter names, problem axes, ``dtype_bytes`` and device limits
    why: str = ""
    search_only: bool = False  # a filter for the search; the kernel would still run such a point


class Measured(BaseModel):
    median_s: float
    p20_s: float | None = None
    p80_s: float | None = None
    tflops: float | None = None
    method: str | None = None
    timing: str | None = None  # the method's family it was admitted under (ceiling.roofline.selection): "cuda-graph", ...
    harness: str | None = None  # "tuning sweep" or "benchmark harness" (ceiling.roofline.selection.harness)
    repetitions: int | None = None
    provenance: dict[str, Any] = Field(default_factory=dict)


class BestPoint(BaseModel):
    shape: dict[str, int] | None = None  # None: the default for shapes nobody tuned; may name part of a problem
    section: str | None = None  # the one kernel a measured point is for (sectioned families); None: the whole config
    config: dict[str, Value]
    source: str  # "shipped config kernels/nvidia/tables/<device>/gemm.json", "records"
    measured: Measured | None = None
    predicted_s: float | None = None
    baseline: dict[str, Any] | None = None  # the vendor library on the same shape, when measured
    unmeasured: str | None = None  # why a point's records were not cited (ceiling.roofline.selection.REASONS keys)


class CostModel(BaseModel):
    flops: str
    bytes: str
    mode: Literal["fitted", "analytic"]
    terms: list[str]
    coefficients: dict[str, float]
    machine: dict[str, Any]  # the rates the terms use, and whether they were measured
    predictions: list[dict[str, Any]] = Field(default_factory=list)  # per workload: top configs by predicted time
    accuracy: dict[str, Any] | None = None  # held-out evaluation when the model was fit


class Template(BaseModel):
    schema_version: Literal["ceiling-template/2"] = SCHEMA_VERSION
    family: str
    op: str
    target: str
    backend: str
    device: str  # published device key the limits and priors are for
    device_name: str
    entry: str  # the function that takes ``config=``
    axes: list[str]
    dtype: str
    parameters: list[Parameter]
    sections: list[str] = Field(default_factory=list)  # the kernels of a sectioned config, in order
    launch_options: list[str] = Field(default_factory=list)  # parameters that are launch options, not kernel args
    device_limits: dict[str, float]
    problem_defaults: dict[str, float] = Field(default_factory=dict)  # has_bias, c_z, ...: when a shape leaves them out
    derived: dict[str, str] = Field(default_factory=dict)  # names computed from the problem's (head_dim_pad)
    constraints: list[Constraint]
    workloads: list[dict[str, int]]
    cost_model: CostModel
    best_points: list[BestPoint] = Field(default_factory=list)
    # which kernel timings the best points and priors were taken from: the model's selection rules
    measurements: dict[str, Any] = Field(default_factory=dict)
    records_file: str = "records.jsonl"
    provenance: dict[str, Any] = Field(default_factory=dict)
    # what the tensor-core model says about the points (the FP8 GEMM's promotion error per setting)
    numerics: dict[str, Any] = Field(default_factory=dict)
    _valid_cache: dict = PrivateAttr(default_factory=dict)  # the points that pass the constraints reading no axis

    # --- the questions -------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parameters]

    def parameter(self, name: str) -> Parameter:
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(name)

    def section_names(self, section: str | None = None) -> list[str]:
        """The parameters of one section (``""``: the top level's), or all of them."""
        if section is None:
            return self.names
        return [n for n in self.names if (n.split(".", 1)[0] == section if "." in n else section == "")]

    def flat(self, config: dict[str, Any]) -> dict[str, Any]:
        """A config (sectioned or already flat) with dotted names."""
        return flatten(config, self.sections)

    @staticmethod
    def nest(point: dict[str, Any]) -> dict[str, Any]:
        """A flat point as the sectioned config the kernels take (``{"fwd": {"block_m": 64}}``)."""
        return nest(point)

    def complete(self, config: dict[str, Any]) -> dict[str, Any]:
        """``config`` (flat) restricted to the template's parameters, with implied values for those it leaves out."""
        out = {p.name: p.implied for p in self.parameters if p.implied is not None}
        out.update({k: v for k, v in self.flat(config).items() if k in self.names})
        return out

    def default_point(self) -> dict[str, Any]:
        """Each parameter at its default (its most likely value; the first where there is none)."""
        return {p.name: p.default if p.default is not None else p.values[0] for p in self.parameters}

    def context(self, shape: dict[str, Any] | None = None) -> dict[str, Any]:
        """Every non-parameter name a constraint may use."""
        values: dict[str, Any] = {**self.device_limits, **self.problem_defaults}
        values["dtype_bytes"] = dtype_bytes(self.dtype)
        values.setdefault("out_dtype_bytes", values["dtype_bytes"])
        if shape:
            values.update({k: v for k, v in shape.items() if k in self.axes or k in values})
        for name, expr in self.derived.items():
            if expressions.names(expr) <= set(values):
                values[name] = expressions.evaluate(expr, values)
        return values

    def constraints_for(self, shape: dict[str, Any] | None, section: str | None = None) -> list[Constraint]:
        """Constraints that can be decided with what is known (all of them when a shape is given),
        over one section's parameters when ``section`` is given."""
        known = set(self.context(shape)) | set(self.section_names(section))
        return [c for c in self.constraints if expressions.names(c.expr) <= known]

    def violations(self, config: dict[str, Any], shape: dict[str, Any] | None = None,
                   section: str | None = None) -> list[str]:
        """Why ``config`` (flat or sectioned; one section's parameters with ``section``) is not a
        valid point (empty when it is)."""
        config = self.flat(config)
        names = self.section_names(section)
        problems = []
        for name in names:
            if name not in config:
                problems.append(f"{name} is missing")
            elif config[name] not in self.parameter(name).values:
                problems.append(f"{name}={config[name]!r} is outside its domain {self.parameter(name).values}")
        for name in config:
            if name not in names:
                problems.append(f"{name} is not a parameter of this template ({names})")
        if problems:
            return problems
        values = {**self.context(shape), **config}
        for c in self.constraints_for(shape, section):
            if not expressions.evaluate(c.expr, values):
                problems.append(f"constraint {c.id} fails: {c.expr} ({c.why})")
        return problems

    def is_valid(self, config: dict[str, Any], shape: dict[str, Any] | None = None, section: str | None = None) -> bool:
        return not self.violations(config, shape, section)

    def points(self, section: str | None = None) -> list[dict[str, Value]]:
        """The whole space (of one section), valid or not."""
        names = self.section_names(section)
        domains = [self.parameter(n).values for n in names]
        return [dict(zip(names, combo)) for combo in itertools.product(*domains)]

    def valid_points(self, shape: dict[str, Any] | None = None, section: str | None = None) -> list[dict[str, Value]]:
        """Every valid point (of one section). A sectioned template's whole space is the product of
        its sections' valid points; past :data:`MAX_POINTS` of them, search one section at a time."""
        if section is None and self.sections:
            parts = [self.valid_points(shape, s) for s in ["", *self.sections]]
            total = 1
            for part in parts:
                total *= len(part)
            if total > MAX_POINTS:
                raise ValueError(f"{total} valid points: pass section= (one of {self.sections}) to search one kernel")
            points = [{k: v for part in combo for k, v in part.items()} for combo in itertools.product(*parts)]
            checks = self.constraints_for(shape)
            context = self.context(shape)
            return [p for p in points if all(expressions.evaluate(c.expr, {**context, **p}) for c in checks)]
        # The constraints that read no problem axis hold or fail for a point whatever the shape's M, N,
        # K: they are evaluated once per section and the values they read, the others on what survives.
        context = self.context(shape)
        checks = self.constraints_for(shape, section)
        axes = set(self.axes)
        steady = [c for c in checks if not expressions.names(c.expr) & axes]
        reads = sorted(set().union(*(expressions.names(c.expr) for c in steady)) - set(self.names))
        key = (section, tuple((p.name, tuple(p.values)) for p in self.parameters), tuple(c.expr for c in steady),
               tuple((n, context[n]) for n in reads))
        if key not in self._valid_cache:
            self._valid_cache[key] = [c for c in self.points(section)
                                      if all(expressions.evaluate(k.expr, {**context, **c}) for k in steady)]
        rest = [c for c in checks if expressions.names(c.expr) & axes]
        return [dict(c) for c in self._valid_cache[key] if all(expressions.evaluate(k.expr, {**context, **c}) for k in rest)]

    # --- files ---------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model_dump_json(indent=2))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Template":
        path = Path(path)
        if path.is_dir():
            path = path / "template.json"
        return cls.model_validate(json.loads(path.read_text()))


def config_key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)
