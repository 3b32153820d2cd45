"""``ceiling import-point``: a point an optimizer found, checked and filed in the vendor's config table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer


def _shape(text: str | None, axes: list[str]) -> dict[str, int] | None:
    """``4096x4096x4096`` (the template's axes in order), ``head_dim=128,seq=4096`` or a JSON object."""
    if not text:
        return None
    if text.lstrip().startswith("{"):
        return {k: int(v) for k, v in json.loads(text).items()}
    if "=" in text:
        return {k.strip(): int(v) for k, v in (item.split("=", 1) for item in text.split(","))}
    parts = text.lower().split("x")
    if len(parts) != len(axes) or not all(p.isdigit() for p in parts):
        raise typer.BadParameter(f"expected {'x'.join(axes)}, name=value pairs or JSON, got {text!r}",
                                 param_hint="--shape")
    return dict(zip(axes, map(int, parts)))


def import_point(
    template_dir: Path = typer.Argument(..., help="A template folder written by ceiling export-templates."),
    config: str = typer.Option(..., "--config", help="The point, as JSON (flat dotted names or sectioned)."),
    shape: Optional[str] = typer.Option(None, "--shape",
                                        help="The problem it was found for: MxNxK, name=value,... or JSON."),
    provenance: str = typer.Option("", "--provenance", help="How it was found and measured (optimizer, device, time)."),
    device: Optional[str] = typer.Option(None, "--device",
                                         help="The device name to file it under (default: the template's)."),
    table: Optional[Path] = typer.Option(None, "--table", help="Write into this copy of the vendor table instead."),
    apply: bool = typer.Option(False, "--apply", help="Write the table; without it, only show what would be written."),
) -> None:
    """Validate a found point against its template and the kernel's space, and file it in the vendor's
    config table with a provenance line (a dry run unless --apply)."""
    from ceiling.errors import InputError
    from ceiling.roofline.templates import importing
    from ceiling.roofline.templates.schema import Template

    template = Template.load(template_dir)
    try:
        result = importing.import_point(template_dir, json.loads(config), _shape(shape, template.axes), provenance,
                                        device, table)
    except InputError as exc:
        raise typer.BadParameter(str(exc), param_hint="--config") from exc
    typer.echo(f"{template.family}/{template.target}: {json.dumps(result.config)}")
    typer.echo(f"provenance: {result.provenance}")
    if apply:
        typer.echo(f"written to {result.write()}")
    else:
        typer.echo(f"would write {result.path} (pass --apply)")


def register(app: typer.Typer) -> None:
    app.command("import-point")(import_point)
