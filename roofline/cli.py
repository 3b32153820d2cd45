"""``ceiling``: one program for the kernels, the microbenchmarks and the models.

Each subcommand lives in its own module under ``ceiling.roofline.commands`` and adds
itself to the app through ``register(app)``.
"""

from __future__ import annotations

import importlib
import os

import typer

# The kernels were tuned, and their numerics checked, with Triton's floating-point fusion on (FMA
# contraction: the default through Triton 3.9). Triton 3.9 warns on every compile that the default
# turns to off in 3.10; pin it to the value the tables were measured with (an explicit setting in
# the environment still wins), which also leaves the commands' output free of that warning.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

app = typer.Typer(
    name="ceiling",
    help=(
        "Hand-tuned accelerator kernels, the microbenchmarks of the silicon they run on, "
        "and the rooflines, models and search templates fit from those measurements."
    ),
    no_args_is_help=True,
    add_completion=False,
    # Plain help: flags read "--json", not rich's "--json <bool>"; options list as "--out <path>".
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)

# Modules under ceiling.roofline.commands, one per subcommand (or group of them).
COMMANDS = ("backends", "bench", "device_check", "inspect", "run", "tune", "microbench", "fit", "export_templates", "import_point",
            "sweep", "verify")

for _name in COMMANDS:
    importlib.import_module(f"ceiling.roofline.commands.{_name}").register(app)


def main() -> None:
    """The program. A user error a command did not turn into a usage error itself (a bad config,
    op, target or JSON reaching the library's checks) is one line on stderr and exit status 2, as
    click gives its own usage errors; anything else is a bug and keeps its traceback."""
    import json
    import sys

    from ceiling.errors import InputError

    try:
        app()
    except InputError as err:
        print(f"Error: {err}", file=sys.stderr)
        sys.exit(2)
    except json.JSONDecodeError as err:
        print(f"Error: not valid JSON ({err})", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
