"""``ceiling microbench``: run the silicon microbenchmarks and write their records."""

from __future__ import annotations

from typing import List, Optional

import json

import typer

from ceiling.roofline import tables
from ceiling.roofline.tables import key_table


def microbench(
    suites: Optional[List[str]] = typer.Argument(
        None, help="Suites to run: bank-conflicts, occupancy, clocks, ceilings, host (default: all); or, alone, "
        "numerics (the tensor-core feature probes against the published models, on the CPU) or numerics-device "
        "(the same probes and a bit-equality check on this GPU)."
    ),
    target: Optional[str] = typer.Option(None, "--target", help="numerics: the model to run (h100, b200, b200-rn; "
                                         "default all); numerics-device: the model to compare with (default: "
                                         "the one this GPU's name implies)."),
    device: str = typer.Option("auto", "--device", help="'auto' / 'cuda' / 'cuda:N' for GPU suites, 'cpu' for none."),
    out: str = typer.Option("records/microbench", "--out", help="Record store (folder) to append to."),
    quick: bool = typer.Option(False, "--quick", help="Smaller sizes and fewer repeats (smoke runs)."),
    runtime: str = typer.Option(
        "auto", "--runtime", help="Library the GPU suites run on: 'cupy', 'pycuda', or 'auto' (CuPy if it can use "
        "the GPU, else PyCUDA)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print each suite's outcome and the headline measurements "
                                 "as JSON instead of tables."),
) -> None:
    """Measure the silicon: bank conflicts, occupancy, clocks, bandwidth/FLOP/latency ceilings, and the host CPU."""
    from ceiling.microbench import summary
    from ceiling.microbench.runner import run
    from ceiling.microbench.suites import ORDER
    from ceiling.roofline.commands import numerics

    if suites and any(s in numerics.SUITES for s in suites):
        return numerics.run(list(suites), target, as_json)
    if target is not None:
        raise typer.BadParameter("only the numerics suites take a target", param_hint="--target")
    names = suites or list(ORDER)
    unknown = [s for s in names if s not in ORDER]
    if unknown:
        raise typer.BadParameter(f"expected suites among {', '.join(ORDER)}, got {unknown}", param_hint="SUITES")
    from ceiling.microbench.runner import parse_device

    try:
        parse_device(device)
    except ValueError as err:
        raise typer.BadParameter(f"expected auto, cpu, cuda or cuda:N, got {device!r}", param_hint="--device") from err
    runtime = runtime.strip().lower()
    if runtime not in ("auto", "cupy", "pycuda"):
        raise typer.BadParameter(f"expected auto, cupy or pycuda, got {runtime!r}", param_hint="--runtime")
    console = tables.console(stderr=True)
    colors = {"ok": "green", "unavailable": "yellow", "failed": "red"}

    def report(outcome) -> None:
        note = f" ({outcome.reason.splitlines()[0]})" if outcome.reason else ""
        console.print(f"[{colors[outcome.status]}]{outcome.suite}: {outcome.status}[/], "
                      f"{len(outcome.records)} records, {outcome.seconds:.1f} s{note}")

    with console.status("starting") as status:
        outcomes = run(names, out, device, quick=quick, runtime=runtime, progress=lambda m: status.update(m),
                       on_outcome=report)

    headline = summary.rows([r for o in outcomes for r in o.records])
    if as_json:
        typer.echo(json.dumps({
            "out": out,
            "suites": [{"suite": o.suite, "status": o.status, "records": len(o.records), "seconds": round(o.seconds, 2),
                        "reason": o.reason} for o in outcomes],
            "headline": [{"what": what, "case": case, "value": value} for what, case, value in headline],
        }, indent=2))
    else:
        table = key_table(f"microbench ({out})", "suite", ["status", "records", "seconds", "reason"],
                          numeric=["records", "seconds"], text=["reason"])
        for o in outcomes:
            table.add_row(o.suite, f"[{colors[o.status]}]{o.status}[/]", str(len(o.records)), f"{o.seconds:.1f}",
                          (o.reason.splitlines() or [""])[0])
        results = key_table("headline measurements (measured here, now)", ["what", "case"], ["value"],
                            numeric=["value"])
        for row in headline:
            results.add_row(*row)
        console = tables.console()
        console.print(table)
        console.print(results if headline else "no measurements: no suite ran here")
    if any(o.status == "failed" for o in outcomes):
        raise typer.Exit(code=1)


def register(app: typer.Typer) -> None:
    app.command("microbench")(microbench)
