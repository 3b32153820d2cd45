"""An op: one kernel family's problem, its implementations in a registry, and the one place
(:meth:`Op.select`) that chooses which implementation runs a problem and with which config. The
public functions check their arguments into a frozen :class:`Problem` once and hand it, with the
:class:`Call` that ``select`` returns, to the front end every op shares (:mod:`ceiling.frontends`);
below that nothing rebuilds the problem or resolves the config again (``docs/architecture.md``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, ClassVar

from ceiling.availability import BACKENDS
from ceiling.errors import BackendUnavailable, InputError
DIRECTIONS = ("forward", "backward")


@dataclass(frozen=True)
class Problem:
    """What one call computes, with everything but the array values: shapes, dtypes, device,
    options. A family subclasses it (frozen fields only: a problem is a value); ``key`` and
    :meth:`from_key` carry it through a custom op's string argument."""

    framework: str  # "torch" or "jax"
    device: str  # "cpu", "cuda:0", "tpu:0", ...
    # the GPU it runs on, None off a GPU: its name ("NVIDIA H200", what device tables match) and
    # architecture ("sm_90", "gfx942"); ceiling.arrays.gpu_facts fills them
    gpu: str | None = field(default=None, kw_only=True)
    arch: str | None = field(default=None, kw_only=True)
    # the fields that are sizes: any of them 0 makes the problem empty (:attr:`empty`)
    SIZES: ClassVar[tuple[str, ...]] = ()

    @property
    def empty(self) -> bool:
        """Whether a size is 0: nothing to launch (or an empty sum); the reference's answer."""
        return any(getattr(self, name) == 0 for name in self.SIZES)

    def features(self) -> dict[str, Any]:
        """The names a tuned table's ``when`` conditions and a space's constraints read."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def key(self) -> str:
        return json.dumps({"type": f"{type(self).__module__}:{type(self).__qualname__}",
                           "fields": _jsonable(dataclasses.asdict(self))}, sort_keys=True)

    @staticmethod
    def from_key(key: str) -> "Problem":
        return _problem_from_key(key)


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return {"tuple": [_jsonable(v) for v in value]}
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _unjson(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"tuple"}:
            return tuple(_unjson(v) for v in value["tuple"])
        return {k: _unjson(v) for k, v in value.items()}
    return value


@functools.lru_cache(maxsize=1024)
def _problem_from_key(key: str) -> Problem:
    data = json.loads(key)
    module, name = data["type"].split(":")
    cls = getattr(importlib.import_module(module), name)
    return cls(**_unjson(data["fields"]))


@dataclass(frozen=True)
class Implementation:
    """One way to run an op: a launcher module on a backend, with the space its configs live in.

    The module (imported only when the implementation is used) provides ``forward(problem,
    config, *inputs) -> outputs`` and, for a differentiable op, ``backward(problem, config, saved,
    grads, needs) -> input gradients`` (without it, autograd through ``forward``); the hooks its
    config is resolved by (:func:`resolve_config`); optionally ``forward_jax``/``backward_jax``
    (JAX arrays without a host round trip; ``JAX = "gpu"`` where they need a JAX GPU); an opt-in
    implementation gives ``choice(problem, config, direction) -> (runs, why)``.
    """

    op: str
    name: str  # "reference", "triton", "gluon", "pallas", "nki"
    backend: str  # one of BACKENDS
    module: str  # the launcher module
    family: str | None = None  # its search space (ceiling/spaces/<family>.json); None: it takes no config
    target: str | None = None  # the space's target when one is fixed ("sm_90a"); None: chosen per problem
    opt_in: bool = False  # runs only where config= asks for it or a table proves it (the Gluon attention)

    @property
    def label(self) -> str:
        """``backend`` for a backend's first implementation, ``backend:name`` for another."""
        return self.backend if not self.opt_in else f"{self.backend}:{self.name}"

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)



@dataclass(frozen=True)
class Run:
    """One direction of a call: the implementation and the config it runs with."""

    implementation: Implementation
    config: Any  # a ceiling.spaces.Config, or None for an implementation that takes none
    why: str = ""  # why this implementation (and not another of the backend)


@dataclass(frozen=True)
class Call:
    """Everything a front end needs below the public function: the problem and, per direction,
    what runs it. Hashable (a JAX static argument) and carried through a custom op as ``key``."""

    op: str
    problem: Problem
    forward: Run
    backward: Run | None = None
    extra: tuple[tuple[str, Any], ...] = ()  # per-call options that are neither problem nor config

    def key(self) -> str:
        return _call_key(self)

    @staticmethod
    def from_key(key: str) -> "Call":
        return _call_from_key(key)

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.extra).get(name, default)

    def __hash__(self) -> int:
        return hash(self.key())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Call) and self.key() == other.key()


