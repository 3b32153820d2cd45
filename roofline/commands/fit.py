"""``ceiling fit``: ceilings and the performance model from the records, judged on held-out records."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from ceiling.roofline import tables


def fit(
    store: list[Path] = typer.Option([], "--store", exists=True, file_okay=False, help="A records folder (Parquet parts); repeatable."),
    embedded: bool = typer.Option(True, "--embedded/--no-embedded", help="Include the measurements shipped with the package."),
    out: Path = typer.Option(Path("ceiling-fit"), "--out", file_okay=False, help="Folder for model.json, evaluation.json, ceilings.json."),
    folds: int = typer.Option(4, min=2, help="Folds of shapes: each shape is held out of the fit once."),
    seed: int = typer.Option(0, help="Seed of the assignment of shapes to folds."),
    as_json: bool = typer.Option(False, "--json", help="Print the evaluation and the ceilings as JSON."),
) -> None:
    """Fit ceilings per device and the performance model; print MAPE, Spearman and top-1 regret on held-out records."""
    from ceiling.roofline import analysis, store as _store

    committed = _store.load(embedded=True) if embedded else []
    records = committed + _store.load(store, embedded=False)
    result = analysis.fit(records, folds=folds, seed=seed)
    paths = result.save(out)
    origins = {id(r): "committed records" for r in committed}
    if as_json:
        doc = json.loads(paths["evaluation"].read_text())
        doc["ceilings"] = [row for dc in result.ceilings.values() for row in dc.rows(origins)]
        typer.echo(json.dumps(doc, indent=2, default=str))
        return
    console = tables.console()
    console.print(f"{len(records)} records from {'the package and ' if embedded else ''}{len(store)} store(s)")
    from ceiling.roofline import selection as _selection

    table = tables.key_table("Performance model on held-out shapes (targets: MAPE <= 10%, Spearman >= 0.9, "
                             "regret <= 5%)", "device|op|shape class",
                             ["mode", "timing", "records used", "excluded", "MAPE", "Spearman within shape",
                              "Spearman global", "top-1 regret (worst)", "meets targets"],
                             numeric=["records used", "MAPE", "Spearman within shape", "Spearman global"],
                             text=["excluded", "meets targets"])
    for key, e in result.evaluations.items():
        excluded = ", ".join(f"{n} {why}" for why, n in sorted(e.excluded.items())) or "0"
        table.add_row(key, e.mode, e.method, str(e.n_test), excluded, f"{100 * e.mape:.1f}%", f"{e.spearman:.3f}",
                      f"{e.spearman_global:.3f}", (f"{100 * e.regret:.1f}% ({100 * e.regret_max:.1f}%)" if e.regret == e.regret
                       else "n/a: one config per problem"),
                      "yes" if e.meets() else ("no: too few records to fit" if e.note else "no"))
    for key, mode in result.modes.items():
        if key not in result.evaluations:
            table.add_row(key, mode, "-", "0", "-", "-", "-", "-", "-", "no measurements: analytic terms only")
    for key, e in result.evaluations.items():
        console.print(f"{key}: {e.split}; {e.groups} held-out shapes; median timing spread (p80-p20)/median: "
                      f"{100 * e.noise:.1f}%" + (f"; {e.note}" if e.note else ""))
    console.print(table)
    console.print("Kernel timings left out of the fit (the store keeps them):")
    for why, text in _selection.REASONS.items():
        console.print(f"  {why}: {text}")
    ceil = tables.key_table("Ceilings", ["device", "kind", "name"], ["value", "provenance"], numeric=["value"],
                            text=["provenance"])
    for dc in result.ceilings.values():
        for row in dc.rows(origins):
            ceil.add_row(row["device"], row["kind"], row["name"], f"{row['value']:.4g} {row['unit']}",
                         row["provenance"])
    console.print(ceil)
    console.print(f"saved {', '.join(str(p) for p in paths.values())}")


def register(app: typer.Typer) -> None:
    app.command("fit")(fit)
