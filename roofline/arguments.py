"""Command-line arguments checked before a command does any work: JSON objects, choices, and a
library ``InputError`` named after the option it came from. Each failure is a ``typer.BadParameter``,
which ``ceiling.roofline.cli.main`` prints as one line with exit status 2."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

import typer

from ceiling.errors import InputError


def json_object(text: str, hint: str) -> dict:
    """``text`` parsed as a JSON object (``{"BLOCK_M": 128, ...}``), or a usage error naming ``hint``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise typer.BadParameter(f"expected a JSON object such as '{{\"BLOCK_M\": 128}}', got {text!r} "
                                 f"(not valid JSON: {err.msg} at character {err.pos})", param_hint=hint) from err
    if not isinstance(value, dict):
        raise typer.BadParameter(f"expected a JSON object such as '{{\"BLOCK_M\": 128}}', got {text!r}",
                                 param_hint=hint)
    return value


def choice(value: str, allowed: Iterable[str], hint: str) -> str:
    allowed = list(allowed)
    if value not in allowed:
        raise typer.BadParameter(f"expected one of {', '.join(allowed)}; got {value!r}", param_hint=hint)
    return value


def from_input_error(err: InputError, hints: Mapping[str, str]) -> typer.BadParameter:
    """The library's refusal of an argument, named as the option the user typed (``target`` -> ``--target``)."""
    return typer.BadParameter(f"expected {err.expected}, got {err.got}", param_hint=hints.get(err.argument, err.argument))
