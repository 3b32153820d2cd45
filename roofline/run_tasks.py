"""The work of ``ceiling run`` as small tasks that run side by side in worker processes.

Two kinds of task, each picklable (names only: a worker rebuilds what it needs):

* ISA: compile one kernel specialization for a real target (sm_90a, sm_100a, sm_103a, gfx942,
  gfx950) and read its
  static facts, or inspect every shipped config of a non-Triton target in one go (the TPU
  export, the Trainium emulator's rule checks and cost model: both take seconds).
* smoke: one op's correctness smoke check on one backend (``ceiling.smoke.run_one``).

Compiling every shipped Triton config (``full=True``, 93 specializations) takes most of a
2-core machine's ten minutes; by default the run compiles the representatives: for every
kernel function of every op and target one config, the one the tuned table picks for the op's
headline problem (GEMM 4096^3 bf16 on an H200 / MI300X, attention at head_dim 128 causal), which
still covers every kernel family on every target. The triangle ops ship one config per kernel
function, so all of theirs are compiled. Compiles go through Triton's cache (``~/.triton/cache``,
or ``$TRITON_CACHE_DIR``), so a second run recompiles nothing.

``run(tasks, jobs, on_done)`` runs the tasks on a process pool, the slowest first, and reports
each one as it finishes.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import multiprocessing as mp
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

HEADLINE_GEMM = (4096, 4096, 4096)  # M, N, K of the GEMM representative
HEADLINE_ATTENTION = {"head_dim": 128, "causal": True}

# Rough CPU seconds of each task on a 2-core machine, to start the slowest first so that the workers
# finish together: a Triton compile per op; a whole non-Triton target (the Trainium emulator runs the
# kernels' instruction traces at full size); a smoke check per (op, backend), Pallas interpret mode
# compiling every kernel it runs.
_COMPILE_COST = {"attention": 8.0, "gemm": 8.0, "triangle_attention": 3.0, "triangle_multiplicative_update": 4.0}
_TARGET_COST = {("trn", "triangle_multiplicative_update"): 50.0, ("trn", ""): 18.0, ("tpu", ""): 3.0}
_SMOKE_COST = {("tpu", "triangle_multiplicative_update"): 55.0, ("tpu", "triangle_attention"): 30.0,
               ("tpu", "attention"): 18.0, ("tpu", "gemm"): 5.0, ("trainium", ""): 1.0,
               ("", "triangle_attention"): 6.0, ("", "triangle_multiplicative_update"): 6.0, ("", "attention"): 2.5,
               ("", "gemm"): 1.0}


def _cost(table: dict, where: str, op: str) -> float:
    for key in ((where, op), (where, ""), ("", op)):
        if key in table:
            return table[key]
    return 2.0


@dataclass(frozen=True)
class Task:
    kind: str  # "isa" or "smoke"
    op: str
    where: str  # ISA: the target (sm_90a, tpu-v5e, ...); smoke: the backend
    spec: str | None = None  # ISA on a Triton target: the specialization's name
    dtype: str = "bfloat16"
    cost: float = 1.0

    @property
    def label(self) -> str:
        return " ".join(x for x in (self.op, self.where, self.spec) if x)


@dataclass
class Done:
    task: Task
    result: list[dict] = field(default_factory=list)  # ISA rows or smoke results (as dicts)
    seconds: float = 0.0  # wall
    cpu_seconds: float = 0.0  # user + system, the worker's and its subprocesses' (ptxas, cuobjdump)
    error: str = ""


def _triton_specs(op: str, target: str, dtype: str) -> list:
    from ceiling.isa import INSPECTORS

    import inspect

    module_name, func_name = INSPECTORS[(op, target)].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    return func(dtype=dtype, target=target) if "target" in inspect.signature(func).parameters else func(dtype=dtype)


def _headline_gemm_config(target: str, dtype: str) -> Callable[[dict], bool]:
    """Which GEMM spec config the tuned table gives the headline shape (any, if it cannot say)."""
    m, n, k = HEADLINE_GEMM
    try:
        from ceiling.gemm.spec import shipped_problem

        if target.startswith("sm_"):
            from ceiling.op import get, resolve_config
            from ceiling.triangle.spec import SHIPPED_GPUS

            gpu, arch = SHIPPED_GPUS[target]  # an H200 on sm_90a, a B200 on sm_100a
            headline = shipped_problem(m, n, k, dtype, gpu=gpu, arch=arch)
            chosen = resolve_config(headline, get("gemm").implementation("nvidia"), None)
            return lambda c: c == chosen
        if target.startswith("gfx"):
            from ceiling import tables

            # the shape classes are CDNA3's table's on gfx950 too (compiled for it)
            cls = tables.lookup("amd", "gemm", None, "gfx942", shipped_problem(m, n, k, dtype).features()).labels[-1]
            return lambda c: c.get("class") in (cls, "splitk_reduce")
    except Exception:  # noqa: BLE001 - a table that cannot be asked still leaves one spec per kernel
        pass
    return lambda c: True


def representatives(op: str, target: str, specs: list, dtype: str = "bfloat16") -> list:
    """One spec per kernel function: the headline problem's where the op has one, else the first."""
    if op == "gemm":
        prefer = _headline_gemm_config(target, dtype)
    elif op == "attention":
        prefer = lambda c: all(c.get(key) == v for key, v in HEADLINE_ATTENTION.items())  # noqa: E731
    else:
        prefer = lambda c: True  # noqa: E731 - the triangle ops ship one config per kernel function
    chosen: dict[str, Any] = {}
    for spec in specs:
        fn = getattr(spec.fn, "__name__", None) or str(spec.fn)
        if fn not in chosen or (prefer(spec.config) and not prefer(chosen[fn].config)):
            chosen[fn] = spec
    return list(chosen.values())


