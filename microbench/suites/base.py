"""What a suite is, and the context it runs in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..records import Record


class Unavailable(RuntimeError):
    """The suite cannot run on this machine; the message says why."""


@dataclass
class SuiteContext:
    device_index: int = 0  # CUDA device for the GPU suites
    quick: bool = False  # smaller sizes and fewer repeats (tests, smoke runs)
    runtime: str = "auto"  # GPU suites: "cupy", "pycuda", or "auto" (CuPy if it works, else PyCUDA)
    progress: Callable[[str], None] = field(default=lambda message: None)


@dataclass(frozen=True)
class Suite:
    name: str
    needs_gpu: bool
    description: str
    check: Callable[[SuiteContext], str | None]  # None if it can run here, else why not
    run: Callable[[SuiteContext], list[Record]]
    timeout_s: float = 120.0


def runtime_reason(ctx: SuiteContext) -> str | None:
    """None if the context's GPU runtime can run here, else why not (a suite's ``check``)."""
    from ..runtimes import select_runtime

    return select_runtime(ctx.runtime).reason


def gpu_runtime(ctx: SuiteContext):
    """The GPU runtime a suite runs on (``ceiling.microbench.runtimes.Runtime``)."""
    from ..runtimes import select_runtime

    choice = select_runtime(ctx.runtime)
    if choice.name is None:
        raise Unavailable(choice.reason or "no GPU runtime")
    return choice.runtime()
