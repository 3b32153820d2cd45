"""``ceiling sweep``: a template's space on Ray: compile-and-inspect every valid point, benchmarks on GPUs."""

from __future__ import annotations

from pathlib import Path

import typer


def _shape(text: str | None, axes: list[str]) -> dict[str, int] | None:
    if not text:
        return None
    parts = text.lower().split("x")
    if len(parts) != len(axes) or not all(p.isdigit() for p in parts):
        raise typer.BadParameter(f"expected {'x'.join(axes)} as integers, got {text!r}", param_hint="--shape")
    return dict(zip(axes, map(int, parts)))


def sweep(
    op: str = typer.Option("gemm", "--op", help="Kernel family."),
    target: str = typer.Option("sm_90a", "--target", help="Compile target of the template."),
    store: Path = typer.Option(Path("records"), "--store", file_okay=False, help="Records folder the results are appended to."),
    shape: str = typer.Option(None, "--shape", help="Only points valid for this shape (MxNxK); also the benchmark shape."),
    limit: int = typer.Option(None, "--limit", min=1, help="At most this many points (in the model's predicted order)."),
    section: str = typer.Option(None, "--section", help="One kernel of a sectioned family (attention: fwd, dkdv, dq)."),
    benchmark: bool = typer.Option(False, "--benchmark", help="Also time every point, one task per GPU."),
    address: str = typer.Option(None, "--address", help="Ray cluster address ('auto' to join one); default: a local cluster."),
    num_cpus: int = typer.Option(None, "--num-cpus", min=1, help="CPUs for a local cluster."),
) -> None:
    """Compile every valid point of a template for its target and record its static facts (and timings)."""
    from rich.progress import Progress

    from ceiling.roofline import store as _store
    from ceiling.roofline import sweep as _sweep
    from ceiling.roofline.templates import export

    if op not in export.families():
        raise typer.BadParameter(f"expected one of {export.families()}, got {op!r}", param_hint="--op")
    if target not in export.targets(op):
        raise typer.BadParameter(f"expected one of {export.targets(op)}, got {target!r}", param_hint="--target")
    template = export.build(op, target, _store.load([store]))
    if section is not None and section not in template.sections:
        raise typer.BadParameter(f"expected one of {template.sections}, got {section!r}", param_hint="--section")
    problem = _shape(shape, template.axes)
    try:
        points = template.valid_points(problem, section)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--section") from exc
    if problem:
        order = {str(p["config"]): i for e in template.cost_model.predictions
                 if e["shape"] == problem and e.get("section") == section for i, p in enumerate(e["top"])}
        points.sort(key=lambda c: order.get(str(c), len(order)))
    points = points[:limit] if limit else points
    with Progress() as bar:
        task = bar.add_task(f"{op}/{target}: {len(points)} points", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        result = _sweep.run(template, points, store, [problem] if problem else None, benchmark, address, num_cpus,
                            progress)
    typer.echo(f"{result.points} points, {result.written} records written to {store}, "
               f"{result.failed} failed, {len(result.refused)} refused")


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)
