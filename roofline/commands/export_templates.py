"""``ceiling export-templates``: search templates per kernel family and target, with their records."""

from __future__ import annotations

from pathlib import Path

import typer


def export_templates(
    op: list[str] = typer.Option([], "--op", help="Kernel family (default: all); repeatable."),
    target: list[str] = typer.Option([], "--target", help="Target such as sm_90a or gfx942 (default: all); repeatable."),
    out: Path = typer.Option(Path("templates"), "--out", file_okay=False, help="Output folder."),
    store: list[Path] = typer.Option([], "--store", exists=True, file_okay=False, help="A records folder (Parquet parts); repeatable."),
    embedded: bool = typer.Option(True, "--embedded/--no-embedded", help="Include the measurements shipped with the package."),
) -> None:
    """Write <out>/<family>/<target>/template.json, records.jsonl and Kernel Tuner caches."""
    from ceiling.roofline import analysis, store as _store
    from ceiling.roofline.templates import export
    from ceiling.roofline.templates.schema import Template

    for name in op:
        if name not in export.families():
            raise typer.BadParameter(f"expected one of {export.families()}, got {name!r}", param_hint="--op")
    known = sorted({t for family in (op or export.families()) for t in export.targets(family)})
    for name in target:
        if name not in known:
            raise typer.BadParameter(f"expected one of {known}" + (f" for {', '.join(op)}" if op else "")
                                     + f", got {name!r}", param_hint="--target")
    records = _store.load(store, embedded=embedded)
    result = analysis.fit(records)
    accuracy = {k: e.as_dict() for k, e in result.evaluations.items()}
    folders = export.export(out, records, op or None, target or None, result.model, accuracy)
    if not folders:
        raise typer.BadParameter(f"no template for targets {target}", param_hint="--target")
    for folder in folders:
        t = Template.load(folder)
        typer.echo(f"{folder}: {len(t.parameters)} parameters, {len(t.constraints)} constraints, "
                   f"{len(t.best_points)} best points, model {t.cost_model.mode}")


def register(app: typer.Typer) -> None:
    app.command("export-templates")(export_templates)
