"""Benchmark cases for the triangle ops, as plain data for the benchmark harness: per (op, shape,
direction) our kernel next to PyTorch eager, ``torch.compile`` and cuEquivariance baselines.
``python -m ceiling.triangle.bench [suite]`` times them (on a CPU, the ``tiny`` suite once each, as a
smoke test); ``docs/triangle.md`` describes the cases.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

Make = Callable[[Any], Callable[[], Any]]

# device: AlphaFold 3's widths; tiny: a CPU smoke run under the interpreter.
SUITES = {
    "device": {"n": (384, 768), "c_z": 128, "heads": 4, "head_dim": 32, "batch": 1, "dtype": "bfloat16"},
    "tiny": {"n": (9,), "c_z": 16, "heads": 2, "head_dim": 8, "batch": 1, "dtype": "float32"},
}


@dataclass(frozen=True)
class Impl:
    name: str  # "ceiling:nvidia", "torch-eager", "torch-compile", "cuequivariance"
    role: str  # "ours" or "baseline"
    make: Make | None
    skip: str | None = None


@dataclass(frozen=True)
class TriangleCase:
    op: str  # "triangle_attention" or "triangle_multiplicative_update"
    label: str
    shape: dict[str, int]
    dtype: str
    direction: str  # "fwd", "bwd" or "fwdbwd"
    make_inputs: Callable[[int, str], Any]
    impls: tuple[Impl, ...]
    flops: float
    config: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------- baselines written as model code


def eager_triangle_attention(q, k, v, bias, mask):
    """OpenFold/Boltz's attention core in the inputs' dtype: [N, H, N, N] logits materialized."""
    import torch

    s = torch.matmul(q, k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    s = s + bias.to(q.dtype) + (1e9 * (mask.to(q.dtype) - 1))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def eager_trimul(x, mask, w, direction):
    """Boltz's TriangleMultiplication forward (fp32 contraction, bf16 elsewhere)."""
    import torch
    import torch.nn.functional as F

    x = F.layer_norm(x, x.shape[-1:], w["norm_in_weight"], w["norm_in_bias"], 1e-5)
    x_in = x
    x = F.linear(x, w["p_in_weight"]) * torch.sigmoid(F.linear(x, w["g_in_weight"]))
    x = x * mask.unsqueeze(-1)
    a, b = torch.chunk(x.float(), 2, dim=-1)
    eq = "bikd,bjkd->bijd" if direction == "outgoing" else "bkid,bkjd->bijd"
    x = torch.einsum(eq, a, b).to(x_in.dtype)
    x = F.layer_norm(x, x.shape[-1:], w["norm_out_weight"], w["norm_out_bias"], 1e-5)
    return F.linear(x, w["p_out_weight"]) * torch.sigmoid(F.linear(x_in, w["g_out_weight"]))


def _timed(forward: Callable[[Any], Any], direction: str, leaves: Callable[[Any], list]) -> Make:
    def make(inputs):
        import torch

        if direction == "fwd":
            return lambda: forward(inputs)
        do = inputs["dout"]
        if direction == "fwdbwd":
            return lambda: torch.autograd.grad(forward(inputs), leaves(inputs), do)
        out = forward(inputs)
        return lambda: torch.autograd.grad(out, leaves(inputs), do, retain_graph=True)

    return make


def _cueq(device: str):
    if not device.startswith("cuda"):
        return None, "cuEquivariance runs on NVIDIA GPUs only"
    try:
        import cuequivariance_torch as cuet

        return cuet, None
    except Exception as exc:  # noqa: BLE001 - a missing install is a skip, with its reason
        return None, f"cuequivariance_torch is not installed ({exc.__class__.__name__}: {exc})"


def _our_backends(device: str) -> list[str]:
    from ceiling import backends

    if device.startswith("cuda"):
        vendor = backends.gpu_vendor()
        return [vendor] if vendor else []
    return ["nvidia"]  # the interpreter: a smoke test of the source, never a timing


def _on(device: str, problem):
    """``problem`` on the GPU ``device`` names (its name and architecture, as a call there sees them)."""
    import dataclasses

    from ceiling.arrays import gpu_facts

    gpu, arch = gpu_facts("torch", device if ":" in device else f"{device}:0")
    return dataclasses.replace(problem, device=device, gpu=gpu, arch=arch)


def _resolved(op: str, backend: str, problem) -> dict:
    """The config ``backend``'s implementation of ``op`` runs ``problem`` with."""
    from ceiling.op import get, resolve_config

    return resolve_config(problem, get(op).implementation(backend), None).as_dict()


# ----------------------------------------------------------------------------- cases