def _run_json(run: Run | None) -> Any:
    if run is None:
        return None
    config = run.config
    return {"implementation": [run.implementation.op, run.implementation.name, run.implementation.backend],
            "config": None if config is None else config.json(), "why": run.why}


_CALLS: dict[str, Call] = {}  # the calls made in this process, by key: decoding one gives it back


def _call_key(call: Call) -> str:
    cached = call.__dict__.get("_key")
    if cached is None:
        cached = json.dumps({"op": call.op, "problem": call.problem.key(), "forward": _run_json(call.forward),
                             "backward": _run_json(call.backward), "extra": _jsonable(dict(call.extra))},
                            sort_keys=True)
        object.__setattr__(call, "_key", cached)
        if len(_CALLS) > 1024:
            _CALLS.clear()
        _CALLS[cached] = call
    return cached


def _call_from_key(key: str) -> Call:
    if key in _CALLS:
        return _CALLS[key]
    return _decode_call(key)


@functools.lru_cache(maxsize=1024)
def _decode_call(key: str) -> Call:
    from ceiling.spaces.config import Config

    data = json.loads(key)

    def run(entry):
        if entry is None:
            return None
        op, name, backend = entry["implementation"]
        impl = REGISTRY[op].implementation(backend, name)
        config = None if entry["config"] is None else Config.from_json(entry["config"])
        return Run(impl, config, entry["why"])

    extra = _unjson(data["extra"])
    return Call(data["op"], Problem.from_key(data["problem"]), run(data["forward"]), run(data["backward"]),
                tuple(sorted(extra.items())))


