"""Turn a ``pytest --benchmark-json`` file into records.

    python -m ceiling.microbench.benchmarks.pytest_json results.json --out store/

Each benchmark of ours carries its full record in ``extra_info["record"]``
(see :mod:`ceiling.microbench.benchmarks.pytest_plugin`); the statistics pytest-benchmark
kept (median, rounds) are checked against it and the file's commit is added.
Benchmarks without a record (not written by our plugin) are refused with the reason.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from ceiling.microbench.records import Record


def convert(data: dict[str, Any]) -> tuple[list[Record], list[tuple[str, str]]]:
    """Records from a pytest-benchmark JSON document, and (benchmark name, reason) for those refused."""
    records: list[Record] = []
    refused: list[tuple[str, str]] = []
    commit = (data.get("commit_info") or {}).get("id")
    for bench in data.get("benchmarks", []):
        name = bench.get("fullname") or bench.get("name", "?")
        raw = (bench.get("extra_info") or {}).get("record")
        if raw is None:
            refused.append((name, "no extra_info['record']: not a ceiling benchmark"))
            continue
        stats = bench.get("stats") or {}
        try:
            record = Record.model_validate(raw)
        except Exception as exc:  # noqa: BLE001 - report and go on
            refused.append((name, f"invalid record: {exc}"))
            continue
        median = stats.get("median")
        if median is None or record.median is None or not math.isclose(median, record.median, rel_tol=1e-9):
            refused.append((name, f"pytest-benchmark median {median} differs from the record's {record.median}"))
            continue
        update: dict[str, Any] = {"extra": {**record.extra, "pytest": {"name": name, "group": bench.get("group")}}}
        if stats.get("rounds") is not None:
            update["repetitions"] = int(stats["rounds"])
        if commit and not record.provenance.git_commit:
            update["provenance"] = record.provenance.model_copy(update={"git_commit": commit})
        records.append(record.model_copy(update=update))
    return records, refused


def main(argv: list[str] | None = None) -> int:
    import argparse

    from ceiling.microbench.records import append

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json_file", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="Records store (folder) to append to.")
    args = parser.parse_args(argv)
    records, refused = convert(json.loads(args.json_file.read_text()))
    for name, why in refused:
        print(f"refused {name}: {why}", file=sys.stderr)
    written, invalid = append(args.out, records)
    print(f"{written} records appended to {args.out}")
    return 1 if refused or invalid else 0


if __name__ == "__main__":
    raise SystemExit(main())