def attention_case(n, heads, head_dim, batch, dtype, direction, device) -> TriangleCase:
    import torch

    tdtype = getattr(torch, dtype)

    def make_inputs(seed: int, dev: str):
        g = torch.Generator(device=dev).manual_seed(seed)

        def r(*s):
            return torch.randn(*s, generator=g, device=dev, dtype=torch.float32)

        inputs = {
            "q": r(batch, n, heads, n, head_dim).to(tdtype), "k": r(batch, n, heads, n, head_dim).to(tdtype),
            "v": r(batch, n, heads, n, head_dim).to(tdtype), "bias": r(batch, 1, heads, n, n),
            "mask": torch.rand(batch, n, 1, 1, n, generator=g, device=dev) > 0.05,
        }
        if direction != "fwd":
            for key in ("q", "k", "v", "bias"):
                inputs[key].requires_grad_()
            inputs["dout"] = r(batch, n, heads, n, head_dim).to(tdtype)
        return inputs

    def leaves(i):
        return [i["q"], i["k"], i["v"], i["bias"]]

    impls = []
    for backend in _our_backends(device):
        import ceiling

        def ours(i, backend=backend):
            return ceiling.triangle_attention(i["q"], i["k"], i["v"], i["bias"], i["mask"], backend=backend)

        impls.append(Impl(f"ceiling:{backend}", "ours", _timed(ours, direction, leaves)))
        if direction == "fwd" and device.startswith("cuda"):
            # The forward variant that shares bias tiles between rows, for the device to choose.
            from ceiling.triangle.spec import shipped_attention_problem

            problem = _on(device, shipped_attention_problem(head_dim, dtype, batch=batch, n=n, heads=heads))
            shipped = _resolved("triangle_attention", backend, problem)
            config = {**shipped, "fwd": shipped["fwd_rows"]}

            def rows(i, backend=backend, config=config):
                return ceiling.triangle_attention(i["q"], i["k"], i["v"], i["bias"], i["mask"], backend=backend,
                                                  config=config)

            impls.append(Impl(f"ceiling:{backend}-rows{config['fwd']['ROWS']}", "ours", _timed(rows, direction, leaves)))

    def eager(i):
        return eager_triangle_attention(i["q"], i["k"], i["v"], i["bias"], i["mask"])

    impls.append(Impl("torch-eager", "baseline", _timed(eager, direction, leaves)))
    if device.startswith("cuda"):
        compiled = torch.compile(eager_triangle_attention, dynamic=False)
        impls.append(Impl("torch-compile", "baseline", _timed(
            lambda i: compiled(i["q"], i["k"], i["v"], i["bias"], i["mask"]), direction, leaves)))
    cuet, why = _cueq(device)
    if cuet is None:
        impls.append(Impl("cuequivariance", "baseline", None, why))
    else:
        impls.append(Impl("cuequivariance", "baseline", _timed(
            lambda i: cuet.triangle_attention(i["q"], i["k"], i["v"], i["bias"], i["mask"]), direction, leaves)))
    fwd = 4.0 * batch * n * heads * n * n * head_dim
    return TriangleCase("triangle_attention", f"b{batch}-n{n}-h{heads}-d{head_dim}",
                        {"batch": batch, "n": n, "heads": heads, "head_dim": head_dim}, dtype, direction, make_inputs,
                        tuple(impls), fwd * {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}[direction])


