"""Tables for the terminal: the key column whole, the other columns wrapped.

A row's key (a kernel name, ``device|op|shape class``, a step) is what a reader scans a
table for, so it is never wrapped or cut; when the table is wider than the terminal the
other columns wrap (folding a long word rather than cutting it with an ellipsis), free
text first. ``key_table("title", "kernel", ["registers", ...])`` builds one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.table import Table


class KeyTable(Table):
    """A table that, on a terminal too narrow for its key and number columns, prints each row as a card
    of "column: value" lines (as the report does on a phone) instead of cutting or breaking a number."""

    def __rich_console__(self, console, options):
        if self.__rich_measure__(console, options).minimum <= options.max_width:
            yield from super().__rich_console__(console, options)
            return
        from rich.text import Text

        if self.title:
            yield Text(str(self.title), style="bold")
        names = [str(c.header) for c in self.columns]
        cells = [list(c.cells) for c in self.columns]
        for i in range(self.row_count):
            card = Table.grid(padding=(0, 1))
            card.add_column(no_wrap=True, style="bold")
            card.add_column(overflow="fold")
            for name, column in zip(names, cells):
                card.add_row(f"{name}:", column[i])
            yield card
            yield Text("")


def key_table(title: str | None, key: str | Sequence[str], columns: Iterable[str], *, numeric: Iterable[str] = (),
              text: Iterable[str] = ()) -> Table:
    """A rich table whose ``key`` column(s) keep their full width.

    ``numeric`` columns are right-aligned and never wrapped (where the key and number columns alone are
    wider than the terminal, each row prints as a card instead); ``text`` columns (reasons, notes, instruction
    mixes) are capped at a share of the width so that they wrap before anything else does.
    """
    numeric, text = set(numeric), set(text)
    table = KeyTable(title=title)
    for name in ([key] if isinstance(key, str) else key):
        table.add_column(name, no_wrap=True, overflow="fold")
    for name in columns:
        # a number is never broken across lines ("2490368", not "2490" over "368"): the text columns wrap instead
        table.add_column(name, overflow="fold", justify="right" if name in numeric else "left",
                         no_wrap=name in numeric, max_width=48 if name in text else None)
    return table


def console(stderr: bool = False) -> "Console":
    """The terminal's width in a terminal; 120 columns (or ``$COLUMNS``) in a pipe or a file."""
    import os
    import sys

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else int(os.environ.get("COLUMNS") or 120)
    return Console(stderr=stderr, width=width)
