"""VMEM accounting shared by the TPU kernels' config rules. A Pallas TPU kernel's grid step holds its
double-buffered blocks and its scratch in VMEM. Each kernel family's rules module (``gemm_rules``,
``attention_rules``) lists those buffers for a config as a :class:`VmemEstimate`; the budget check
and the ``vmem_limit_bytes`` a kernel compiles with are the same for all of them and live here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ceiling.tpu.generations import SUBLANES, MiB, generation

_ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}


def dtype_name(dtype: Any) -> str:
    return dtype if isinstance(dtype, str) else np.dtype(dtype).name


def itemsize(dtype: Any) -> int:
    return _ITEMSIZE[dtype_name(dtype)]


def sublane_multiple(dtype: Any) -> int:
    """Rows per vreg for ``dtype``: 8 for 32-bit, 16 for 16-bit."""
    return SUBLANES * 4 // itemsize(dtype)


@dataclass(frozen=True)
class VmemEstimate:
    """Bytes of VMEM one grid step of one kernel holds, by buffer."""

    kernel: str
    buffers: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.buffers.values())

    def as_dict(self) -> dict[str, int]:
        return {**self.buffers, "total": self.total}


def over_budget(estimate: VmemEstimate, target: str) -> str | None:
    """Why ``estimate`` does not fit within the usable VMEM of ``target`` (three
    quarters of physical; the rest is Mosaic's own scratch and spills), or None."""
    gen = generation(target)
    if estimate.total <= gen.usable_vmem_bytes:
        return None
    return (
        f"the {estimate.kernel} kernel holds {estimate.total / MiB:.1f} MiB ({estimate.as_dict()}) > "
        f"{gen.usable_vmem_bytes / MiB:.0f} MiB usable of {gen.vmem_bytes / MiB:.0f} MiB VMEM on {target}"
    )


def vmem_limit_bytes(estimate: VmemEstimate, target: str) -> int:
    """The ``vmem_limit_bytes`` to compile with: the scoped default, or half
    again the estimate when that is more, never above physical VMEM."""
    gen = generation(target)
    wanted = -(-(estimate.total * 3 // 2) // MiB) * MiB
    return min(gen.vmem_bytes, max(gen.scoped_vmem_default_bytes, wanted))