def isa_tasks(full: bool = False, dtype: str = "bfloat16") -> list[Task]:
    """Every (op, target) of ``ceiling.isa.INSPECTORS``: its representatives, or every shipped config."""
    from ceiling.isa import INSPECTORS, TARGETS

    tasks = []
    for op, target in INSPECTORS:
        if target not in TARGETS:
            tasks.append(Task("isa", op, target, None, dtype, _cost(_TARGET_COST, target[:3], op)))
            continue
        try:
            specs = _triton_specs(op, target, dtype)
        except Exception:  # noqa: BLE001 - the worker reports the failure for the whole target
            tasks.append(Task("isa", op, target, None, dtype, 1.0))
            continue
        picked = specs if full else representatives(op, target, specs, dtype)
        tasks += [Task("isa", op, target, s.name, dtype, _COMPILE_COST.get(op, 3.0)) for s in picked]
    return tasks


def smoke_tasks(device: str = "cpu") -> list[Task]:
    from ceiling.smoke import cases

    return [Task("smoke", op, backend, cost=_cost(_SMOKE_COST, backend, op)) for op, backend in cases(device)]


def _cpu() -> float:
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def execute(task: Task) -> Done:
    """Run one task (in a worker); failures come back as ``Done.error``, never as an exception."""
    start, cpu = time.perf_counter(), _cpu()
    try:
        if task.kind == "smoke":
            from ceiling.smoke import run_one

            result = [r.as_dict() for r in run_one(task.op, task.where)]
        elif task.spec is None:
            from ceiling.isa import inspect_op

            result = inspect_op(task.op, task.where, dtype=task.dtype)
        else:
            from ceiling.isa import profile

            spec = next(s for s in _triton_specs(task.op, task.where, task.dtype) if s.name == task.spec)
            result = [profile(spec, task.where).as_dict()]
        return Done(task, result, time.perf_counter() - start, _cpu() - cpu)
    except Exception as exc:  # noqa: BLE001 - reported with the task, the others go on
        return Done(task, [], time.perf_counter() - start, _cpu() - cpu, f"{type(exc).__name__}: {exc}"[:500])


def _warm() -> None:
    """A worker's start: the heavy imports once, while the parent is still planning."""
    import torch  # noqa: F401
    import triton  # noqa: F401


def run(tasks: list[Task], jobs: int, on_done: Callable[[Done], None]) -> list[Done]:
    """Run ``tasks`` on ``jobs`` worker processes (in this process when ``jobs`` is 1), slowest first."""
    ordered = sorted(tasks, key=lambda t: -t.cost)
    done: list[Done] = []
    if jobs <= 1:
        for task in ordered:
            done.append(execute(task))
            on_done(done[-1])
        return done
    # spawn, not fork: the parent has PyTorch's thread pools running, and a forked copy of them can hang
    with cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), initializer=_warm) as pool:
        futures = [pool.submit(execute, task) for task in ordered]
        for future in cf.as_completed(futures):
            try:
                result = future.result()
            except Exception as exc:  # noqa: BLE001 - a worker that died takes only its task
                task = ordered[futures.index(future)]
                result = Done(task, [], 0.0, 0.0, f"the worker process failed: {type(exc).__name__}: {exc}"[:500])
            done.append(result)
            on_done(result)
    return done
