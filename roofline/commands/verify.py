"""``ceiling verify CONTRACT.toml``: prove a ``@triton.jit`` kernel's memory safety, integer widths, race
freedom and output coverage for every shape its contract allows (exit 0 all proved, 1 a counterexample,
2 otherwise)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Optional

import typer


def _line(r) -> str:
    ce = ", ".join(f"{k}={v}" for k, v in r.constexprs.items())
    line = f"{r.kernel} [{ce}] {r.property}: {r.status.value} ({r.seconds:.1f} s)"
    if r.counterexample:
        line += "\n    " + json.dumps(r.counterexample, sort_keys=True)
    if r.reason:
        line += f"\n    {r.reason}"
    return line


def verify(
    contract: Optional[Path] = typer.Argument(None, help="The kernel's contract (TOML): kernel, grid, scalars, "
                                                        "constexprs, buffers."),
    every: bool = typer.Option(False, "--all", help="The project's own contracts (ceiling.verify.project), its TMA descriptors and Gluon barrier protocols, cached."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per (constexpr combination, property)."),
    prop: Optional[list[str]] = typer.Option(None, "--property", help="Only this property (repeatable)."),
    timeout_s: float = typer.Option(10.0, "--timeout", help="Seconds per solver query (a timeout is unknown)."),
) -> None:
    """Verify a kernel over its contract's domain; each result is proved, a counterexample or unknown."""
    import sys

    from ceiling.errors import InputError
    from ceiling.verify import check, contract as contracts
    from ceiling.verify.result import exit_code

    if (contract is None) == (not every):
        typer.echo("Error: give a contract or --all (not both)", err=True)
        raise typer.Exit(2)
    results = []
    try:
        if every:
            from ceiling.verify import launchers, project

            entries, combos = 0, set()
            # generators, so that each group prints as soon as it is answered
            groups = ((f"{e.name} ({e.module}.{e.kernel})", e.name, rs, cached)
                      for e, rs, cached in project.verify_all(prop or None, int(timeout_s * 1000)))
            if not prop or {"tma", "protocol"} & set(prop):
                groups = itertools.chain(groups, ((g, g, [r for r in rs if not prop or r.property in prop], cached)
                                                  for g, rs, cached in launchers.verify_all()))
            for name, key, rs, cached in groups:
                results += rs
                entries += 1
                combos |= {(key, r.kernel, tuple(sorted(map(str, r.constexprs.items())))) for r in rs}
                if not as_json:
                    typer.echo(f"{name}{' [cached]' if cached else ''}")
                for r in rs:
                    typer.echo(json.dumps(r.as_dict(), sort_keys=True) if as_json else _line(r))
            if not as_json:
                counts = {s: sum(r.status.value == s for r in results) for s in ("proved", "unknown", "counterexample")}
                typer.echo(f"{entries} contracts and launcher groups, {len(combos)} (target, constexpr) points: "
                           + ", ".join(f"{n} {s}" for s, n in counts.items()))
        else:
            results = check.verify(contracts.load(contract), prop or None, timeout_ms=int(timeout_s * 1000))
            for r in results:
                typer.echo(json.dumps(r.as_dict(), sort_keys=True) if as_json else _line(r))
    except InputError as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(2) from None
    sys.stdout.flush()
    raise typer.Exit(exit_code(results))


def register(app: typer.Typer) -> None:
    app.command("verify")(verify)
