"""Which backends can run each op on this machine, and how (``ceiling backends``). Each op's
implementations are in its registry entry (:mod:`ceiling.op`); how a backend runs here, whatever the
op, is :mod:`ceiling.availability`. An op without a kernel on a backend says why (its ``missing``).
"""

from __future__ import annotations

from ceiling import op as ops
from ceiling.availability import (BACKENDS, Availability, availability, default_for_device, gpu_name,
                                  gpu_vendor, has_module)

__all__ = ["BACKENDS", "Availability", "availability", "default_for_device", "gpu_name", "gpu_vendor", "ops_by_name",
           "op_availability", "report", "Report"]


def ops_by_name() -> dict[str, ops.Op]:
    """Every op, by name (their packages imported)."""
    return {name: ops.get(name) for name in ops.OP_PACKAGES}


def op_availability(op: str, backend: str) -> Availability:
    """Availability of ``backend`` for ``op``, including whether the op has a kernel there."""
    if op not in ops.OP_PACKAGES:
        raise ValueError(f"op: expected one of {sorted(ops.OP_PACKAGES)}, got {op!r}")
    return ops.get(op).availability(backend)


class Report(list):
    """The rows of :func:`report` (a list of dicts), shown as a table when printed or echoed by a REPL."""

    def table(self, width: int | None = None) -> str:
        import shutil

        from rich.console import Console
        from rich.table import Table

        table = Table(title="Backends on this machine")
        table.add_column("op", no_wrap=True)
        table.add_column("backend", no_wrap=True)
        table.add_column("mode", no_wrap=True)
        table.add_column("reason", overflow="fold")
        for row in self:
            table.add_row(row["op"], row["backend"], row["mode"], row["reason"])
        console = Console(width=width or shutil.get_terminal_size((120, 24)).columns, record=True,
                          force_terminal=False, color_system=None)
        with console.capture() as captured:
            console.print(table)
        return captured.get().rstrip("\n")

    def __str__(self) -> str:
        return self.table()

    __repr__ = __str__


def report() -> Report:
    """One row per (op, backend): mode and reason, and one per opt-in implementation of an op on a
    backend, named ``backend:implementation`` ("nvidia:gluon"); prints as a table."""
    rows = Report()
    for name, op in ops_by_name().items():
        for backend in BACKENDS:
            a = op.availability(backend)
            rows.append({"op": name, "backend": backend, "mode": a.mode, "reason": a.reason})
        for impl in op.implementations:
            if impl.opt_in:
                mode, reason = impl.load().availability()
                rows.append({"op": name, "backend": impl.label, "mode": mode, "reason": reason})
    return rows
