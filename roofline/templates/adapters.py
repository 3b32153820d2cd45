"""Adapters: a template as Triton configs, a Kernel Tuner space + cache, an Optuna space.

And the way back: a config an external optimizer chose, validated against the
template, ready for ``kernels.<op>(..., config=...)``.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ceiling.spaces import expressions
from ceiling.microbench.records import Record
from ceiling.roofline.templates.schema import Template, config_key
from ceiling.roofline.work import normalize_shape

# --- names ------------------------------------------------------------------------------------------
#
# A sectioned template's parameters are dotted (``fwd.block_m``). Triton configs take one kernel's
# (a section's) local names; Kernel Tuner wants identifiers, so ``fwd.block_m`` is ``fwd__block_m``
# there; Optuna takes the dotted names as they are.


def _local(name: str) -> str:
    return name.split(".", 1)[-1]


def kt_name(name: str) -> str:
    """A template parameter's name as a Kernel Tuner parameter (an identifier)."""
    return name.replace(".", "__")


def _kt_back(name: str) -> str:
    return name.replace("__", ".", 1)


def _names(template: Template, section: str | None) -> list[str]:
    if section is None and template.sections:
        raise ValueError(f"{template.family} has one kernel per section: pass section= (one of {template.sections})")
    return template.section_names(section)


# --- Triton -----------------------------------------------------------------------------------------


def _predicted_order(template: Template, shape: dict | None, configs: list[dict], section: str | None = None
                     ) -> list[dict]:
    """Configs ordered by the template's own predictions for ``shape`` (unpredicted ones last)."""
    if not shape:
        return configs
    rank = {}
    for entry in template.cost_model.predictions:
        if entry["shape"] == shape and entry.get("section") == section:
            rank = {config_key(p["config"]): i for i, p in enumerate(entry["top"])}
    return sorted(configs, key=lambda c: rank.get(config_key(c), len(rank)))


def proved(template: Template, point: dict[str, Any]) -> bool:
    """Whether every proof of the kernels ``point`` launches holds (``ceiling.verify.project``; a kernel
    without a contract has nothing to hold). The adapters offer only such points."""
    from ceiling.verify import project

    return not project.failures(template.family, template.target, point)


def _proved_values(template: Template, names: list[str]) -> dict[str, list]:
    """Each parameter's values, less those whose proofs fail with the others at any value (a parameter a
    contract reads as a constexpr is checked value by value; every other value passes through)."""
    from ceiling.verify import project

    keys = {f"{e.section}.{k}" if e.section else k for e in project.ENTRIES
            if e.family == template.family and e.target == template.target for k in e.point_keys}
    out = {}
    for n in names:
        values = list(template.parameter(n).values)
        if n in keys:
            values = [v for v in values if not project.failures(template.family, template.target, {n: v})]
        out[n] = values
    return out


def triton_configs(template: Template, shape: dict | None = None, limit: int | None = None,
                   section: str | None = None) -> list:
    """``triton.Config`` objects for the valid points of one kernel (for ``shape``, or the
    shape-independent constraints); a sectioned template needs ``section`` (the kernel)."""
    import triton

    _names(template, section)
    configs = _predicted_order(template, shape, template.valid_points(shape, section), section)
    configs = [c for c in configs if proved(template, c)]
    out = []
    for c in configs[:limit]:
        local = {_local(k): v for k, v in c.items()}
        kwargs = {k: v for k, v in local.items() if k not in template.launch_options}
        options = {k: local[k] for k in template.launch_options if k in local}
        out.append(triton.Config(kwargs, **options))
    return out


def config_of(triton_config: Any, section: str | None = None) -> dict[str, Any]:
    """The template point (flat; dotted with ``section``) of a ``triton.Config``."""
    point = dict(triton_config.kwargs)
    point["num_warps"] = triton_config.num_warps
    point["num_stages"] = triton_config.num_stages
    return {f"{section}.{k}" if section else k: v for k, v in point.items()}