def trimul_case(n, c_z, batch, dtype, direction, tri_direction, device) -> TriangleCase:
    import torch

    tdtype = getattr(torch, dtype)
    c = c_z
    shapes = {"norm_in_weight": (c_z,), "norm_in_bias": (c_z,), "p_in_weight": (2 * c, c_z),
              "g_in_weight": (2 * c, c_z), "norm_out_weight": (c,), "norm_out_bias": (c,),
              "p_out_weight": (c_z, c), "g_out_weight": (c_z, c_z)}

    def make_inputs(seed: int, dev: str):
        g = torch.Generator(device=dev).manual_seed(seed)
        w = {name: (torch.randn(*s, generator=g, device=dev) * (s[-1] ** -0.5 if len(s) == 2 else 0.1)
                    + (1.0 if name.startswith("norm") and name.endswith("weight") else 0.0)).to(tdtype)
             for name, s in shapes.items()}
        inputs = {"x": torch.randn(batch, n, n, c_z, generator=g, device=dev).to(tdtype),
                  "mask": (torch.rand(batch, n, n, generator=g, device=dev) > 0.05).to(tdtype), "w": w}
        if direction != "fwd":
            inputs["x"].requires_grad_()
            for t in w.values():
                t.requires_grad_()
            inputs["dout"] = torch.randn(batch, n, n, c_z, generator=g, device=dev).to(tdtype)
        return inputs

    def leaves(i):
        return [i["x"], *i["w"].values()]

    impls = []
    for backend in _our_backends(device):
        import ceiling

        def ours(i, backend=backend):
            return ceiling.triangle_multiplicative_update(i["x"], tri_direction, i["mask"], **i["w"], backend=backend)

        impls.append(Impl(f"ceiling:{backend}", "ours", _timed(ours, direction, leaves)))
        if direction != "fwd" and device.startswith("cuda"):
            # Keeping [a; b] and y for the backward instead of recomputing them: faster, more memory.
            config = {"save_for_backward": True}

            def saving(i, backend=backend, config=config):
                return ceiling.triangle_multiplicative_update(i["x"], tri_direction, i["mask"], **i["w"],
                                                              backend=backend, config=config)

            impls.append(Impl(f"ceiling:{backend}-saved", "ours", _timed(saving, direction, leaves)))
    impls.append(Impl("torch-eager", "baseline", _timed(
        lambda i: eager_trimul(i["x"], i["mask"], i["w"], tri_direction), direction, leaves)))
    if device.startswith("cuda"):
        compiled = torch.compile(eager_trimul, dynamic=False)
        impls.append(Impl("torch-compile", "baseline", _timed(
            lambda i: compiled(i["x"], i["mask"], i["w"], tri_direction), direction, leaves)))
    cuet, why = _cueq(device)
    if cuet is None:
        impls.append(Impl("cuequivariance", "baseline", None, why))
    else:
        impls.append(Impl("cuequivariance", "baseline", _timed(
            lambda i: cuet.triangle_multiplicative_update(i["x"], tri_direction, i["mask"], **i["w"]),
            direction, leaves)))
    fwd = 2.0 * batch * n * n * (2 * c_z * 2 * c + c * c_z + c_z * c_z) + 2.0 * batch * c * n**3
    return TriangleCase("triangle_multiplicative_update", f"b{batch}-n{n}-c{c_z}-{tri_direction}",
                        {"batch": batch, "n": n, "c_z": c_z, "c": c}, dtype, direction, make_inputs, tuple(impls),
                        fwd * {"fwd": 1.0, "bwd": 2.0, "fwdbwd": 3.0}[direction], {"triangle": tri_direction})


def bench_cases(suite: str = "device", device: str = "cuda") -> list[TriangleCase]:
    s = SUITES[suite]
    cases = []
    for n in s["n"]:
        for direction in ("fwd", "bwd"):
            cases.append(attention_case(n, s["heads"], s["head_dim"], s["batch"], s["dtype"], direction, device))
        for direction in ("fwd", "fwdbwd"):
            cases.append(trimul_case(n, s["c_z"], s["batch"], s["dtype"], direction, "outgoing", device))
    return cases


# ----------------------------------------------------------------------------- a self-contained runner


def measure(thunk: Callable[[], Any], rounds: int = 20, inner: int = 5) -> dict[str, float]:
    """Median ms per call with CUDA events, and the peak memory (MiB) above what was allocated before."""
    import torch

    thunk()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    thunk()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            thunk()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    q = statistics.quantiles(times, n=5)
    return {"median_ms": statistics.median(times), "p20_ms": q[0], "p80_ms": q[-1], "peak_mib": peak}


def main(argv: list[str]) -> None:
    import torch

    on_gpu = torch.cuda.is_available()
    suite = argv[0] if argv else ("device" if on_gpu else "tiny")
    device = "cuda" if on_gpu else "cpu"
    for case in bench_cases(suite, device):
        inputs = case.make_inputs(0, device)
        for impl in case.impls:
            head = f"{case.op:32s} {case.label:28s} {case.direction:7s} {impl.name:16s}"
            if impl.make is None:
                print(f"{head} skipped: {impl.skip}")
                continue
            try:
                thunk = impl.make(inputs)
                if on_gpu:
                    m = measure(thunk)
                    tflops = case.flops / (m["median_ms"] * 1e-3) / 1e12
                    print(f"{head} {m['median_ms']:8.3f} ms  [{m['p20_ms']:.3f}, {m['p80_ms']:.3f}]  "
                          f"{tflops:6.1f} TFLOP/s  peak +{m['peak_mib']:8.1f} MiB", flush=True)
                else:
                    thunk()
                    print(f"{head} ran (CPU smoke run, not a timing)")
            except Exception as exc:  # noqa: BLE001 - one failing implementation must not hide the others
                print(f"{head} FAILED {exc.__class__.__name__}: {str(exc)[:300]}", flush=True)
            if on_gpu:
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1:])
