"""``ceiling backends``: which backends can run each op here, and why the others cannot."""

from __future__ import annotations

import json

import typer

from ceiling.roofline import tables
from ceiling.roofline.tables import key_table


def backends(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """Report, for this machine, how each op would run on each backend.

    Modes: native (on the vendor's device), interpreted (Triton or Pallas
    interpreter on the CPU), emulated (the NKI emulator), unavailable (with the
    reason).
    """
    from ceiling.backends import report

    rows = report()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = key_table("Backends on this machine", ["op", "backend"], ["mode", "reason"])
    colors = {"native": "green", "interpreted": "yellow", "emulated": "yellow", "unavailable": "red"}
    for r in rows:
        table.add_row(r["op"], r["backend"], f"[{colors[r['mode']]}]{r['mode']}[/]", r["reason"])
    tables.console().print(table)


def register(app: typer.Typer) -> None:
    app.command("backends")(backends)
