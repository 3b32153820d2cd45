"""``ceiling verify CONTRACT.toml``: prove a ``@triton.jit`` kernel's memory safety, integer widths, race
freedom and output coverage for every shape its contract allows (exit 0 all proved, 1 a counterexample,
2 otherwise)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer


def verify(
    contract: Path = typer.Argument(..., help="The kernel's contract (TOML): kernel, grid, scalars, constexprs, buffers."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per (constexpr combination, property)."),
    prop: Optional[list[str]] = typer.Option(None, "--property", help="Only this property (repeatable)."),
    timeout_s: float = typer.Option(10.0, "--timeout", help="Seconds per solver query (a timeout is unknown)."),
) -> None:
    """Verify a kernel over its contract's domain; each result is proved, a counterexample or unknown."""
    import sys

    from ceiling.errors import InputError
    from ceiling.verify import check, contract as contracts
    from ceiling.verify.result import exit_code

    try:
        c = contracts.load(contract)
        results = check.verify(c, prop or None, timeout_ms=int(timeout_s * 1000))
    except InputError as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(2) from None
    for r in results:
        if as_json:
            typer.echo(json.dumps(r.as_dict(), sort_keys=True))
            continue
        ce = ", ".join(f"{k}={v}" for k, v in r.constexprs.items())
        line = f"{r.kernel} [{ce}] {r.property}: {r.status.value} ({r.seconds:.1f} s)"
        if r.counterexample:
            line += "\n    " + json.dumps(r.counterexample, sort_keys=True)
        if r.reason:
            line += f"\n    {r.reason}"
        typer.echo(line)
    sys.stdout.flush()
    raise typer.Exit(exit_code(results))


def register(app: typer.Typer) -> None:
    app.command("verify")(verify)
