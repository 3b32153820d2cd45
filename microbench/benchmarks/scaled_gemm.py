"""Scaled (FP8) GEMM cases: ``ceiling.scaled_gemm`` against the vendor's FP8 GEMM where one takes the
scales, and against dequantize-then-bf16-GEMM where none does.

Every shape runs with three scalings (``config["scales"]``), each as ``ceiling.fp8_gemm``'s
recipe of the same name quantizes: ``tensor`` (one scale per operand), ``row`` (per token of
A, per output channel of B) and ``block`` (1x128 tiles of A, 128x128 blocks of B, DeepSeek-V3's).
A is (M, K) e4m3 row-major, B an nn.Linear weight (N, K) seen transposed (layout NT, what
``torch._scaled_mm`` requires), the output bfloat16; inputs from a standard normal, quantized
outside the timed region by ``ceiling.fp8.quantize`` (e4m3fnuz on ROCm). Baselines:

* ``torch._scaled_mm`` (cuBLASLt FP8; hipBLASLt on ROCm) for ``tensor`` and ``row``, default
  (accurate) accumulation;
* ``torch.scaled_mm:blockwise`` (cuBLASLt's 1x128 x 128x128 recipe, CUDA 12.9+) for ``block``,
  where this PyTorch and device take it (probed once; skipped with the reason otherwise);
* ``dequant+torch.matmul`` for ``block``: both operands dequantized to bfloat16 inside the timed
  call, then cuBLAS: what running block-scaled FP8 weights costs without an FP8 kernel.

FLOPs ``2MNK``; bytes: one byte per operand element, two per output element, four per scale.
"""

from __future__ import annotations

import functools

from ceiling.scaled_gemm import shapes
from ceiling.microbench.benchmarks.cases import Case, Impl, our_impls, skipped

SUITES: dict[str, list[tuple[int, int, int]]] = {
    **shapes.SUITES,  # fp8-llm, fp8-skinny, fp8-device, fp8-all (shared with the tuning sweep)
    "check": [(257, 383, 191), (1, 4096, 4096), (333, 4097, 513)],
    # Interpreter-sized: none a multiple of a block.
    "tiny": [(37, 45, 130)],
}
ALIASES = {"default": "fp8-all", "device": "fp8-device"}
SCALINGS = tuple(shapes.SCALINGS)
KINDS = shapes.SCALINGS
OUT_DTYPE = "bfloat16"


def suite_names() -> list[str]:
    return sorted(SUITES) + sorted(ALIASES)


def _fp8_dtype(device: str):
    import torch

    return torch.float8_e4m3fnuz if device.startswith("cuda") and torch.version.hip else torch.float8_e4m3fn


def _ours(backend: str):
    def make(inputs):
        import ceiling

        a, b, sa, sb = inputs
        return lambda: ceiling.scaled_gemm(a, b, sa, sb, backend=backend)

    return make


def _scaled_mm(inputs):
    import torch

    a, b, sa, sb = inputs
    return lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)


def _dequant_matmul(inputs):
    import torch

    from ceiling.scaled_gemm.reference import dequantize_a, dequantize_b

    a, b, sa, sb = inputs
    return lambda: torch.matmul(dequantize_a(a, sa, "1x128", torch.bfloat16), dequantize_b(b, sb, "128x128", torch.bfloat16))


