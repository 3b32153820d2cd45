"""The microbenchmark suites; each module defines ``SUITE``.

A suite has a name, says whether it can run here (and why not), and returns
records. GPU suites run in a child process so a fault on the device cannot
take the other suites with it.
"""

from __future__ import annotations

from .base import Suite, SuiteContext, Unavailable

ORDER = ("host", "clocks", "bank-conflicts", "occupancy", "ceilings")

_MODULES = {
    "host": "host",
    "clocks": "clocks",
    "bank-conflicts": "bank_conflicts",
    "occupancy": "occupancy",
    "ceilings": "ceilings",
}


def get(name: str) -> Suite:
    import importlib

    if name not in _MODULES:
        raise ValueError(f"suite must be one of {ORDER}, got {name!r}")
    return importlib.import_module(f"{__name__}.{_MODULES[name]}").SUITE


__all__ = ["ORDER", "Suite", "SuiteContext", "Unavailable", "get"]
