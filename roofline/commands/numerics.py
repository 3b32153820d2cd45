"""``ceiling microbench numerics`` and ``numerics-device``: the tensor-core feature table.
``numerics`` runs the probes (``ceiling.numerics.probes``) against the bit-exact model of each
published target on the CPU and prints the features they reveal beside the published ones;
``numerics-device`` runs the same probes on this machine's GPU as Triton ``tl.dot`` kernels, records
which hypothesis the device follows, and compares random FP8 and bf16 GEMMs with the model bit for
bit.
"""

from __future__ import annotations

import json
from typing import Any

import typer

from ceiling.roofline import tables
from ceiling.roofline.tables import key_table

SUITES = ("numerics", "numerics-device")
SHORT = {"subnormal_inputs": "sub in", "subnormal_outputs": "sub out", "alignment_bits": "extra bits",
         "accumulator_bits": "acc bits", "block": "block", "rounding": "rounding",
         "accumulator_order": "c enters"}


def _fail(message: str) -> None:
    typer.echo(f"Error: {message}", err=True)
    raise typer.Exit(code=2)


def _print(title: str, source: str, results: list[dict[str, Any]]) -> None:
    from ceiling.numerics.suite import FEATURES

    table = key_table(title, ["target", "kind"], [SHORT[f] for f in FEATURES] + ["published"], text=["published"])
    for r in results:
        for row in r["rows"]:
            if "error" in row:
                table.add_row(r["target"], row["kind"], *[""] * len(FEATURES), f"[red]{row['error']}[/]")
                continue
            cells = []
            for f in FEATURES:
                cell = str(row["features"][f])
                cells.append(cell if f not in row["differs"] else f"[red]{cell}[/] (pub. {row['published'][f]})")
            table.add_row(r["target"], row["kind"], *cells, "matches" if not row["differs"] else "[red]differs[/]")
    console = tables.console()
    console.print(table)
    console.print(f"features read from {source}; 'published': the parameters in ceiling/numerics/parameters.json "
                  "(Khattak and Mikaitis 2025, models/*.m)")


def model_table(target: str | None, as_json: bool) -> None:
    from ceiling.numerics import canonical_target, targets
    from ceiling.numerics.suite import model_backend, table

    names = [canonical_target(target)] if target else targets()
    results = [{"target": t, "source": "model", "rows": table(t, model_backend(t))} for t in names]
    if as_json:
        typer.echo(json.dumps({"suite": "numerics", "targets": results}, indent=2))
    else:
        _print("tensor-core numerics: the model's features (CPU)", "the model, on this CPU", results)
    if any(row["differs"] for r in results for row in r["rows"]):
        raise typer.Exit(code=1)


def device_table(target: str | None, as_json: bool) -> None:
    import torch

    if not torch.cuda.is_available():
        _fail("numerics-device runs the probes on a CUDA GPU's tensor cores; no GPU is visible here "
              "(`ceiling microbench numerics` runs them against the model on the CPU)")
    from ceiling.numerics import canonical_target, device, kinds
    from ceiling.numerics.suite import table

    name = torch.cuda.get_device_name()
    chosen = canonical_target(target) if target else device.target_of(name)
    if chosen is None:
        _fail(f"no published tensor-core model for {name!r}; name one to compare with: --target h100 or b200")
    # one kind failing to compile or run on the device must not cost the others' results
    rows, equality = [], []
    for kind in kinds(chosen):
        try:
            rows.extend(table(chosen, device.backend("cuda"), [kind]))
        except Exception as exc:  # noqa: BLE001 - reported per kind, the run goes on
            rows.append({"kind": kind, "error": f"{type(exc).__name__}: {exc}"})
    for kind in device.BIT_EQUALITY_KINDS:
        try:
            equality.extend(device.bit_equality(chosen, "cuda", kinds=(kind,)))
        except Exception as exc:  # noqa: BLE001
            equality.append({"kind": kind, "error": f"{type(exc).__name__}: {exc}"})
    result = {"suite": "numerics-device", "device": name, "target": chosen,
              "follows_published": all(not r.get("error") and not r["differs"] for r in rows),
              "bit_equal": all(not r.get("error") and r["mismatches"] == 0 for r in equality),
              "targets": [{"target": chosen, "source": name, "rows": rows}], "bit_equality": equality}
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    _print(f"tensor-core numerics measured on {name}", f"{name}, measured now", result["targets"])
    eq = key_table(f"random GEMMs on {name} against the {chosen} model, every bit", "kind",
                   ["shape", "elements", "mismatches", "first"], numeric=["elements", "mismatches"])
    for r in equality:
        if "error" in r:
            eq.add_row(r["kind"], "", "", "", f"[red]{r['error']}[/]")
            continue
        first = r.get("first")
        eq.add_row(r["kind"], "x".join(map(str, r["shape"])), str(r["elements"]), str(r["mismatches"]),
                   f"{first['at']}: device {first['device']}, model {first['model']}" if first else "")
    tables.console().print(eq)


def run(names: list[str], target: str | None, as_json: bool) -> None:
    if len(names) != 1:
        raise typer.BadParameter(f"{names[0] if names[0] in SUITES else names[-1]} runs alone", param_hint="SUITES")
    if names[0] == "numerics":
        model_table(target, as_json)
    else:
        device_table(target, as_json)