def blockwise_scales(a, b, sa, sb):
    """The scales in the layouts cuBLASLt's blockwise recipe reads: a's (M, Kb) with M contiguous, b's
    (L4, Nb) with L4 = Kb rounded up to 4 contiguous (``torch.nn.functional.scaled_mm``'s checks)."""
    import torch

    m, k = a.shape
    kb = -(-k // 128)
    l4 = -(-kb // 4) * 4
    sa_t = torch.empty((kb, m), dtype=torch.float32, device=a.device).T.copy_(sa)
    sb_t = torch.ones((sb.shape[1], l4), dtype=torch.float32, device=a.device)
    sb_t[:, :kb] = sb.T
    return sa_t, sb_t.T


def _blockwise(inputs):
    import torch
    from torch.nn.functional import ScalingType, scaled_mm

    a, b, sa, sb = inputs
    sa_t, sb_t = blockwise_scales(a, b, sa, sb)
    return lambda: scaled_mm(a, b, sa_t, ScalingType.BlockWise1x128, sb_t, ScalingType.BlockWise128x128,
                             output_dtype=torch.bfloat16)


@functools.cache
def blockwise_unavailable(device: str) -> str | None:
    """Why cuBLASLt's blockwise FP8 cannot run here (probed once on a small problem), or None."""
    import torch

    if not device.startswith("cuda") or torch.version.hip:
        return "cuBLASLt blockwise FP8 needs a CUDA device"
    try:
        from torch.nn.functional import ScalingType, scaled_mm  # noqa: F401
    except ImportError as exc:
        return f"this PyTorch has no torch.nn.functional.scaled_mm with ScalingType ({exc})"
    try:
        inputs = _quantized(256, 256, 256, "block", 0, device)
        _blockwise(inputs)()
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - any refusal (cuBLAS version, architecture) is the reason
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return None


def _quantized(m: int, n: int, k: int, scaling: str, seed: int, device: str):
    import torch

    from ceiling import fp8

    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(m, k, generator=g, device=device, dtype=torch.float32)
    w = torch.randn(n, k, generator=g, device=device, dtype=torch.float32)
    ka, kb = KINDS[scaling]
    backend = None if device.startswith("cuda") else "reference"
    aq, sa = fp8.quantize(x, ka, _fp8_dtype(device), backend=backend)
    wq, sw = fp8.quantize(w, kb, _fp8_dtype(device), backend=backend)
    return aq, wq.mT, sa, sw if kb == "tensor" else sw.mT


def _baselines(scaling: str, device: str) -> list[Impl]:
    import torch

    on_cuda = device.startswith("cuda")
    blas = ("hipBLASLt" if torch.version.hip else "cuBLASLt") if on_cuda else None
    if scaling in ("tensor", "row"):
        if not on_cuda:
            return [skipped("torch._scaled_mm", "baseline", "torch._scaled_mm (cuBLASLt FP8) needs a GPU")]
        return [Impl("torch._scaled_mm", "baseline", _scaled_mm, library=f"{blas} FP8")]
    out = []
    why = blockwise_unavailable(device)
    if why:
        out.append(skipped("torch.scaled_mm:blockwise", "baseline", why))
    else:
        out.append(Impl("torch.scaled_mm:blockwise", "baseline", _blockwise, library="cuBLASLt FP8 blockwise"))
    out.append(Impl("dequant+torch.matmul", "baseline", _dequant_matmul,
                    library="PyTorch dequantize, then " + ("cuBLAS bf16" if on_cuda else "CPU BLAS")))
    return out


def case(m: int, n: int, k: int, scaling: str, *, suite: str, device: str) -> Case:
    import torch

    from ceiling.scaled_gemm.reference import scaled_gemm as reference_gemm

    def reference(inputs):
        a, b, sa, sb = inputs
        compute = torch.float64 if a.device.type in ("cpu", "cuda") else torch.float32
        return reference_gemm(a, b, sa, sb, None, None, compute, compute_dtype=compute)

    ka, kb = KINDS[scaling]
    from ceiling.fp8 import scale_shape

    scales = 4 * (max(1, _numel(scale_shape(ka, m, k))) + max(1, _numel(scale_shape(kb, n, k))))
    dtype = str(_fp8_dtype(device)).removeprefix("torch.")
    return Case(
        op="scaled_gemm",
        suite=suite,
        label=f"{m}x{n}x{k}",
        shape={"m": m, "n": n, "k": k, "out_dtype": OUT_DTYPE},
        dtype=dtype,
        out_dtype=OUT_DTYPE,
        config={"scales": scaling, "layout": "NT"},
        make_inputs=lambda seed, dev: _quantized(m, n, k, scaling, seed, dev),
        impls=(*our_impls("scaled_gemm", device, _ours), *_baselines(scaling, device)),
        reference=reference,
        flops=2.0 * m * n * k,
        bytes=float(m * k + k * n + 2 * m * n + scales),
    )


def _numel(shape: tuple[int, ...]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


def cases(suite: str, device: str) -> list[Case]:
    name = ALIASES.get(suite, suite)
    if name not in SUITES:
        raise KeyError(f"scaled_gemm has no shape suite {suite!r}; it has {suite_names()}")
    return [case(m, n, k, scaling, suite=name, device=device) for (m, n, k) in SUITES[name] for scaling in SCALINGS]
