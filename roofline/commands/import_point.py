"""``ceiling import-point``: a point an optimizer found, checked and filed in the vendor's config table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ceiling.roofline import arguments


def _shape(text: str | None, axes: list[str]) -> dict[str, int] | None:
    """``4096x4096x4096`` (the template's axes in order), ``head_dim=128,seq=4096`` or a JSON object."""
    if not text:
        return None
    try:
        if text.lstrip().startswith("{"):
            return {k: int(v) for k, v in arguments.json_object(text, "--shape").items()}
        if "=" in text:
            return {k.strip(): int(v) for k, v in (item.split("=", 1) for item in text.split(","))}
    except (TypeError, ValueError) as err:
        raise typer.BadParameter(f"expected integer sizes ({'x'.join(axes)}, name=value pairs or JSON), got {text!r}",
                                 param_hint="--shape") from err
    parts = text.lower().split("x")
    if len(parts) != len(axes) or not all(p.isdigit() for p in parts):
        raise typer.BadParameter(f"expected {'x'.join(axes)}, name=value pairs or JSON, got {text!r}",
                                 param_hint="--shape")
    return dict(zip(axes, map(int, parts)))


def import_point(
    template_dir: Path = typer.Argument(..., exists=True, file_okay=False,
                                        help="A template folder written by ceiling export-templates."),
    config: str = typer.Option(..., "--config", help="The point, as JSON (flat dotted names or sectioned)."),
    shape: Optional[str] = typer.Option(None, "--shape",
                                        help="The problem it was found for: MxNxK, name=value,... or JSON."),
    provenance: str = typer.Option("", "--provenance", help="How it was found and measured (optimizer, device, time)."),
    device: Optional[str] = typer.Option(None, "--device",
                                         help="The device name to file it under (default: the template's)."),
    table: Optional[Path] = typer.Option(None, "--table", exists=True, dir_okay=False,
                                         help="Write into this copy of the vendor table instead."),
    apply: bool = typer.Option(False, "--apply", help="Write the table; without it, only show what would be written."),
) -> None:
    """Validate a found point against its template and the kernel's space, and file it in the vendor's
    config table with a provenance line (a dry run unless --apply)."""
    from ceiling.errors import InputError
    from ceiling.roofline.templates import importing
    from ceiling.roofline.templates.schema import Template

    point = arguments.json_object(config, "--config")
    if not (template_dir / "template.json").is_file():
        raise typer.BadParameter(f"expected a folder with a template.json (written by ceiling export-templates), "
                                 f"got {str(template_dir)!r}", param_hint="TEMPLATE_DIR")
    template = Template.load(template_dir)
    try:
        result = importing.import_point(template_dir, point, _shape(shape, template.axes), provenance, device, table)
    except InputError as exc:
        raise arguments.from_input_error(exc, {"config": "--config", "shape": "--shape", "device": "--device"}) from exc
    typer.echo(f"{template.family}/{template.target}: {json.dumps(result.config)}")
    typer.echo(f"provenance: {result.provenance}")
    if apply:
        typer.echo(f"written to {result.write()}")
    else:
        typer.echo(f"would write {result.path} (pass --apply)")


def register(app: typer.Typer) -> None:
    app.command("import-point")(import_point)
