"""The tuning sweep behind a device's ``kernels/nvidia/tables/<device>/triangle_multiplication.json``:
the six kernels' configs tuned one stage at a time (coordinate descent) from the device's current
entry, each candidate checked against float32 and timed by CUDA-graph replay (``docs/tuning.md``).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from ceiling.tuning import space

FAMILY = "triangle_multiplication"
KEY = "128"  # the c_z = c width the candidate lists were compiled at (AlphaFold 3's)
FORWARD_STAGES = ("ln_gate_proj", "contract", "ln_out_gate")
BACKWARD_STAGES = ("out_gate_bwd", "ln_out_bwd", "ln_gate_proj_bwd", "bwd_rows")
WEIGHT_SHAPES = {  # AlphaFold 3 widths: c = c_z
    "norm_in_weight": lambda cz: (cz,), "norm_in_bias": lambda cz: (cz,),
    "p_in_weight": lambda cz: (2 * cz, cz), "p_in_bias": lambda cz: (2 * cz,),
    "g_in_weight": lambda cz: (2 * cz, cz), "g_in_bias": lambda cz: (2 * cz,),
    "norm_out_weight": lambda cz: (cz,), "norm_out_bias": lambda cz: (cz,),
    "p_out_weight": lambda cz: (cz, cz), "p_out_bias": lambda cz: (cz,),
    "g_out_weight": lambda cz: (cz, cz), "g_out_bias": lambda cz: (cz,),
}


def candidates() -> dict[str, list[Any]]:
    """Stage -> candidate configs, the statically checked ones (``bwd_rows`` -> row counts, the
    space's search values: they change no kernel's code)."""
    out: dict[str, list[Any]] = {}
    for stage in (*FORWARD_STAGES, *BACKWARD_STAGES):
        if stage in space.sections(FAMILY):
            out[stage] = [{k: v for k, v in c.items() if k != "static"} for c in space.candidates(FAMILY, KEY, stage)]
        else:
            out[stage] = [point[stage] for point in space.grid(FAMILY, "")]
    return out


def with_stage(cfgs: dict, stage: str, value: Any) -> dict:
    """``cfgs`` with one stage's config replaced."""
    return {**cfgs, stage: value}


def compile_spec_for(stage: str, cfgs: dict, dtype: str = "bfloat16", c_z: int = 128):
    """The ``ceiling.isa.CompileSpec`` of one stage's kernel under ``cfgs``."""
    from ceiling.triton import triangle_multiplication_specs

    specs = triangle_multiplication_specs.compile_specs(dtype, c_z, c_z, "sm_90a", cfgs=cfgs, prefix="tune")
    return next(s for s in specs if s.name == f"tune_{stage}_{dtype}_cz{c_z}_c{c_z}")


def problem_on(device_name: str | None, dtype: str, n: int = 768, c_z: int = 128):
    """The sweep's problem (AlphaFold 3's widths, masked, outgoing) on the GPU named ``device_name``
    (None: the CPU, where the kernels run interpreted)."""
    import dataclasses

    from ceiling.triangle.spec import shipped_trimul_problem

    problem = shipped_trimul_problem(dtype, c_z, c_z, n=n)
    return dataclasses.replace(problem, device="cuda:0" if device_name else "cpu", gpu=device_name,
                               arch="sm_90" if device_name else None)


def start_config(device_name: str | None, dtype: str) -> dict:
    """The config the tables give the sweep's problem on ``device_name`` now: where it starts."""
    from ceiling.op import get, resolve_config

    impl = get("triangle_multiplicative_update").implementation("nvidia")
    return resolve_config(problem_on(device_name, dtype), impl, None).as_dict()


def make_inputs(n: int, c_z: int, dtype: torch.dtype, seed: int = 0, device: str = "cuda") -> dict:
    """Random x, mask (5% masked pairs), weights and biases at AlphaFold's scales, and an output gradient."""
    g = torch.Generator(device=device).manual_seed(seed)
    weights = {}
    for name, shape in WEIGHT_SHAPES.items():
        s = shape(c_z)
        w = torch.randn(*s, generator=g, device=device) * (s[-1] ** -0.5 if len(s) == 2 else 0.1)
        weights[name] = (w + (1.0 if name.startswith("norm") and name.endswith("weight") else 0.0)).to(dtype)
    return {
        "x": torch.randn(1, n, n, c_z, generator=g, device=device).to(dtype),
        "mask": (torch.rand(1, n, n, generator=g, device=device) > 0.05).to(dtype),
        "weights": weights,
        "dout": torch.randn(1, n, n, c_z, generator=g, device=device).to(dtype),
    }


def _run(inputs: dict, direction: str, cfgs: dict | None, backward: bool, backend: str = "nvidia"):
    """Output (and the gradients of x and every weight) through ``ceiling.triangle_multiplicative_update``."""
    from ceiling.triangle import triangle_multiplicative_update

    x = inputs["x"].detach().requires_grad_(backward)
    weights = {k: w.detach().requires_grad_(backward) for k, w in inputs["weights"].items()}
    if backend == "reference":  # float32 leaves, so that the gradients are not rounded back to 16 bits
        from ceiling.triangle.trimul_reference import trimul

        x = inputs["x"].detach().float().requires_grad_(backward)
        weights = {k: w.detach().float().requires_grad_(backward) for k, w in inputs["weights"].items()}
        out = trimul(x, direction, inputs["mask"].float(), **weights, compute_dtype=torch.float32)
    else:
        out = triangle_multiplicative_update(x, direction, inputs["mask"], **weights, backend=backend, config=cfgs)
    if not backward:
        return [out]
    return [out, *torch.autograd.grad(out, [x, *weights.values()], inputs["dout"])]


