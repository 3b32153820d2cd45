"""Run many cases under a time budget, writing records as each case finishes.

Everything that comes out of a run lands in one folder:

* ``records/``: the Parquet store (:func:`ceiling.microbench.records.append`, one part per case);
* ``<tag>.jsonl``: the same records as JSON lines, readable without pandas;
* ``<tag>-rows.json``: the summary rows and every skip or failure, rewritten
  after each case, so a run that is cut short still leaves its table.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ceiling.microbench.benchmarks import Case, cases_for
from ceiling.microbench.benchmarks.runner import CaseResult, Row, check_case, records, rows, run_case
from ceiling.microbench.peaks import Ceiling
from ceiling.microbench.records import Record, append
from ceiling.microbench.timing import TimingProtocol, on_gpu

log = logging.getLogger("ceiling.bench")


@dataclass
class Outcome:
    """What a run produced, for the summary table."""

    rows: list[Row] = field(default_factory=list)
    problems: list[dict[str, str]] = field(default_factory=list)  # skipped / failed / wrong, with why
    checks: list[dict[str, Any]] = field(default_factory=list)  # correctness verdicts
    records: int = 0
    cases_run: int = 0
    cases_left: list[str] = field(default_factory=list)  # not reached: time budget spent

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": [asdict(r) for r in self.rows],
            "problems": self.problems,
            "checks": self.checks,
            "records": self.records,
            "cases_run": self.cases_run,
            "cases_left": self.cases_left,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Outcome":
        return cls(
            rows=[Row(**r) for r in d.get("rows", [])],
            problems=list(d.get("problems", [])),
            checks=list(d.get("checks", [])),
            records=int(d.get("records", 0)),
            cases_run=int(d.get("cases_run", 0)),
            cases_left=list(d.get("cases_left", [])),
        )

    @property
    def failed(self) -> bool:
        return any(p["status"] in ("failed", "wrong") for p in self.problems)


class Sink:
    """Writes records to ``out`` (Parquet store + JSONL) and the outcome next to them; or nowhere."""

    def __init__(self, out: str | Path | None, tag: str = "bench"):
        self.out = Path(out) if out is not None else None
        self.tag = tag
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)

    def write(self, recs: Sequence[Record]) -> int:
        if self.out is None or not recs:
            return len(recs)
        written, refused = append(self.out / "records", recs)
        for i, why in refused:
            log.warning("record %d refused: %s", i, why)
        with open(self.out / f"{self.tag}.jsonl", "a") as f:
            for r in recs:
                f.write(r.model_dump_json() + "\n")
        return written

    def save(self, outcome: Outcome) -> None:
        if self.out is None:
            return
        path = self.out / f"{self.tag}-rows.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(outcome.as_dict(), indent=1, default=str))
        tmp.replace(path)


def select_cases(ops: Sequence[str], suite: str, device: str) -> tuple[list[Case], list[str]]:
    """The cases of each op in ``suite``; ops without that suite are reported, not fatal."""
    from ceiling.microbench.benchmarks import has_suite, unavailable

    chosen: list[Case] = []
    missing: list[str] = []
    for op in ops:
        if why := unavailable(op):
            missing.append(f"{op}: no cases ({why})")
            continue
        if not has_suite(op, suite):
            missing.append(f"{op} has no shape suite {suite!r}")
            continue
        chosen.extend(cases_for(op, suite, device))
    return chosen, missing


def _note(outcome: Outcome, result: CaseResult) -> None:
    for name, r in result.impls.items():
        if r.status in ("skipped", "failed", "wrong"):
            outcome.problems.append({"group": result.case.group, "impl": name, "status": r.status, "why": r.why})
        if r.check is not None:
            outcome.checks.append({"group": result.case.group, **r.check.as_dict()})


def run(
    cases: Sequence[Case],
    device: str,
    *,
    sink: Sink,
    check_only: bool = False,
    protocol: TimingProtocol | None = None,
    deadline: float | None = None,
    measured: dict[str, Ceiling] | None = None,
    seed: int = 0,
    on_case: Callable[[CaseResult], None] | None = None,
) -> Outcome:
    """Check (and unless ``check_only``, time) each case until ``deadline`` (``time.monotonic()``)."""
    outcome = Outcome()
    for i, case in enumerate(cases):
        if deadline is not None and time.monotonic() > deadline:
            outcome.cases_left = [c.group for c in cases[i:]]
            log.warning("time budget spent: %d case(s) not run, from %s", len(outcome.cases_left), case.group)
            break
        try:
            if check_only:
                result, _ = check_case(case, device, seed=seed)
            else:
                result = run_case(case, device, seed=seed, protocol=protocol, deadline=deadline)
        except Exception as exc:  # noqa: BLE001 - check_case may raise (inputs, oracle); record and go on
            log.error("%s: %s: %s", case.group, exc.__class__.__name__, exc)
            outcome.problems.append(
                {"group": case.group, "impl": "*", "status": "failed", "why": f"{exc.__class__.__name__}: {exc}"}
            )
            sink.save(outcome)
            continue
        finally:
            if on_gpu(device):
                import torch

                torch.cuda.empty_cache()
        outcome.cases_run += 1
        try:
            outcome.records += sink.write(records(result, measured=measured))
            outcome.rows.extend([] if check_only else rows(result))
            _note(outcome, result)
        except Exception as exc:  # noqa: BLE001 - a record that cannot be written must not stop the run
            log.error("%s: writing its records failed: %s: %s", case.group, exc.__class__.__name__, exc)
            outcome.problems.append(
                {"group": case.group, "impl": "*", "status": "failed", "why": f"records: {exc.__class__.__name__}: {exc}"}
            )
        sink.save(outcome)
        if on_case is not None:
            on_case(result)
    sink.save(outcome)
    return outcome
