"""``ceiling``: one program for the kernels, the microbenchmarks and the models.

Each subcommand lives in its own module under ``ceiling.roofline.commands`` and adds
itself to the app through ``register(app)``. ``main`` turns every user error into one
line naming the argument, with click's usage exit status (2).
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

USAGE_ERROR = 2  # click's exit status for a usage error


def one_line(message: str) -> str:
    """A message folded onto one line (a library's multi-line reason included)."""
    return " ".join(part.strip() for part in str(message).splitlines() if part.strip())


def main(argv: list[str] | None = None) -> None:
    """The program. A user error (a bad option or argument, or a bad config, op, target or JSON
    reaching the library's checks as ``InputError``) is one line on stderr, ``Error: <argument>:
    <what was expected>``, and exit status 2; anything else is a bug and keeps its traceback."""
    import sys

    from ceiling.errors import InputError

    args = sys.argv[1:] if argv is None else list(argv)
    if not args:  # `ceiling` alone: the help, as click gives it
        app(args=args, prog_name="ceiling")
    try:
        code = app(args=args, prog_name="ceiling", standalone_mode=False)
    except typer.Abort:
        print("Aborted.", file=sys.stderr)
        sys.exit(1)
    except typer.TyperException as err:  # click's usage errors: a bad option, value or argument
        ctx = getattr(err, "ctx", None)
        hint = f" (see ceiling {ctx.info_name} --help)" if ctx is not None and ctx.parent is not None else ""
        print(f"Error: {one_line(err.format_message())}{hint}", file=sys.stderr)
        sys.exit(getattr(err, "exit_code", USAGE_ERROR))
    except InputError as err:
        print(f"Error: {one_line(err)}", file=sys.stderr)
        sys.exit(USAGE_ERROR)
    sys.exit(code if isinstance(code, int) else 0)

if __name__ == "__main__":
    main()
