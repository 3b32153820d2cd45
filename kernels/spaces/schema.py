"""What a search space is (one kernel family on one target: its parameters' domains and search lists,
in sections where the family has several kernels, and the constraints between them), and the
questions it answers about a config; :func:`flatten` and :func:`nest` turn sectioned configs into
dotted names (``fwd.block_m``) and back. The README ("Search spaces") describes the data.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import numbers
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from ceiling.errors import InputError
from ceiling.spaces import expressions

Value = bool | int | float | str | None
_MISSING = object()


class ConfigError(InputError):
    """A ``config=`` key, value or combination the space does not allow; ``key`` names the
    parameter(s) (dotted for a section's), ``value`` what was given, ``allowed`` what may be."""

    def __init__(self, key: str, value: Any, allowed: str, detail: str = "", shown: str | None = None,
                 expected: str | None = None):
        self.key, self.value, self.allowed = key, value, allowed
        if shown is None:
            shown = f"no {key}" if value is _MISSING else f"{key}={value!r}"
        super().__init__("config", expected or f"{key} {allowed}", shown + (f" ({detail})" if detail else ""))

    def under(self, prefix: str, names: list[str]) -> "ConfigError":
        """The same error for a config held under the key ``prefix`` of another (``gluon``:
        ``fwd.block_n`` becomes ``gluon.fwd.block_n``); ``names``: the nested space's keys."""
        keys = self.key.split(", ")  # a constraint's error names every parameter it reads
        names = sorted({*names, *keys}, key=len, reverse=True)
        pattern = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, names)) + r")\b")

        def qualify(text: str) -> str:
            return pattern.sub(lambda m: f"{prefix}.{m.group(1)}", text)

        return ConfigError(", ".join(f"{prefix}.{k}" for k in keys), self.value, self.allowed,
                           shown=qualify(self.got), expected=qualify(self.expected))


def _same(v: Any, x: Any) -> bool:
    """Equal and of the same kind (True is not 1; 64.0 is not 64)."""
    if isinstance(v, bool) or isinstance(x, bool):
        return isinstance(v, bool) and isinstance(x, bool) and v == x
    if isinstance(x, numbers.Integral):
        return isinstance(v, numbers.Integral) and int(v) == x
    return type(v) is type(x) and v == x


