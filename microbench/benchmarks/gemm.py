"""GEMM cases: ``ceiling.gemm`` on our backends against ``torch.matmul`` (cuBLAS, hipBLASLt/rocBLAS).

Shape suites (M, N, K); ``a`` is (M, K) row-major and ``b`` an nn.Linear weight
(N, K) seen transposed (layout NT, as the projections of a model and the tuning
sweep use it); bf16 inputs from a standard normal:

* ``gemm-llm`` (shared with the tuning sweep, ``ceiling.gemm.shapes``): squares,
  the QKV and MLP projections of 4096- and 8192-wide models, skinny decode-like M;
* ``gemm-llm-wide``: square 4096 and 8192; 4096 and 8192 tokens through
  4096 -> 11008, 14336, 3 x 4096 and 14336 -> 4096; M = 16..128 against square
  4096 and 8192 weights;
* ``check``: odd sizes, for correctness on the device;
* ``tiny``: small enough for the Triton interpreter on a CPU (smoke tests).
"""

from __future__ import annotations

from ceiling.gemm import shapes
from ceiling.microbench.benchmarks.cases import Case, Impl, our_impls

# The shared suites (also used by the tuning sweep, whose tuned configs cover
# ``gemm-llm``), plus a wider LLM sweep and odd sizes for correctness.
SUITES: dict[str, list[tuple[int, int, int]]] = {
    **shapes.SUITES,
    "gemm-llm-wide": [
        (4096, 4096, 4096),
        (8192, 8192, 8192),
        *[(m, n, k) for m in (4096, 8192) for (k, n) in ((4096, 11008), (4096, 14336), (14336, 4096), (4096, 12288))],
        *[(m, nk, nk) for nk in (4096, 8192) for m in (16, 32, 64, 128)],
    ],
    "check": [(257, 383, 191), (1, 4096, 4096), (1000, 1000, 1000), (333, 4097, 513)],
}
ALIASES = {"default": "gemm-llm", "device": "gemm-llm"}
DTYPE = "bfloat16"
# NT: ``b`` is an nn.Linear weight (N, K) seen transposed, as in a model's
# projections and as the tuning sweep measured; NN: ``b`` row-major (K, N).
LAYOUT = "NT"


def suite_names() -> list[str]:
    return sorted(SUITES) + sorted(ALIASES)


def _gemm_thunk(backend: str):
    def make(inputs):
        import ceiling

        a, b = inputs
        return lambda: ceiling.gemm(a, b, backend=backend)

    return make


def _matmul(inputs):
    import torch

    a, b = inputs
    return lambda: torch.matmul(a, b)


def _blas_name(device: str) -> str:
    import torch

    if not device.startswith("cuda"):
        return "CPU BLAS"
    return "hipBLASLt/rocBLAS" if getattr(torch.version, "hip", None) else "cuBLAS"


def case(m: int, n: int, k: int, *, suite: str, device: str, dtype: str = DTYPE, layout: str = LAYOUT) -> Case:
    import torch

    tdtype = getattr(torch, dtype)

    def make_inputs(seed: int, dev: str):
        g = torch.Generator(device=dev).manual_seed(seed)
        a = torch.randn(m, k, generator=g, device=dev, dtype=torch.float32).to(tdtype)
        if layout == "NT":
            b = torch.randn(n, k, generator=g, device=dev, dtype=torch.float32).to(tdtype).mT
        else:
            b = torch.randn(k, n, generator=g, device=dev, dtype=torch.float32).to(tdtype)
        return a, b

    def reference(inputs):
        a, b = inputs
        # float64 where the device does it at a sensible rate; float32 otherwise.
        compute = torch.float64 if a.device.type in ("cpu", "cuda") else torch.float32
        return torch.matmul(a.to(compute), b.to(compute))

    size = torch.finfo(tdtype).bits // 8
    return Case(
        op="gemm",
        suite=suite,
        label=f"{m}x{n}x{k}",
        shape={"m": m, "n": n, "k": k},
        dtype=dtype,
        config={"layout": layout},
        make_inputs=make_inputs,
        impls=(
            *our_impls("gemm", device, _gemm_thunk),
            Impl("torch.matmul", "baseline", _matmul, library=_blas_name(device)),
        ),
        reference=reference,
        flops=2.0 * m * n * k,
        bytes=float(size * (m * k + k * n + m * n)),
    )


def cases(suite: str, device: str) -> list[Case]:
    name = ALIASES.get(suite, suite)
    if name not in SUITES:
        raise KeyError(f"gemm has no shape suite {suite!r}; it has {suite_names()}")
    return [case(m, n, k, suite=name, device=device) for (m, n, k) in SUITES[name]]

