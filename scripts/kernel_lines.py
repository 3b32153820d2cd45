"""Lines of the kernels layer (``kernels/``) inside and outside its kernel sources.

    python scripts/kernel_lines.py [ROOT]

A kernel source is a module that defines a kernel: a ``@triton.jit`` or ``@gluon.jit`` function, a
Pallas kernel (``pallas_call``) or an NKI kernel (``@nki.jit``). Everything else (front ends,
specs, dispatch, config resolution, tables' code, tuning, the emulator, inspection) is outside.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

KERNEL = re.compile(r"@(triton|gluon)\.jit|pallas_call|@nki\.jit")


def count(root: Path) -> tuple[int, int]:
    inside = outside = 0
    for path in sorted((root / "kernels").rglob("*.py")):
        text = path.read_text()
        n = len(text.splitlines())
        if KERNEL.search(text):
            inside += n
        else:
            outside += n
    return inside, outside


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    inside, outside = count(root)
    print(f"kernels/: {inside} lines in kernel sources, {outside} outside")
