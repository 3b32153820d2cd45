"""Progress of a long command, readable in a terminal and in a log.

In a terminal, rich's live progress display: one bar per step, with its count,
elapsed time and the item just finished. Anywhere else (a CI log, ``| tee``,
a file) a live display would print nothing until the end, so each event is one
plain line instead, stamped with the seconds since the command started::

    [   4.1s] ISA of shipped configs: 3/31 gemm sm_90a gemm_128x256x64_g16_s3_w8_sub ok (2.9 s)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


@dataclass
class _Step:
    title: str
    total: int | None
    done: int = 0
    task: int | None = None  # the rich task, in a terminal


class StepProgress:
    """``with StepProgress(console) as p: s = p.step("title", total); p.advance(s, "item ok"); p.finish(s, "ok")``."""

    def __init__(self, console: Console, live: bool | None = None):
        self.console = console
        self.live = console.is_terminal if live is None else live
        self.start = time.perf_counter()
        self._bars: Progress | None = None

    def __enter__(self) -> "StepProgress":
        if self.live:
            self._bars = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=24),
                                  MofNCompleteColumn(), TimeElapsedColumn(), console=self.console)
            self._bars.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._bars is not None:
            self._bars.__exit__(*exc)

    def _line(self, text: str) -> None:
        self.console.print(f"[{time.perf_counter() - self.start:7.1f}s] {text}", highlight=False, markup=False,
                           soft_wrap=True)

    def step(self, title: str, total: int | None = None) -> _Step:
        s = _Step(title, total)
        if self._bars is not None:
            s.task = self._bars.add_task(title, total=total)
        else:
            self._line(f"{title}: started" + (f", {total} items" if total else ""))
        return s

    def advance(self, s: _Step, item: str) -> None:
        s.done += 1
        if self._bars is not None:
            self._bars.update(s.task, advance=1, description=f"{s.title}: {item}"[:100])
        else:
            count = f"{s.done}/{s.total}" if s.total else str(s.done)
            self._line(f"{s.title}: {count} {item}")

    def finish(self, s: _Step, status: str) -> None:
        if self._bars is not None:
            total = s.total or 1
            self._bars.update(s.task, total=total, completed=total, description=f"{s.title}: {status}"[:100])
        else:
            self._line(f"{s.title}: {status}")

    def note(self, text: str) -> None:
        """A line that stays (a warning, a failure), above the bars in a terminal."""
        if self._bars is not None:
            self._bars.console.print(text, highlight=False, markup=False)
        else:
            self._line(text)