def constant_json(value: Any) -> str:
    """Canonical JSON of Python constants, with string operations only: ``torch.compile`` traces
    it where it cannot trace ``json.dumps``."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{constant_json(str(k))}:{constant_json(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(constant_json(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


DEFERRED = "deferred:"


@dataclass
class Op:
    """A kernel family: its implementations (the registry), how a problem is routed to one, and the
    arrays its front ends carry (:class:`ceiling.frontends.Signature`)."""

    name: str
    signature: Any = None  # ceiling.frontends.Signature
    implementations: tuple[Implementation, ...] = ()
    # backends with no implementation, and why (more than "not written yet")
    missing: dict[str, str] = field(default_factory=dict)
    # the spec: (*arrays in signature order, **static) -> Problem; rebuilds a problem only inside a
    # custom op traced by torch.compile, where shapes were symbolic when the function ran
    check: Callable[..., Problem] | None = None
    # a backward of the op's own, (call, saved, grads, needs) -> {input: gradient}, in place of the
    # backward implementation's, for PyTorch and for JAX (the GEMM's backward is GEMMs through the op)
    torch_backward: Callable | None = None
    jax_backward: Callable | None = None
    differentiable: bool = True

    def backends(self) -> list[str]:
        return list(dict.fromkeys(i.backend for i in self.implementations))

    def implementation(self, backend: str, name: str | None = None) -> Implementation:
        for impl in self.implementations:
            if impl.backend == backend and (name is None or impl.name == name) and (name is not None or not impl.opt_in):
                return impl
        raise KeyError(f"{self.name} has no implementation {name or ''} on {backend}")

    def on(self, backend: str) -> list[Implementation]:
        return [i for i in self.implementations if i.backend == backend]

    def availability(self, backend: str):
        """How ``backend`` would run this op here (:mod:`ceiling.availability`), or why it cannot:
        the op has no kernel there, or the first implementation's module cannot be imported."""
        from ceiling.availability import Availability, availability, has_module

        impls = [i for i in self.on(backend) if not i.opt_in]
        if not impls:
            return Availability(backend, "unavailable", self.missing.get(backend, f"{self.name} has no {backend} kernel yet"))
        base = availability(backend)
        if not base.runs:
            return base
        ok, why = has_module(impls[0].module)
        return base if ok else Availability(backend, "unavailable", why)

    def check_backend(self, backend: str | None) -> None:
        if backend is not None and backend not in BACKENDS:
            raise InputError("backend", f"one of {BACKENDS} or None", repr(backend))

    # --- choosing ---------------------------------------------------------------------------------

    def select(self, problem: Problem, backend: str, config: dict | None = None, *,
               extra: dict[str, Any] | None = None) -> Call:
        """The one place an implementation is chosen: the backend's implementations in registry
        order, an opt-in one only where its ``wanted`` (or ``config["implementation"]``) asks
        for it, each asked whether it takes the problem; then the config of each chosen
        implementation resolved and validated once, whatever directions share it."""
        avail = self.availability(backend)
        if not avail.runs:
            raise BackendUnavailable(f"{self.name} on backend={backend!r} cannot run here: {avail.reason}")
        impls = self.on(backend)
        if problem.empty and backend != "reference":
            return self._empty_call(problem, impls, config, extra)
        chosen = {d: self._choose(problem, impls, config, d)
                  for d in (DIRECTIONS if self.differentiable else DIRECTIONS[:1])}
        resolved: dict[Implementation, Any] = {}  # one config per implementation, whatever the directions
        for impl, _ in chosen.values():
            if impl not in resolved:
                resolved[impl] = resolve_config(problem, impl, config)
        runs = {d: Run(impl, resolved[impl], why) for d, (impl, why) in chosen.items()}
        return Call(self.name, problem, runs["forward"], runs.get("backward"), tuple(sorted((extra or {}).items())))

    def _empty_call(self, problem: Problem, impls: list[Implementation], config: Any,
                    extra: dict[str, Any] | None) -> Call:
        """An empty problem (a size 0) runs the reference on every backend: its answer (empty
        outputs, or an empty sum's epilogue) comes from no kernel, and no launcher sees sizes its
        grids and blocks were never made for. The caller's config is still checked, key by key,
        against the space of the implementation it was written for."""
        impl = next(i for i in impls if not i.opt_in)
        check_config_keys(problem, impl, config)
        reference = self.implementation("reference")
        why = "an empty problem: the reference's answer, with nothing to launch"
        run = Run(reference, None, why)
        return Call(self.name, problem, run, run if self.differentiable else None,
                    tuple(sorted((extra or {}).items())))

    def _choose(self, problem: Problem, impls: list[Implementation], config: dict | None,
                direction: str) -> tuple[Implementation, str]:
        """An opt-in implementation runs where its module's ``choice(problem, config, direction)``
        says so; the next one runs otherwise, with that answer as its reason."""
        why = ""
        for impl in impls:
            if impl.opt_in:
                runs, why = impl.load().choice(problem, config, direction)
                if runs:
                    return impl, why
                continue
            return impl, why or f"the {impl.backend} backend's {impl.name} kernels"
        raise BackendUnavailable(f"{self.name}: no implementation on {impls[0].backend} takes this problem: {why}")

    # --- running ----------------------------------------------------------------------------------

    def run(self, problem: Problem, backend: str, config: Any, arrays: tuple, static: dict[str, Any],
            extra: dict[str, Any] | None = None) -> tuple:
        """The op's outputs for ``arrays`` through its framework's front end.

        ``static``: the spec's non-array arguments, from which a custom op traced by
        ``torch.compile`` (or with symbolic shapes) rebuilds the problem when it runs (while
        tracing, shapes may be symbolic and the config is decided per concrete shape at run time)."""
        if problem.framework == "torch":
            from ceiling.frontends import torch as front

            if _compiling() or _symbolic(arrays):
                key = DEFERRED + constant_json({"backend": backend, "config": config, "static": static,
                                                "extra": extra or {}})
            else:
                key = self.select(problem, backend, config, extra=extra).key()
            return front.apply(self, key, *arrays)
        from ceiling.frontends import jax as front

        return front.apply(self, self.select(problem, backend, config, extra=extra), *arrays)

    def call_for(self, key: str, arrays: tuple, problem: Problem | None = None) -> Call:
        """The :class:`Call` a custom op was given, deciding a deferred one now (for ``problem``
        where the arrays it was checked from are not at hand: a backward that saved other ones)."""
        if not key.startswith(DEFERRED):
            return Call.from_key(key)
        problem = problem or self.problem_for(key, arrays)
        if _symbolic(arrays) or _symbolic_problem(problem):  # a fake call under dynamic shapes
            return self._deferred_call.__wrapped__(self, key, problem)
        return self._deferred_call(key, problem)

    def problem_for(self, key: str, arrays: tuple) -> Problem:
        if not key.startswith(DEFERRED):
            return Call.from_key(key).problem
        return self.check(*arrays, **json.loads(key[len(DEFERRED):])["static"])

    @functools.lru_cache(maxsize=256)
    def _deferred_call(self, key: str, problem: Problem) -> Call:
        data = json.loads(key[len(DEFERRED):])
        return self.select(problem, data["backend"], data["config"], extra=data["extra"])

    __hash__ = object.__hash__


