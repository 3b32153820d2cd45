"""The benchmark cases of every op, by shape suite.

    from ceiling.microbench.benchmarks import cases_for
    for case in cases_for("gemm", "gemm-llm", device="cuda"):
        ...

Each op has a module (``gemm``, ``scaled_gemm``, ``attention``, ``triangle``, ``pair_stack``) with
``suite_names()`` and a function ``(suite, device) -> list[Case]``; a module may
also define ``unavailable()``, the reason it has no cases in this checkout.
Generic suite names: ``default`` (the full suite), ``device`` (what ``ceiling
device-check`` runs), ``check`` (odd sizes for correctness) and ``tiny`` (CPU
smoke tests). To add an op, add a module and one line to ``OPS``.
"""

from __future__ import annotations

import importlib

from ceiling.microbench.benchmarks.cases import Case, Impl

# op -> (module, function returning its cases)
OPS: dict[str, tuple[str, str]] = {
    "gemm": ("ceiling.microbench.benchmarks.gemm", "cases"),
    "scaled_gemm": ("ceiling.microbench.benchmarks.scaled_gemm", "cases"),
    "attention": ("ceiling.microbench.benchmarks.attention", "cases"),
    "triangle_attention": ("ceiling.microbench.benchmarks.triangle", "attention_cases"),
    "triangle_multiplicative_update": ("ceiling.microbench.benchmarks.triangle", "trimul_cases"),
    "pair_stack": ("ceiling.microbench.benchmarks.pair_stack", "cases"),
}
GENERIC_SUITES = ("default", "device", "check", "tiny")


def op_module(op: str):
    if op not in OPS:
        raise KeyError(f"no benchmark cases for op {op!r}; there are cases for {sorted(OPS)}")
    return importlib.import_module(OPS[op][0])


def suites(op: str) -> list[str]:
    return op_module(op).suite_names()


def has_suite(op: str, suite: str) -> bool:
    return suite in suites(op)


def unavailable(op: str) -> str | None:
    """Why ``op`` has no cases in this checkout, or None."""
    check = getattr(op_module(op), "unavailable", None)
    return check() if check else None


def cases_for(op: str, suite: str, device: str) -> list[Case]:
    """The cases of ``op`` in shape suite ``suite`` for ``device`` ("cpu", "cuda", "cuda:1")."""
    module, function = OPS[op]
    return getattr(importlib.import_module(module), function)(suite, device)


__all__ = ["OPS", "GENERIC_SUITES", "Case", "Impl", "cases_for", "suites", "has_suite", "op_module", "unavailable"]