def early_config_prune(template: Template, section: str | None = None) -> Callable:
    """For ``triton.autotune(prune_configs_by={"early_config_prune": ...})``: drop invalid configs
    (of one kernel, for a sectioned template)."""
    names = _names(template, section)

    def prune(configs, named_args, **kwargs):
        shape = {a: named_args[a] for a in template.axes if a in named_args}
        keep = []
        for cfg in configs:
            point = {k: v for k, v in config_of(cfg, section).items() if k in names}
            if template.is_valid(point, shape or None, section) and proved(template, point):
                keep.append(cfg)
        return keep

    return prune


# --- Kernel Tuner -----------------------------------------------------------------------------------


@dataclass
class KernelTunerSpace:
    tune_params: dict[str, list]  # Kernel Tuner names (identifiers: ``fwd__block_m``)
    restrictions: list[str]  # expressions over tunable parameters only (shape and device substituted)
    cache: Path | None


def kernel_tuner_space(template: Template, shape: dict[str, Any], section: str | None = None) -> KernelTunerSpace:
    names = _names(template, section)
    context = template.context(shape)
    renames = {n: kt_name(n) for n in names}
    restrictions = [expressions.rename(expressions.substitute(c.expr, context), renames)
                    for c in template.constraints_for(shape, section)]
    values = _proved_values(template, names)
    return KernelTunerSpace({kt_name(n): values[n] for n in names}, restrictions, None)


def kernel_tuner_cache(template: Template, shape: dict[str, Any], records: list[Record], path: str | Path,
                       device_name: str | None = None, section: str | None = None) -> Path:
    """A Kernel Tuner cache file holding every measured config of ``shape`` (of one kernel, for a
    sectioned template), times in ms.

    Failed points (records with ``extra["status"]`` set to a failure) are written
    with Kernel Tuner's failure markers; points nobody measured are absent, and
    ``kernel_tuner.tune_cache`` restricts the replay to the points present.
    """
    names = _names(template, section)
    entries: dict[str, dict] = {}
    for r in records:
        if r.kind != "kernel" or r.op != template.op or r.metric != "time":
            continue
        rshape = normalize_shape(r.op, r.shape)
        if any(int(rshape.get(a, -1)) != int(shape[a]) for a in template.axes if a in shape):
            continue
        config = template.complete(r.config)
        if not set(names) <= set(config):
            continue
        point = {kt_name(k): config[k] for k in names}
        key = ",".join(str(config[k]) for k in names)
        ms = 1e3 * float(r.median if r.median is not None else r.value)
        status = str(r.extra.get("status", "ok"))
        if status in ("compile-failed", "CompilationFailedConfig"):
            entries[key] = {**point, "time": "CompilationFailedConfig"}
            continue
        if status in ("runtime-failed", "RuntimeFailedConfig"):
            entries[key] = {**point, "time": "RuntimeFailedConfig"}
            continue
        if key in entries and isinstance(entries[key].get("time"), float) and entries[key]["time"] <= ms:
            continue
        entries[key] = {**point, "time": ms, "times": [ms], "compile_time": 0.0, "verification_time": 0.0,
                        "benchmark_time": ms * (r.repetitions or 1), "strategy_time": 0.0, "framework_time": 0.0,
                        "timestamp": r.provenance.timestamp}
    doc = {
        "device_name": device_name or template.device_name,
        "kernel_name": f"{template.family}_{template.target}" + (f"_{section}" if section else ""),
        "problem_size": [int(shape[a]) for a in template.axes if a in shape],
        "tune_params_keys": [kt_name(n) for n in names],
        "tune_params": {kt_name(n): list(template.parameter(n).values) for n in names},
        "objective": "time",
        "cache": entries,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))
    return path


