"""``ceiling inspect OP --target T``: compile each shipped config for a real target and report its ISA facts."""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.table import Table

from ceiling.roofline import arguments, tables
from ceiling.roofline.tables import key_table

# The library's argument names as this command spells them.
HINTS = {"op": "OP", "target": "--target", "dtype": "--dtype", "config": "--config"}


def inspect(
    op: str = typer.Argument("gemm", help="The op whose kernels to inspect (gemm, attention, ...)."),
    target: str = typer.Option("sm_90a", "--target", "-t", help="sm_90a, sm_100a, sm_103a, gfx942, gfx950, tpu-v5e/v5p/v6e, trn1, trn2."),
    dtype: str = typer.Option("bfloat16", help="Input dtype of the specializations to compile."),
    config: Optional[str] = typer.Option(None, help='Only this config, as JSON: \'{"BLOCK_M": 128, ...}\'.'),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Compile every shipped config of OP for TARGET on this machine (no GPU needed) and report
    registers, spills/scratch, shared memory/LDS, tensor-core instruction count (HGMMA, HMMA,
    Blackwell's UTC*MMA with its tensor-memory columns and MMA shapes, v_mfma) and the
    instruction mix; for TPU the blocks, grid and VMEM estimate of the Mosaic
    lowering; for Trainium the hardware-rule checks and the cost-model estimate."""
    from ceiling.errors import InputError
    from ceiling.isa import inspect_op

    try:
        rows = inspect_op(op, target, dtype=dtype, config=arguments.json_object(config, "--config") if config else None)
    except InputError as err:
        raise arguments.from_input_error(err, HINTS) from err
    _add_occupancy(rows, target)
    if as_json:
        typer.echo(json.dumps(rows, indent=2, default=str))
        return
    tables.console().print(table(rows, f"{op} on {target} ({dtype})"))


def _add_occupancy(rows: list[dict], target: str) -> None:
    """Resident blocks per SM/CU from the static facts, where the occupancy model knows the target."""
    try:
        from ceiling.microbench import occupancy
    except ImportError:
        return
    for row in rows:
        if "registers" not in row or "threads" not in row:
            continue
        try:
            row["occupancy"] = occupancy.from_static_profile(row, target)
        except (AttributeError, KeyError, ValueError):
            return


# Column headers for the static facts, short enough to leave the kernel names whole at 120 columns.
HEADERS = {"registers": "regs", "spill_bytes": "spill B", "shared_bytes": "smem B",
           "tensor_core_instructions": "TC instr", "threads": "threads", "occupancy": "occupancy",
           "fraction_of_peak": "of peak", "instructions": "instr", "tmem_columns": "TMEM cols"}


def table(rows: list[dict], title: str) -> Table:
    """The facts of each row; the kernel name (or config) column is never wrapped or cut, numbers never
    wrap either, and each float is rounded to what it means (times in ms/us, fractions in %)."""
    if not rows:
        return Table(title=title)
    if "tensor_core_instructions" in rows[0]:
        key, cols = "name", ["registers", "spill_bytes", "shared_bytes", "tensor_core_instructions", "threads"]
        if any("occupancy" in r for r in rows):
            cols.append("occupancy")
        if any("tmem_columns" in (r.get("extra") or {}) for r in rows):  # Blackwell: tensor memory per CTA
            rows = [{**r, "tmem_columns": r["extra"]["tmem_columns"]} for r in rows]
            cols.append("tmem_columns")
    else:  # rows from a non-Triton target: its config, the launch shape and the scalar facts
        skip = {"target", "dtype", "out_dtype", "provenance", "export_error", "serialized_bytes", "name"}
        key, cols = "config", [k for k, v in rows[0].items()
                               if k not in skip and k != "config" and (not isinstance(v, dict) or "total" in v)][:7]
        if len(rows) > 1:  # a fact every row shares (the problem's shape, say) is said once, in the title
            same = [c for c in cols if not _is_number(rows[0].get(c)) and len({_fmt(r.get(c), c) for r in rows}) == 1]
            title += "".join(f", {_header(c)} {_fmt(rows[0].get(c), c)}" for c in same)
            cols = [c for c in cols if c not in same]
    headers = [_header(c) for c in cols]
    numeric = [h for c, h in zip(cols, headers) if all(_is_number(r.get(c)) for r in rows if r.get(c) is not None)]
    mixes = any(r.get("instruction_mix") for r in rows)
    t = key_table(title, key, [*headers, *(["top instructions"] if mixes else [])], numeric=numeric,
                  text=["top instructions"])
    for r in rows:
        top = ", ".join(f"{k}:{v}" for k, v in list((r.get("instruction_mix") or {}).items())[:5])
        t.add_row(_fmt(r.get(key)), *[_fmt(r.get(c), c) for c in cols], *([top] if mixes else []))
    return t


def _header(name: str) -> str:
    """A column header: the short name where there is one, else the fact's name without its unit suffix
    (the cells carry the unit)."""
    if name in HEADERS:
        return HEADERS[name]
    return name.removesuffix("_s").removesuffix("_bytes").replace("_", " ")


def _is_number(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) or (isinstance(v, dict) and "total" in v)


def _fmt(v, name: str = "") -> str:
    """A cell: a count whole, a time in s/ms/us/ns, a fraction as a percentage, any other float to 4 digits."""
    from ceiling.roofline.report import duration

    if isinstance(v, dict) and "total" in v:
        return _fmt(v["total"], name)
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items())
    if isinstance(v, (list, tuple)) and all(isinstance(x, int) for x in v):
        return "x".join(map(str, v))
    if isinstance(v, float) and not isinstance(v, bool):
        if name.endswith("_s"):
            return duration(v)
        if "fraction" in name:
            return f"{v:.1%}"
        return str(int(v)) if v.is_integer() and abs(v) < 1e15 else f"{v:.4g}"
    return "" if v is None else str(v)


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect)
