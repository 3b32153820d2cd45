"""The benchmark cases of every op, by shape suite.

    from microbench.benchmarks import cases_for
    for case in cases_for("gemm", "gemm-llm", device="cuda"):
        ...

Each op module (``gemm``, ``attention``) defines ``SUITES``, ``ALIASES`` and
``cases(suite, device)``. Generic suite names work for every op: ``default``
(the full suite), ``device`` (what ``ceiling device-check`` runs), ``check``
(odd sizes for correctness) and ``tiny`` (CPU smoke tests). To add an op, add a
module and one line to ``OPS``.
"""

from __future__ import annotations

import importlib

from microbench.benchmarks.cases import Case, Impl

OPS: dict[str, str] = {
    "gemm": "microbench.benchmarks.gemm",
    "attention": "microbench.benchmarks.attention",
}
GENERIC_SUITES = ("default", "device", "check", "tiny")


def op_module(op: str):
    if op not in OPS:
        raise KeyError(f"no benchmark cases for op {op!r}; there are cases for {sorted(OPS)}")
    return importlib.import_module(OPS[op])


def suites(op: str) -> list[str]:
    return op_module(op).suite_names()


def has_suite(op: str, suite: str) -> bool:
    return suite in suites(op)


def cases_for(op: str, suite: str, device: str) -> list[Case]:
    """The cases of ``op`` in shape suite ``suite`` for ``device`` ("cpu", "cuda", "cuda:1")."""
    return op_module(op).cases(suite, device)


__all__ = ["OPS", "GENERIC_SUITES", "Case", "Impl", "cases_for", "suites", "has_suite", "op_module"]
