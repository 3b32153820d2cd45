"""A point an optimizer found, back into the kernels: checked against its template and the
kernel's space, and filed in the vendor's config table with a provenance line.

    from ceiling.roofline.templates import importing
    result = importing.import_point("templates/attention/sm_90a", {"fwd.block_m": 128, ...},
                                    shape={"head_dim": 128}, provenance="optuna, 40 trials on an H200")
    result.write()   # or ceiling import-point ... --apply
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ceiling import spaces
from ceiling.microbench.records import _git_commit
from ceiling.roofline.templates import adapters, families
from ceiling.roofline.templates.schema import Template


@dataclass
class Imported:
    template: Template
    config: dict[str, Any]  # the kernel config (sectioned where the family is)
    shape: dict[str, Any] | None
    path: Path  # the vendor table
    table: dict  # the table with the point filed
    provenance: str

    def write(self) -> Path:
        """Write the table (atomically: a temporary file renamed over it)."""
        if "entries" in self.table:  # the one table format: ceiling.tables lays it out
            from ceiling import tables

            tables.write(self.path, self.table)
            return self.path
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(families.format_json(self.table) + "\n")
        tmp.replace(self.path)
        return self.path


def _check_proofs(template: Template, point: dict) -> None:
    """Refuse a point whose kernels' proofs do not hold (``ceiling.verify.project``), naming the property
    and its counterexample (or why it is not proved)."""
    from ceiling.errors import InputError
    from ceiling.verify import project

    bad = project.failures(template.family, template.target, point)
    if bad:
        r = bad[0]
        why = r.counterexample if r.counterexample is not None else r.reason
        raise InputError("config", f"a point whose kernels are proved ({r.kernel}: {r.property})",
                         f"{r.status.value}: {why}")


def import_point(folder: str | Path, config: dict[str, Any], shape: dict[str, Any] | None = None,
                 provenance: str = "", device_name: str | None = None, table: str | Path | None = None,
                 section: str | None = None) -> Imported:
    """``config`` (flat or sectioned; floats from JSON are fine) validated against the template in
    ``folder`` (its domains and constraints, at ``shape``) and against the kernel's space (the
    keys and rules ``config=`` is held to), then filed in the vendor's table for ``shape`` on
    ``device_name`` (the template's device by default). Raises ``InputError`` for a point either
    rejects. Nothing is written until :meth:`Imported.write`."""
    template = Template.load(folder)
    point = adapters.validate_config(template, config, shape, section)
    space = spaces.get(template.family, template.target)
    space.check(point, partial=True)
    context = {"dtype_bytes": template.context(shape)["dtype_bytes"], **(shape or {})}
    space.check_constraints(point, context)
    _check_proofs(template, point)
    stamp = _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    line = (f"imported {stamp} (commit {_git_commit()}) through the {template.family}/{template.target} template "
            f"of {template.provenance.get('created', 'unknown date')}" + (f": {provenance}" if provenance else ""))
    path, new = families.write_point(template.family, template.target, point, shape, template.dtype,
                                     device_name or template.device_name, line, Path(table) if table else None)
    return Imported(template, point, shape, path, new, line)
