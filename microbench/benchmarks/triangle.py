"""AlphaFold-3 triangle ops: the cases of ``ceiling.triangle.bench``, adapted to the harness.

The triangle op package describes its own benchmark cases as plain data
(``bench_cases(suite, device)``: ours, the PyTorch eager model code,
``torch.compile`` of it and cuEquivariance, each runnable or skipped with its
reason), since ``kernels`` cannot import the harness. This module turns them into
:class:`~ceiling.microbench.benchmarks.cases.Case`, adding what the harness needs:

* the oracle: the eager model code run on copies of the inputs one precision
  up (float32 for bf16 cases, float64 for float32 ones), so ours is held to the
  error-ratio rule against the same code at the inputs' precision;
* the bytes each problem must move at least (inputs read once, outputs written
  once), for the roofline fraction.

Without ``ceiling.triangle.bench`` in this checkout there are no cases, and
:func:`unavailable` says so.
"""

from __future__ import annotations

import importlib
from typing import Any

from ceiling.microbench.benchmarks.cases import Case, Impl

ALIASES = {"default": "device"}
EAGER = "torch-eager"


def _source():
    return importlib.import_module("ceiling.triangle.bench")


def unavailable() -> str | None:
    try:
        _source()
    except Exception as exc:  # noqa: BLE001 - absent or broken: no triangle cases, with the reason
        return f"ceiling.triangle.bench is not importable ({exc.__class__.__name__}: {exc})"
    return None


def suite_names() -> list[str]:
    if unavailable():
        return []
    return sorted(_source().SUITES) + sorted(ALIASES)


def upcast(x: Any, dtype: Any) -> Any:
    """Copies in ``dtype`` of every floating tensor in ``x`` (dicts, lists, tuples), as leaves where they were."""
    import torch

    if isinstance(x, dict):
        return {k: upcast(v, dtype) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(upcast(v, dtype) for v in x)
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.detach().to(dtype).requires_grad_(x.requires_grad)
    return x


def _min_bytes(tc: Any) -> float:
    """Inputs read once and outputs written once (the roofline's memory term)."""
    s, size = tc.shape, 2 if tc.dtype in ("bfloat16", "float16") else 4
    grads = tc.direction != "fwd"
    if tc.op == "triangle_attention":
        qkvo = 4 * s["batch"] * s["n"] * s["heads"] * s["n"] * s["head_dim"] * size
        bias = s["batch"] * s["heads"] * s["n"] ** 2 * 4
        return float((2 * qkvo + 2 * bias) if grads else (qkvo + bias))
    pair = s["batch"] * s["n"] ** 2 * s["c_z"] * size
    return float((4 if grads else 2) * pair)


def adapt(tc: Any, suite: str) -> Case:
    """A ``ceiling.triangle.bench`` case as a harness case."""
    eager = next((i for i in tc.impls if i.name == EAGER and i.make is not None), None)

    def reference(inputs):
        import torch

        if eager is None:
            raise RuntimeError(f"the case has no runnable {EAGER!r} implementation to serve as the oracle")
        # One precision above the inputs': float32 for bf16/fp16, float64 for float32.
        wide = torch.float64 if tc.dtype == "float32" else torch.float32
        return eager.make(upcast(inputs, wide))()

    impls = tuple(
        Impl(
            name=i.name,
            role=i.role,
            make=i.make,
            skip=i.skip,
            backend=i.name.split(":", 1)[1] if i.name.startswith("ceiling:") else None,
            library=i.name,
        )
        for i in tc.impls
    )
    return Case(
        op=tc.op,
        suite=suite,
        label=tc.label,
        shape=dict(tc.shape),
        dtype=tc.dtype,
        config={**dict(getattr(tc, "config", {}) or {}), "direction": tc.direction},
        make_inputs=tc.make_inputs,
        impls=impls,
        reference=reference,
        flops=float(tc.flops),
        bytes=_min_bytes(tc),
        graphable=tc.direction == "fwd",
    )


def _cases(op: str, suite: str, device: str) -> list[Case]:
    why = unavailable()
    if why:
        raise KeyError(f"{op} has no benchmark cases here: {why}")
    source = _source()
    name = ALIASES.get(suite, suite)
    if name not in source.SUITES:
        raise KeyError(f"{op} has no shape suite {suite!r}; it has {suite_names()}")
    return [adapt(tc, name) for tc in source.bench_cases(name, device) if tc.op == op]


def attention_cases(suite: str, device: str) -> list[Case]:
    return _cases("triangle_attention", suite, device)


def trimul_cases(suite: str, device: str) -> list[Case]:
    return _cases("triangle_multiplicative_update", suite, device)