def resolve_config(problem: Problem, impl: Implementation, user: Any) -> Any:
    """The config ``impl`` runs ``problem`` with: its heuristic, the tuned tables' entries for the
    device and the problem's features over it, the caller's ``config=`` over both, validated once
    against the implementation's space (:func:`ceiling.spaces.config.resolve`).

    The launcher module gives ``heuristic(problem, user)`` and may give ``target(problem, user)``
    (the space's target where the implementation serves several: TPU generations, trn1/trn2, the
    one the caller's config names, Blackwell and CDNA4 beside Hopper and CDNA3; None: the
    implementation's own),
    ``table_target(problem)`` (the target whose tables serve the problem, None for none: the
    interpreter runs the heuristic where the tables are for a device), ``features(problem,
    user)`` (names beyond the problem's fields for the tables' conditions and the space's
    constraints: a padded head dim, whether a bias tile is live), ``own(user)`` (its part of a
    config that also selects: the Gluon tiles under ``"gluon"``) or, for configs that are not
    merged key by key, ``resolve(problem, impl, user)`` in place of all of this."""
    module = impl.load()
    if hasattr(module, "resolve"):
        return module.resolve(problem, impl, user)
    if impl.family is None:
        if user is not None:
            raise InputError("config", f"None: the {impl.label} implementation of {impl.op} has no config",
                             repr(user))
        return None
    return resolve_tabled(problem, impl, module.own(user) if hasattr(module, "own") else user)


def check_config_keys(problem: Problem, impl: Implementation, user: Any) -> None:
    """The caller's config checked without resolving it (keys, types and domains against the
    implementation's space; no constraint, no table): for a problem with nothing to launch."""
    from collections.abc import Mapping

    from ceiling import spaces

    if user is None:
        return
    if impl.family is None:
        raise InputError("config", f"None: the {impl.label} implementation of {impl.op} has no config", repr(user))
    module = impl.load()
    if isinstance(user, str):
        if user == "autotune" and hasattr(module, "autotune"):
            return  # nothing to time in an empty problem
        raise InputError("config", f"a dict of the {impl.label} implementation's keys" +
                         (' or "autotune"' if hasattr(module, "autotune") else ""), repr(user))
    if not isinstance(user, Mapping):
        raise InputError("config", "a dict (or None)", type(user).__name__)
    target = (module.target(problem, user) if hasattr(module, "target") else None) or impl.target
    if target is None:
        named = user.get("target")
        own_targets = [t for t in spaces.targets(impl.family) if spaces.get(impl.family, t).backend == impl.backend]
        target = named if named in own_targets else own_targets[0]
    spaces.get(impl.family, target).check(dict(module.own(user) if hasattr(module, "own") else user), partial=True)


def resolve_tabled(problem: Problem, impl: Implementation, own: Any) -> Any:
    """:func:`resolve_config` from the implementation's own part of the caller's config."""
    from ceiling import tables
    from ceiling.spaces.config import resolve

    module = impl.load()
    # a launcher's target(problem, user) may move a problem to another target of its backend (a
    # Blackwell or CDNA4 GPU, the chip a config names); None, or no hook, keeps the implementation's
    target = (module.target(problem, own) if hasattr(module, "target") else None) or impl.target
    features = problem.features()
    if hasattr(module, "features"):
        features.update(module.features(problem, own))
    table_target = module.table_target(problem) if hasattr(module, "table_target") else target
    found = tables.lookup(impl.backend, impl.family, problem.gpu, table_target, features)
    return resolve(impl.family, target, module.heuristic(problem, own), found.config, own, features, found.source)


def _symbolic(arrays: tuple) -> bool:
    """Whether a shape is symbolic (a tracer's, as in an AOT-traced backward with dynamic shapes)."""
    return any(not isinstance(d, int) for x in arrays if x is not None for d in x.shape)


def _symbolic_problem(problem: Problem) -> bool:
    """Whether a problem holds symbolic sizes (and so cannot key a cache)."""
    try:
        hash(problem)
    except TypeError:
        return True
    return False


def _compiling() -> bool:
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


REGISTRY: dict[str, Op] = {}


def register(op: Op) -> Op:
    """Add ``op`` to the registry; with PyTorch loaded, make its custom op now: an op module is
    imported by its public function's first call, which ``torch.compile`` may be tracing, and
    ``torch.library`` cannot be traced."""
    import sys

    REGISTRY[op.name] = op
    if "torch" in sys.modules and op.signature is not None:
        from ceiling.frontends import torch as front

        front.prepare(op)
    return op


def get(name: str) -> Op:
    """The op named ``name`` (its package is imported, which registers it)."""
    if name not in REGISTRY:
        importlib.import_module(OP_PACKAGES[name])
    return REGISTRY[name]


# Where each op registers itself; ceiling.backends reads the registry through these.
OP_PACKAGES = {
    "gemm": "ceiling.gemm.op",
    "scaled_gemm": "ceiling.scaled_gemm.op",
    "fp8_gemm": "ceiling.scaled_gemm.op",
    "fp8_quantize": "ceiling.fp8.op",
    "attention": "ceiling.attention.op",
    "triangle_attention": "ceiling.triangle.op",
    "triangle_multiplicative_update": "ceiling.triangle.op",
}
