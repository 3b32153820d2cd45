"""The search-template schema, and the questions a template answers about a point.

A template describes one kernel family on one target: parameter domains as value
lists, validity constraints as expressions over parameters, problem axes and
device limits, priors, the model's predicted cost, and the hand-tuned best
points with their measurements and provenance. It is plain JSON
(``template.json``); the measurements behind it sit beside it as JSON lines.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from kernels.spaces import expressions
from roofline.work import dtype_bytes

SCHEMA_VERSION = "ceiling-template/1"

Value = int | float | str | bool


class Parameter(BaseModel):
    name: str
    values: list[Value]
    default: Value | None = None
    tag: str | None = None  # what the knob means: tile_m, pipeline_stages, swizzle, ...
    implied: Value | None = None  # the kernel's value when a config leaves this parameter out
    prior: dict[str, float] = Field(default_factory=dict)  # str(value) -> probability


class Constraint(BaseModel):
    id: str
    expr: str  # over parameter names, problem axes, ``dtype_bytes`` and device limits
    why: str = ""


class Measured(BaseModel):
    median_s: float
    p20_s: float | None = None
    p80_s: float | None = None
    tflops: float | None = None
    method: str | None = None
    timing: str | None = None  # the method's family it was admitted under (roofline.selection): "cuda-graph", ...
    repetitions: int | None = None
    provenance: dict[str, Any] = Field(default_factory=dict)


class BestPoint(BaseModel):
    shape: dict[str, int] | None = None  # None: the default for shapes nobody tuned
    config: dict[str, Value]
    source: str  # "shipped config kernels/nvidia/configs/gemm.json", "records"
    measured: Measured | None = None
    predicted_s: float | None = None
    baseline: dict[str, Any] | None = None  # the vendor library on the same shape, when measured
    unmeasured: str | None = None  # why a point's records were not cited (roofline.selection.REASONS keys)


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
    schema_version: Literal["ceiling-template/1"] = SCHEMA_VERSION
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
    launch_options: list[str] = Field(default_factory=list)  # parameters that are launch options, not kernel args
    device_limits: dict[str, float]
    constraints: list[Constraint]
    workloads: list[dict[str, int]]
    cost_model: CostModel
    best_points: list[BestPoint] = Field(default_factory=list)
    # which kernel timings the best points and priors were taken from: the model's selection rules
    measurements: dict[str, Any] = Field(default_factory=dict)
    records_file: str = "records.jsonl"
    provenance: dict[str, Any] = Field(default_factory=dict)

    # --- the questions -------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parameters]

    def parameter(self, name: str) -> Parameter:
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(name)

    def complete(self, config: dict[str, Any]) -> dict[str, Any]:
        """``config`` restricted to the template's parameters, with implied values for those it leaves out."""
        out = {p.name: p.implied for p in self.parameters if p.implied is not None}
        out.update({k: v for k, v in config.items() if k in self.names})
        return out

    def context(self, shape: dict[str, Any] | None = None) -> dict[str, Any]:
        """Every non-parameter name a constraint may use."""
        values: dict[str, Any] = dict(self.device_limits)
        values["dtype_bytes"] = dtype_bytes(self.dtype)
        if shape:
            values.update({k: v for k, v in shape.items() if k in self.axes})
        return values

    def constraints_for(self, shape: dict[str, Any] | None) -> list[Constraint]:
        """Constraints that can be decided with what is known (all of them when a shape is given)."""
        known = set(self.context(shape)) | set(self.names)
        return [c for c in self.constraints if expressions.names(c.expr) <= known]

    def violations(self, config: dict[str, Any], shape: dict[str, Any] | None = None) -> list[str]:
        """Why ``config`` is not a valid point (empty when it is)."""
        problems = []
        for name in self.names:
            if name not in config:
                problems.append(f"{name} is missing")
            elif config[name] not in self.parameter(name).values:
                problems.append(f"{name}={config[name]!r} is outside its domain {self.parameter(name).values}")
        for name in config:
            if name not in self.names:
                problems.append(f"{name} is not a parameter of this template ({self.names})")
        if problems:
            return problems
        values = {**self.context(shape), **config}
        for c in self.constraints_for(shape):
            if not expressions.evaluate(c.expr, values):
                problems.append(f"constraint {c.id} fails: {c.expr} ({c.why})")
        return problems

    def is_valid(self, config: dict[str, Any], shape: dict[str, Any] | None = None) -> bool:
        return not self.violations(config, shape)

    def points(self) -> list[dict[str, Value]]:
        """The whole space, valid or not."""
        domains = [p.values for p in self.parameters]
        return [dict(zip(self.names, combo)) for combo in itertools.product(*domains)]

    def valid_points(self, shape: dict[str, Any] | None = None) -> list[dict[str, Value]]:
        context = self.context(shape)
        checks = self.constraints_for(shape)
        return [c for c in self.points() if all(expressions.evaluate(k.expr, {**context, **c}) for k in checks)]

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
