"""The emulation context: the target, the mode (numeric or dry), the instruction trace and
the live on-chip allocations."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field

from ceiling.trainium.emulator import targets
from ceiling.trainium.emulator.errors import HardwareRuleError, NoTargetError


@dataclass
class Instruction:
    """One executed ISA instruction, as the cost model sees it."""

    index: int
    op: str  # e.g. "nc_matmul"
    engine: str  # "tensor", "vector", "scalar", "gpsimd", "dma"
    cycles: float  # engine cycles (0 for DMA)
    bytes: int  # bytes moved (DMA only)
    reads: list  # [(allocation id, lo, hi)]
    writes: list


@dataclass
class Context:
    target: targets.Target
    dry: bool = False  # run control flow and rule checks, skip the arithmetic
    trace: list[Instruction] = field(default_factory=list)
    sbuf_live: int = 0  # bytes per partition
    sbuf_peak: int = 0
    psum_live: int = 0  # banks
    psum_peak: int = 0
    next_id: int = 0

    def record(self, op, engine, cycles=0.0, nbytes=0, reads=(), writes=()):
        self.trace.append(Instruction(len(self.trace), op, engine, float(cycles), int(nbytes), list(reads), list(writes)))

    def allocate(self, buffer: str, per_partition_bytes: int, name: str) -> tuple[int, int]:
        """Account an SBUF or PSUM allocation; returns (id, PSUM banks taken)."""
        t = self.target
        self.next_id += 1
        banks = 0
        if buffer == "sbuf":
            if self.sbuf_live + per_partition_bytes > t.sbuf_bytes_per_partition:
                raise HardwareRuleError(
                    "sbuf-capacity",
                    f"nl.ndarray({name!r}, buffer=sbuf)",
                    f"{per_partition_bytes} B per partition on top of {self.sbuf_live} B live exceeds "
                    f"{t.sbuf_bytes_per_partition} B per partition",
                    t.name,
                )
            self.sbuf_live += per_partition_bytes
            self.sbuf_peak = max(self.sbuf_peak, self.sbuf_live)
        elif buffer == "psum":
            banks = -(-per_partition_bytes // t.psum_bank_bytes)
            if self.psum_live + banks > t.psum_banks:
                raise HardwareRuleError(
                    "psum-capacity",
                    f"nl.ndarray({name!r}, buffer=psum)",
                    f"{banks} bank(s) on top of {self.psum_live} live exceeds {t.psum_banks} banks of "
                    f"{t.psum_bank_bytes} B per partition",
                    t.name,
                )
            self.psum_live += banks
            self.psum_peak = max(self.psum_peak, self.psum_live)
        return self.next_id, banks

    def release(self, buffer: str, per_partition_bytes: int, banks: int) -> None:
        if buffer == "sbuf":
            self.sbuf_live -= per_partition_bytes
        elif buffer == "psum":
            self.psum_live -= banks


_local = threading.local()


def current() -> Context:
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        raise NoTargetError()
    return ctx


def active() -> Context | None:
    return getattr(_local, "ctx", None)


@contextlib.contextmanager
def emulate(target: str, dry: bool = False):
    """Run NKI code on the emulator for ``target`` ("trn1" or "trn2").

    ``dry=True`` executes the control flow, the hardware-rule checks, the uninitialized-read
    checks and the instruction trace, but no arithmetic (for cost estimates of large shapes).
    Yields the ``Context`` (its ``trace`` feeds ``cost.estimate``).
    """
    prev = getattr(_local, "ctx", None)
    ctx = Context(targets.get(target), dry=dry)
    _local.ctx = ctx
    try:
        yield ctx
    finally:
        _local.ctx = prev
