"""Where records live: the measured data committed with the package, and any other stores.

``EMBEDDED`` holds measurements taken on real devices and committed to the
repository (Parquet parts written by ``ceiling.microbench.records.append``); it is what
``ceiling run`` and ``ceiling fit`` fit from on a machine without a GPU.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ceiling.microbench import records as _records

EMBEDDED = Path(__file__).parent / "data" / "records"


def load(stores: Iterable[str | os.PathLike] | None = None, embedded: bool = True) -> list[_records.Record]:
    """Records from the embedded store (unless ``embedded=False``) and every other store given."""
    folders = ([EMBEDDED] if embedded else []) + [Path(s) for s in stores or ()]
    out: list[_records.Record] = []
    seen: set[Path] = set()
    for folder in folders:
        folder = folder.resolve()
        if folder in seen or not folder.is_dir():
            continue
        seen.add(folder)
        out.extend(_records.load(folder))
    return out
