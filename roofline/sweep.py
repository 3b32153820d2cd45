"""Sweeps of a template's space on Ray: compile-and-inspect on CPUs, benchmarks on GPUs.

Every valid point becomes one CPU task that compiles the kernel for the
template's target and reads its static facts (``ceiling.isa.profile``); on a
cluster with GPUs, each point's benchmark is one task holding one GPU, so no two
timings share a device. Results come back as records (``kind="static"`` and
``kind="kernel"``) and are appended to a store as they arrive. A point that
fails to compile is recorded too (``metric="compiled"``, value 0, the error in
``extra``): invalid points are data for the search.

The same code runs on a laptop (``ray.init()`` starts a local cluster), a
multi-GPU box, or a cluster (``address="auto"``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ceiling.microbench import records as _records
from ceiling.roofline.templates.schema import Template

STATIC_METRICS = {
    "registers": "count",
    "spill_bytes": "B",
    "smem_bytes": "B",
    "tensor_core_instructions": "count",
}


def inspect_point(template_json: str, config: dict[str, Any], shape: dict[str, Any] | None = None) -> list[dict]:
    """Compile one point (every kernel of it, for a sectioned family; one kernel for a point of one
    section) for the template's target; its static facts as record dicts (runs in a worker)."""
    from ceiling import isa
    from ceiling.roofline.templates import families
    from ceiling.roofline.templates.schema import Template

    template = Template.model_validate_json(template_json)
    prov = _records.host_provenance(device=f"target {template.target}").model_dump()
    base = dict(kind="static", op=template.op, name=template.backend, backend=template.backend,
                config=dict(config), method="static", provenance=prov, shape={"dtype": template.dtype})
    # a point of one kernel (a section's parameters) compiles that kernel alone
    sections = sorted({k.split(".", 1)[0] for k in config if "." in k})
    only = sections[0] if len(sections) == 1 and set(config) == set(template.section_names(sections[0])) else None
    try:
        specs = families.compile_specs(template.family, template.target, template.nest(dict(config)),
                                       shape or (template.workloads[0] if template.workloads else None), template.dtype,
                                       only)
        profiles = [isa.profile(spec, template.target) for spec in specs]
    except Exception as exc:  # noqa: BLE001 - a failed compile is a result, not a crash
        return [dict(base, metric="compiled", value=0.0, unit="bool",
                     extra={"status": "compile-failed", "error": f"{type(exc).__name__}: {exc}"[:2000]})]
    out = [dict(base, metric="compiled", value=1.0, unit="bool",
                extra={"status": "ok", "kernel": ", ".join(f.name for f in profiles)})]
    for facts in profiles:
        values = {"registers": facts.registers, "spill_bytes": facts.spill_bytes, "smem_bytes": facts.shared_bytes,
                  "tensor_core_instructions": facts.tensor_core_instructions}
        for metric, unit in STATIC_METRICS.items():
            out.append(dict(base, metric=metric, value=float(values[metric]), unit=unit,
                            extra={"kernel": facts.name, **({"occupancy": facts.extra.get("occupancy")}
                                                            if "occupancy" in facts.extra else {})}))
    return out


def benchmark_point(template_json: str, config: dict[str, Any], shape: dict[str, int]) -> list[dict]:
    """Time one point on the GPU this task holds (runs in a worker with ``num_gpus=1``)."""
    import torch
    import triton.testing

    from ceiling.gemm import gemm
    from ceiling.roofline.templates.schema import Template

    template = Template.model_validate_json(template_json)
    if template.op != "gemm":
        raise NotImplementedError(f"GPU sweeps time GEMM points; {template.op} has no sweep benchmark yet")
    dtype = getattr(torch, template.dtype)
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(shape["M"], shape["K"], device="cuda", generator=g).to(dtype)
    b = torch.randn(shape["K"], shape["N"], device="cuda", generator=g).to(dtype)
    prov = _records.host_provenance(device=torch.cuda.get_device_name()).model_dump()
    base = dict(kind="kernel", op="gemm", name=template.backend, backend=template.backend,
                shape={**shape, "dtype": template.dtype}, config=dict(config), provenance=prov)
    try:
        fn = lambda: gemm(a, b, backend=template.backend, config=dict(config))  # noqa: E731
        fn()
        torch.cuda.synchronize()
        p50, p20, p80 = triton.testing.do_bench(fn, quantiles=[0.5, 0.2, 0.8], return_mode="median")
    except Exception as exc:  # noqa: BLE001
        return [dict(base, metric="time", value=0.0, unit="s",
                     extra={"status": "runtime-failed", "error": f"{type(exc).__name__}: {exc}"[:2000]})]
    return [dict(base, metric="time", value=p50 * 1e-3, unit="s", method="cuda-events (triton do_bench)",
                 median=p50 * 1e-3, p20=p20 * 1e-3, p80=p80 * 1e-3,
                 extra={"status": "ok", "tflops": 2.0 * shape["M"] * shape["N"] * shape["K"] / (p50 * 1e-3) / 1e12})]


@dataclass
class SweepResult:
    points: int = 0
    written: int = 0
    failed: int = 0
    refused: list[tuple[int, str]] = field(default_factory=list)
    records: list[_records.Record] = field(default_factory=list)


def run(template: Template, points: Iterable[dict[str, Any]], store: str | Path | None = None,
        shapes: list[dict[str, int]] | None = None, benchmark: bool = False, address: str | None = None,
        num_cpus: int | None = None, progress: Callable[[int, int], None] | None = None) -> SweepResult:
    """Compile (and, with ``benchmark``, time on every GPU of the cluster) each point.

    Records are appended to ``store`` (when given) as each task finishes.
    """
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                 configure_logging=False, ignore_reinit_error=True)
    try:
        payload = template.model_dump_json()
        points = list(points)
        inspect = ray.remote(num_cpus=1)(inspect_point)
        pending = [inspect.remote(payload, p) for p in points]
        if benchmark:
            gpus = int(ray.cluster_resources().get("GPU", 0))
            if gpus == 0:
                raise RuntimeError("benchmark=True needs GPUs in the Ray cluster; it has none")
            bench = ray.remote(num_gpus=1)(benchmark_point)
            pending += [bench.remote(payload, p, s) for s in (shapes or template.workloads) for p in points]
        result = SweepResult(points=len(points))
        total, done = len(pending), 0
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            rows = ray.get(ready[0])
            done += 1
            result.failed += sum(1 for r in rows if r.get("extra", {}).get("status", "ok") != "ok")
            good, refused = _records.validate(rows)
            result.records.extend(good)
            result.refused.extend(refused)
            if store is not None and good:
                n, _ = _records.append(store, good)
                result.written += n
            if progress:
                progress(done, total)
        return result
    finally:
        if started_here:
            ray.shutdown()