def kernel_tuner_search(template: Template, shape: dict[str, Any], cache: str | Path, strategy: str = "diff_evo",
                        max_fevals: int = 100, seed: int = 0,
                        section: str | None = None) -> tuple[dict[str, Any], float]:
    """Replay a search with Kernel Tuner's simulation mode; returns the best point (template names)
    and its time (ms)."""
    import kernel_tuner

    space = kernel_tuner_space(template, shape, section)
    with warnings.catch_warnings():
        # the parameters are tile sizes, not thread-block dimensions; Kernel Tuner warns about that
        warnings.filterwarnings("ignore", message="None of the tunable parameters specify thread block dimensions")
        results, _ = kernel_tuner.tune_cache(
            str(cache), restrictions=space.restrictions, strategy=strategy,
            strategy_options={"max_fevals": max_fevals}, seed=seed, quiet=True, verbose=False,
        )
    timed = [r for r in results if r and "__error__" not in r and isinstance(r.get("time"), (int, float))]
    best = min(timed, key=lambda r: r["time"])
    return {_kt_back(k): best[k] for k in space.tune_params}, float(best["time"])


# --- Optuna -----------------------------------------------------------------------------------------


def optuna_space(template: Template, section: str | None = None) -> dict[str, Any]:
    """One ``CategoricalDistribution`` per parameter (domains are finite value lists), by template
    name; all of them (every kernel's) unless ``section`` names one."""
    from optuna.distributions import CategoricalDistribution

    names = template.section_names(section)
    return {n: CategoricalDistribution(v) for n, v in _proved_values(template, names).items()}


def warm_start_points(template: Template, shape: dict[str, Any], top_k: int = 5,
                      section: str | None = None) -> list[dict[str, Any]]:
    """Where a search should start on ``shape``: the best points for it, then the model's top
    predictions (restricted to ``section``'s parameters when given)."""
    names = template.section_names(section)
    out: list[dict[str, Any]] = []
    for b in template.best_points:
        fits = b.shape is None or all(shape.get(k) == v for k, v in b.shape.items())
        point = {k: v for k, v in b.config.items() if k in names}
        if fits and set(point) == set(names) and template.is_valid(point, shape, section):
            out.append(point)
    for entry in template.cost_model.predictions:
        if entry["shape"] == shape and entry.get("section") in (section, None):
            out.extend({k: v for k, v in p["config"].items() if k in names} for p in entry["top"][:top_k])
    unique = {config_key(c): c for c in out if set(c) == set(names)}
    return list(unique.values())


def optuna_search(template: Template, shape: dict[str, Any], objective: Callable[[dict], float], n_trials: int = 40,
                  seed: int = 0, warm_start: bool = True, section: str | None = None):
    """Minimise ``objective(config)`` over the valid points; invalid suggestions are pruned.

    ``objective`` gets the kernel's config: nested by section for a sectioned template
    (:meth:`Template.nest`); with ``section`` only that kernel's section, the others being
    fixed by the caller. With ``warm_start``, the template's best points for this shape and the
    model's top predictions are tried first. Returns the finished ``optuna.Study`` (its
    ``best_params`` by template name).
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=15)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    if warm_start:
        for config in warm_start_points(template, shape, section=section):
            study.enqueue_trial(config)
    space = optuna_space(template, section)

    def run(trial):
        config = {name: trial.suggest_categorical(name, dist.choices) for name, dist in space.items()}
        if not template.is_valid(config, shape, section):
            raise optuna.TrialPruned("violates the template's constraints")
        return objective(template.nest(config))

    study.optimize(run, n_trials=n_trials)
    return study


# --- import -----------------------------------------------------------------------------------------


def validate_config(template: Template, config: dict[str, Any], shape: dict[str, Any] | None = None,
                    section: str | None = None) -> dict[str, Any]:
    """A config from outside (any optimizer; flat or sectioned), checked against the template;
    returns the kernel config (sectioned where the family is).

    Parameters the config leaves out take the template's default (its most likely value).

    Raises ``ceiling.errors.InputError`` naming ``config`` and every violated rule.
    """
    from ceiling.errors import InputError

    names = template.section_names(section)
    point = {p.name: p.default for p in template.parameters
             if p.name in names and p.name not in template.flat(config) and p.default is not None}
    for k, v in template.flat(config).items():
        if isinstance(v, float) and v.is_integer():
            v = int(v)  # JSON round trips and some optimizers give floats
        point[k] = v
    problems = template.violations(point, shape, section)
    if problems:
        raise InputError("config", f"a valid point of the {template.family}/{template.target} template",
                         "; ".join(problems))
    return template.nest(point)
