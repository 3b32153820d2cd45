"""Tables for the terminal: the key column whole, the other columns wrapped.

A row's key (a kernel name, ``device|op|shape class``, a step) is what a reader scans a
table for, so it is never wrapped or cut; when the table is wider than the terminal the
other columns wrap (folding a long word rather than cutting it with an ellipsis), free
text first. ``key_table("title", "kernel", ["registers", ...])`` builds one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.table import Table


def key_table(title: str | None, key: str | Sequence[str], columns: Iterable[str], *, numeric: Iterable[str] = (),
              text: Iterable[str] = ()) -> Table:
    """A rich table whose ``key`` column(s) keep their full width.

    ``numeric`` columns are right-aligned; ``text`` columns (reasons, notes, instruction
    mixes) are capped at a share of the width so that they wrap before anything else does.
    """
    numeric, text = set(numeric), set(text)
    table = Table(title=title)
    for name in ([key] if isinstance(key, str) else key):
        table.add_column(name, no_wrap=True, overflow="fold")
    for name in columns:
        table.add_column(name, overflow="fold", justify="right" if name in numeric else "left",
                         max_width=48 if name in text else None)
    return table


def console(stderr: bool = False) -> "Console":
    """The terminal's width in a terminal; 120 columns (or ``$COLUMNS``) in a pipe or a file."""
    import os
    import sys

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else int(os.environ.get("COLUMNS") or 120)
    return Console(stderr=stderr, width=width)