class Parameter(BaseModel):
    """One config key: its domain, the values a tuner explores, and what it means."""

    model_config = ConfigDict(extra="forbid")

    values: list[Value] | None = None  # the domain as a list ...
    range: tuple[int, int | None] | None = None  # ... or integers in [min, max] (max None: unbounded)
    multiple_of: int | None = None  # ... that are multiples of this
    type: Literal["str"] | None = None  # ... or any string (a label)
    space: str | None = None  # ... or a config of this family's space on the same target (checked by it)
    nullable: bool = False  # null is allowed too
    search: list[Value] | None = None  # what a tuner explores (a part of the domain); None: not tuned
    implied: Value = None  # the kernel's value when a config leaves this key out (see ``has_implied``)
    same_as: str | None = None  # when left out, the kernel takes this parameter's value
    optional: bool = False  # may be left out; the kernel decides (``use_tma``: by device)
    opt_in: list[Value] = Field(default_factory=list)  # allowed, but no table or heuristic picks it yet
    meta: bool = False  # selects or labels (``target``, ``name``): validated, never searched
    tag: str | None = None  # what the knob is: tile_m, pipeline_stages, ...
    why: str = ""
    prior: dict[str, float] = Field(default_factory=dict)  # hand priors: str(value) -> probability

    @property
    def has_implied(self) -> bool:
        return "implied" in self.model_fields_set

    @property
    def required(self) -> bool:
        return not (self.has_implied or self.same_as or self.optional or self.meta)

    def allows(self, v: Any) -> bool:
        if v is None:
            return self.nullable or (self.has_implied and self.implied is None)
        if self.values is not None:
            return any(_same(v, x) for x in self.values)
        if self.space is not None:
            return isinstance(v, dict)
        if self.type == "str":
            return isinstance(v, str)
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or self.range is None:
            return False
        lo, hi = self.range
        return v >= lo and (hi is None or v <= hi) and not (self.multiple_of and v % self.multiple_of)

    def describe(self) -> str:
        """What the domain allows, in words."""
        if self.values is not None:
            text = f"one of {self.values}"
        elif self.space is not None:
            text = f"a config of the {self.space} space (kernels/spaces/{self.space}.json)"
        elif self.type == "str":
            text = "a string"
        else:
            lo, hi = self.range
            kind = f"a multiple of {self.multiple_of}" if self.multiple_of else "an integer"
            text = f"{kind} >= {lo}" if hi is None else f"{kind} in [{lo}, {hi}]"
        return text + (" or null" if self.nullable else "")

    def domain_values(self) -> list[Value]:
        """The domain as a list, where it is finite and small enough to list."""
        if self.values is not None:
            return list(self.values)
        if self.range is not None and self.range[1] is not None:
            step = self.multiple_of or 1
            first = -(-self.range[0] // step) * step
            return list(range(first, self.range[1] + 1, step))
        raise ValueError("an unbounded domain has no list")


class Constraint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    expr: str  # over the parameters, the problem's names, ``dtype_bytes`` and the device limits
    why: str = ""
    search_only: bool = False  # a tuner's filter, not a rule every config must follow


class Section(BaseModel):
    """The config of one kernel of a family (``{"fwd": {...}}``)."""

    model_config = ConfigDict(extra="forbid")

    about: str = ""
    parameters: dict[str, Parameter]
    constraints: list[Constraint] = Field(default_factory=list)


class Space(BaseModel):
    """One family on one target."""

    model_config = ConfigDict(extra="forbid")

    family: str = ""
    target: str = ""
    backend: str
    device: str  # the published device (ceiling.roofline.devices key) the template describes
    table: str | None = None  # the vendor's config table, relative to the repository
    about: str = ""
    partial: str = ""  # what a partial ``config=`` means on this backend
    limits: dict[str, int | float] = Field(default_factory=dict)
    context: dict[str, int | float] = Field(default_factory=dict)  # problem names' values for a template
    derived: dict[str, str] = Field(default_factory=dict)  # names computed from the problem's (head_dim_pad)
    parameters: dict[str, Parameter] = Field(default_factory=dict)
    sections: dict[str, Section] = Field(default_factory=dict)
    constraints: list[Constraint] = Field(default_factory=list)  # over dotted names
    launch_options: list[str] = Field(default_factory=list)  # compiler options, not kernel arguments
    tuning: dict[str, Any] = Field(default_factory=dict)  # what the sweep's candidate lists are keyed by
    # the spaces of parameters that hold another family's config (``"space"``), by parameter name:
    # attached by the loader (ceiling.spaces.family)
    _nested: dict[str, "Space"] = PrivateAttr(default_factory=dict)

    # --- the flat view -------------------------------------------------------------------------

    def flat(self) -> dict[str, Parameter]:
        """Every parameter by its flat name: top-level keys as they are, a section's dotted."""
        out = dict(self.parameters)
        for s, section in self.sections.items():
            out.update({f"{s}.{n}": p for n, p in section.parameters.items()})
        return out

    def flat_constraints(self) -> list[Constraint]:
        """Every constraint over flat names (a section's own names qualified by the section)."""
        out = list(self.constraints)
        for s, section in self.sections.items():
            local = {n: f"{s}.{n}" for n in section.parameters}
            out += [c.model_copy(update={"id": f"{s}.{c.id}", "expr": expressions.rename(c.expr, local)})
                    for c in section.constraints]
        return out

    def searched(self, section: str | None = None) -> dict[str, Parameter]:
        """The parameters a tuner explores (flat names), of one section (``""``: the top level)."""
        flat = self.flat()
        keep = [n for n, p in flat.items() if p.search is not None and not p.meta]
        if section is not None:
            keep = [n for n in keep if (n.split(".", 1)[0] == section if "." in n else section == "")]
        return {n: flat[n] for n in keep}

    # --- checking a config -----------------------------------------------------------------------

    def keys(self) -> list[str]:
        return [*self.parameters, *self.sections]

    def check(self, config: Any, context: dict[str, Any] | None = None, partial: bool = False) -> None:
        """Raise :class:`ConfigError` (an ``InputError``) for an unknown key, a value outside its
        domain, a missing key (unless ``partial``) or a broken constraint (once every key is
        known: not for a ``partial`` config). ``context``: the problem's names (head_dim, M, N,
        K, dtype_bytes, ...) the constraints read."""
        if not isinstance(config, dict):
            raise InputError("config", f"a dict with keys among {self.keys()} (or None)", type(config).__name__)
        unknown = [k for k in config if k not in self.keys()]
        if unknown:
            raise ConfigError(unknown[0], config[unknown[0]], f"a key among {self.keys()}", f"unknown keys: {unknown}",
                              expected=f"keys among {self.keys()}")
        for key, value in config.items():
            if key in self.sections:
                section = self.sections[key]
                if not isinstance(value, dict):
                    raise ConfigError(key, value, f"a dict (the {key} kernel's config) with keys among "
                                                  f"{list(section.parameters)}")
                unknown = [k for k in value if k not in section.parameters]
                if unknown:
                    raise ConfigError(f"{key}.{unknown[0]}", value[unknown[0]], "", f"unknown keys: {unknown}",
                                      expected=f"keys of the {key} section among {list(section.parameters)}")
                for name, v in value.items():
                    self._check_value(f"{key}.{name}", section.parameters[name], v)
            elif self.parameters[key].space is not None:
                self._check_nested(key, self.parameters[key], value)
            else:
                self._check_value(key, self.parameters[key], value)
        if partial:
            return
        flat = flatten(config, self.sections)
        for name, p in self.flat().items():
            if p.required and name not in flat and (("." not in name) or name.split(".")[0] in config):
                raise ConfigError(name, _MISSING, f"{p.describe()} (a key this config needs)")
        self.check_constraints(config, context)

    @staticmethod
    def _check_value(key: str, param: Parameter, value: Any) -> None:
        if not param.allows(value):
            raise ConfigError(key, value, param.describe())

    def _check_nested(self, key: str, param: Parameter, value: Any) -> None:
        """A nested config's keys and values, by its own space on this target (its constraints
        read the problem, so the module that resolves it checks them)."""
        self._check_value(key, param, value)
        nested = self._nested[key]
        try:
            nested.check(value, partial=True)
        except ConfigError as err:
            raise err.under(key, [*nested.flat(), *nested.keys()]) from None

    def complete(self, config: dict[str, Any]) -> dict[str, Any]:
        """The flat config with implied and derived (``same_as``) values where it leaves keys out."""
        flat = flatten(config, self.sections)
        for name, p in self.flat().items():
            if name not in flat and p.has_implied:
                flat[name] = p.implied
        for name, p in self.flat().items():
            if name not in flat and p.same_as:
                source = p.same_as if "." in p.same_as or "." not in name else f"{name.split('.')[0]}.{p.same_as}"
                if source in flat:
                    flat[name] = flat[source]
        return flat

    def scope(self, context: dict[str, Any] | None = None) -> dict[str, Any]:
        """The non-parameter names a constraint may read: device limits, then the problem's."""
        values = {**self.limits, **self.context, **(context or {})}
        for name, expr in self.derived.items():
            if name not in values and expressions.names(expr) <= set(values):
                values[name] = expressions.evaluate(expr, values)
        return values

    def broken(self, config: dict[str, Any], context: dict[str, Any] | None = None,
               search: bool = False) -> list[tuple[Constraint, dict[str, Any]]]:
        """The constraints ``config`` breaks among those that can be decided (with the search-only
        ones when ``search``), each with the values it was decided on."""
        values = {**self.scope(context), **self.complete(config)}
        out = []
        for c in self.flat_constraints():
            if (c.search_only and not search) or not expressions.names(c.expr) <= set(values):
                continue
            if not expressions.evaluate(c.expr, values):
                out.append((c, values))
        return out

    def check_constraints(self, config: dict[str, Any], context: dict[str, Any] | None = None) -> None:
        for c, values in self.broken(config, context):
            used = sorted(expressions.names(c.expr))
            params = [n for n in used if n in self.flat()]
            given = {n: values[n] for n in params}
            shown = ", ".join(f"{n}={v!r}" for n, v in given.items())
            problem = "; ".join(f"{n}={values[n]}" for n in used if n not in self.flat() and n not in self.limits)
            detail = problem
            if (sides := expressions.sides(c.expr, values)) is not None:
                left, lv, op, rv = sides
                negated = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}[op]
                right = expressions.parse(c.expr).body.comparators[0]
                named = f"{right.id} = " if isinstance(right, ast.Name) else ""
                detail = f"{lv} {negated} {named}{rv}" + (f"; {problem}" if problem else "")
            why = f"{detail}; {c.why}" if c.why else detail
            raise ConfigError(", ".join(params), given, f"with {c.id}: {c.expr}", why, shown)

    # --- points ---------------------------------------------------------------------------------

    def grid(self, section: str = "") -> list[dict[str, Value]]:
        """Every combination of the ``search`` values of one section's (or the top level's)
        parameters, in the order the space lists them; local (undotted) names."""
        params = {n.split(".", 1)[-1]: p for n, p in self.searched(section).items()}
        names = list(params)
        return [dict(zip(names, combo)) for combo in itertools.product(*(params[n].search for n in names))]

    def grid_breaks(self, point: dict[str, Any], section: str = "", context: dict[str, Any] | None = None) -> list[str]:
        """Ids of the constraints (search-only ones included) a grid point of ``section`` breaks,
        among those that read nothing outside it."""
        flat = {(f"{section}.{k}" if section else k): v for k, v in point.items()}
        values = {**self.scope(context), **flat}
        for name, p in self.flat().items():  # implied values of the section's untuned keys
            if name not in values and p.has_implied and (name.split(".")[0] == section if section else "." not in name):
                values[name] = p.implied
        out = []
        for c in self.flat_constraints():
            if expressions.names(c.expr) <= set(values) and not expressions.evaluate(c.expr, values):
                out.append(c.id)
        return out

    def digest(self, section: str = "") -> str:
        """A digest of what a section's candidate list depends on: its search grid, the constraints
        that read it and the device limits. A candidate list stores it to be found stale."""
        searched = {n: p.search for n, p in self.searched(section).items()}
        prefix = f"{section}." if section else ""
        constraints = [c.model_dump() for c in self.flat_constraints()
                       if any(n.startswith(prefix) if prefix else "." not in n for n in expressions.names(c.expr)
                              if n in self.flat())]
        blob = json.dumps({"search": searched, "constraints": constraints, "limits": self.limits}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]



class Family(BaseModel):
    """``kernels/spaces/<family>.json``: the problem a family solves and its space per target."""

    model_config = ConfigDict(extra="forbid")

    family: str
    op: str  # the op name in records and ceiling.backends
    entry: str  # the function that takes ``config=``
    about: str = ""
    problem: dict[str, Any]  # axes, dtype, workloads, cost (flops, bytes) for the templates
    targets: dict[str, Space]


def flatten(config: dict[str, Any], sections: dict[str, Any] | list[str]) -> dict[str, Any]:
    """``{"fwd": {"block_m": 64}, "use_tma": True}`` -> ``{"fwd.block_m": 64, "use_tma": True}``."""
    out = {}
    for key, value in config.items():
        if key in sections and isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`flatten`."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        if "." in key:
            section, name = key.split(".", 1)
            out.setdefault(section, {})[name] = value
        else:
            out[key] = value
    return out