def thunk(n: int, cfgs: dict | None, backward: bool = True, c_z: int = 128, dtype: torch.dtype = torch.bfloat16,
          direction: str = "outgoing", device: str = "cuda"):
    """A no-argument call of the op (forward, and backward when ``backward``) at ``cfgs`` on
    fresh inputs: what a profiler runs to see where the time goes."""
    inputs = make_inputs(n, c_z, dtype, 0, device)
    return lambda: _run(inputs, direction, cfgs, backward)


def _error(results, exact) -> float:
    """The largest of the relative max-norm errors of each result against ``exact``."""
    return max(((r.double() - e.double()).abs().max() / e.double().abs().max().clamp_min(1e-30)).item()
               for r, e in zip(results, exact))


def _time(fn, rep_ms: int) -> tuple[float, float, float]:
    """CUDA-graph replay, or CUDA events if the call cannot be captured; every candidate of a
    stage goes through the same path, so their ranking is like for like."""
    from ceiling.timers import time_events, time_graph

    try:
        return time_graph(fn, rep_ms)
    except RuntimeError:
        import torch

        torch.cuda.synchronize()
        return time_events(fn, rep_ms)


def sweep(n: int = 768, c_z: int = 128, dtype: torch.dtype = torch.bfloat16, direction: str = "outgoing",
          rep_ms: int = 100, budget_s: float | None = None, seed: int = 0, *, device: str = "cuda",
          timer=None, stages: tuple[str, ...] | None = None) -> tuple[list[dict], dict]:
    """(rows, best per-stage config). One row per (stage, candidate): median/p20/p80 ms of the
    pass it was timed on and its error; stages not reached within ``budget_s`` keep the
    starting config.

    ``timer(fn, rep_ms) -> (median, p20, p80)`` defaults to CUDA-graph replay; on a CPU
    (``device="cpu"``) the kernels run interpreted, which checks every candidate's numerics
    but times nothing, so a caller there supplies its own timer.
    """
    name = str(dtype).removeprefix("torch.")
    timer = timer or _time
    best = start_config(torch.cuda.get_device_name() if device == "cuda" else None, name)
    inputs = make_inputs(n, c_z, dtype, seed, device)
    exact = {b: _run(inputs, direction, None, b, backend="reference") for b in (False, True)}
    # The framework's own error: the reference model run at the inputs' precision.
    framework_err = {b: _error(_lowp_reference(inputs, direction, b, dtype), exact[b]) for b in (False, True)}
    rows: list[dict] = []
    start = time.perf_counter()
    for stage, options in candidates().items():
        if stages is not None and stage not in stages:
            continue
        if budget_s is not None and time.perf_counter() - start > budget_s:
            break
        backward = stage in BACKWARD_STAGES
        timed: list[tuple[float, Any]] = []
        for option in options:
            cfgs = with_stage(best, stage, {**best[stage], **option} if isinstance(option, dict) else option)
            row = dict(stage=stage, config=option, n=n, c_z=c_z, dtype=name, direction=direction,
                       timed_on="fwd+bwd" if backward else "fwd")
            try:
                err = _error(_run(inputs, direction, cfgs, backward), exact[backward])
                ok = err <= 2 * framework_err[backward] + 1e-3
                row.update(rel_error=err, framework_error=framework_err[backward], correct=ok)
                if ok:
                    ms, p20, p80 = timer(lambda: _run(inputs, direction, cfgs, backward), rep_ms)
                    row.update(median_ms=ms, p20_ms=p20, p80_ms=p80)
                    timed.append((ms, cfgs[stage]))
            except Exception as exc:  # noqa: BLE001 - a candidate that fails is reported, not fatal
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            rows.append(row)
        if timed:
            best = with_stage(best, stage, min(timed, key=lambda t: t[0])[1])
    return rows, best


def _lowp_reference(inputs: dict, direction: str, backward: bool, dtype: torch.dtype):
    """The reference model computed in the inputs' dtype: the error a framework makes at that precision."""
    from ceiling.triangle.trimul_reference import trimul

    x = inputs["x"].detach().requires_grad_(backward)
    weights = {k: w.detach().requires_grad_(backward) for k, w in inputs["weights"].items()}
    out = trimul(x, direction, inputs["mask"], **weights, compute_dtype=dtype)
    if not backward:
        return [out]
    return [out, *torch.autograd.grad(out, [x, *weights.values()], inputs["dout"])]


def table_entries(best: dict, measured: dict, why: str) -> list[dict]:
    """A device's table for the tuned config: ``best`` as a measured entry, then the float32
    entries of the target's table again (the sweep tunes 16-bit inputs only; merged after the
    device's entry, they keep the float32 overrides in force there)."""
    from ceiling import tables

    bf16, f32 = (problem_on(None, dtype).features() for dtype in ("bfloat16", "float32"))
    target = tables.read(tables.path("nvidia", "sm_90a", FAMILY))["entries"]
    float32 = [e for e in target if tables.matches(e, f32) and not tables.matches(e, bf16)]
    return [{"config": best, "source": "measured", "measured": measured, "why": why}, *float32]
