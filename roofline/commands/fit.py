"""``ceiling fit``: ceilings and the performance model from the records, judged on held-out records."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table


def fit(
    store: list[Path] = typer.Option([], "--store", help="A records folder (Parquet parts); repeatable."),
    embedded: bool = typer.Option(True, "--embedded/--no-embedded", help="Include the measurements shipped with the package."),
    out: Path = typer.Option(Path("ceiling-fit"), "--out", help="Folder for model.json, evaluation.json, ceilings.json."),
    folds: int = typer.Option(4, help="Folds of shapes: each shape is held out of the fit once."),
    seed: int = typer.Option(0, help="Seed of the assignment of shapes to folds."),
    as_json: bool = typer.Option(False, "--json", help="Print the evaluation as JSON."),
) -> None:
    """Fit ceilings per device and the performance model; print MAPE, Spearman and top-1 regret on held-out records."""
    from roofline import analysis, store as _store

    records = _store.load(store, embedded=embedded)
    result = analysis.fit(records, folds=folds, seed=seed)
    paths = result.save(out)
    if as_json:
        typer.echo(paths["evaluation"].read_text())
        return
    console = Console()
    console.print(f"{len(records)} records from {'the package and ' if embedded else ''}{len(store)} store(s)")
    table = Table(title="Performance model on held-out records (targets: MAPE <= 10%, Spearman >= 0.9, regret <= 5%)")
    for col in ("device | op", "mode", "train", "held out", "MAPE", "Spearman", "top-1 regret", "meets targets"):
        table.add_column(col)
    for key, e in result.evaluations.items():
        table.add_row(key, e.mode, str(e.n_train), str(e.n_test), f"{100 * e.mape:.1f}%", f"{e.spearman:.3f}",
                      f"{100 * e.regret:.1f}%", "yes" if e.meets() else "no")
    for key, mode in result.modes.items():
        if key not in result.evaluations:
            table.add_row(key, mode, "0", "0", "-", "-", "-", "no measurements: analytic terms only")
    for key, e in result.evaluations.items():
        console.print(f"{key}: {e.split}; median timing spread (p80-p20)/median of the held-out records: "
                      f"{100 * e.noise:.1f}%")
    console.print(table)
    ceil = Table(title="Ceilings")
    for col in ("device", "kind", "name", "value", "source"):
        ceil.add_column(col)
    for dc in result.ceilings.values():
        for row in dc.rows():
            ceil.add_row(row["device"], row["kind"], row["name"], f"{row['value']:.4g} {row['unit']}", row["source"])
    console.print(ceil)
    console.print(f"saved {', '.join(str(p) for p in paths.values())}")


def register(app: typer.Typer) -> None:
    app.command("fit")(fit)
