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
    progress: Callable[[str], None] = field(default=lambda message: None)


@dataclass(frozen=True)
class Suite:
    name: str
    needs_gpu: bool
    description: str
    check: Callable[[SuiteContext], str | None]  # None if it can run here, else why not
    run: Callable[[SuiteContext], list[Record]]
    timeout_s: float = 120.0
