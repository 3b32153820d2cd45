"""``ceiling``: one program for the kernels, the microbenchmarks and the models.

Each subcommand lives in its own module under ``roofline.commands`` and adds
itself to the app through ``register(app)``.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="ceiling",
    help=(
        "Hand-tuned accelerator kernels, the microbenchmarks of the silicon they run on, "
        "and the rooflines, models and search templates fit from those measurements."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Modules under roofline.commands, one per subcommand (or group of them).
COMMANDS = ("backends", "bench", "device_check", "inspect", "run", "tune", "microbench", "fit", "export_templates", "import_point",
            "sweep")

for _name in COMMANDS:
    importlib.import_module(f"roofline.commands.{_name}").register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
