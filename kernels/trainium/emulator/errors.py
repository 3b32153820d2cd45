"""The errors the emulator raises."""

from __future__ import annotations


class EmulatorError(Exception):
    """Base of the emulator's errors."""


class HardwareRuleError(EmulatorError):
    """A kernel broke a rule the Neuron compiler or the hardware enforces.

    ``rule`` is a short stable name (e.g. ``"matmul-moving-free"``), ``instruction`` the
    NKI call that broke it, ``detail`` the shapes, dtypes or buffers involved.
    """

    def __init__(self, rule: str, instruction: str, detail: str, target: str | None = None):
        self.rule, self.instruction, self.detail, self.target = rule, instruction, detail, target
        on = f" on {target}" if target else ""
        super().__init__(f"[{rule}] {instruction}{on}: {detail}")


class UninitializedReadError(EmulatorError):
    """An instruction read elements of a tensor that nothing had written."""

    def __init__(self, tensor: str, instruction: str, unwritten: int, total: int, first: tuple[int, ...]):
        self.tensor, self.instruction = tensor, instruction
        super().__init__(
            f"{instruction} reads tensor {tensor!r} where {unwritten} of {total} elements were never written "
            f"(first at index {first} of the operand); nl.ndarray memory is uninitialized"
        )


class NoTargetError(EmulatorError):
    def __init__(self):
        super().__init__(
            "no Trainium target: run the kernel inside ceiling.trainium.emulator.emulate(target='trn1'|'trn2') "
            "or pass target= to the jitted kernel; the emulator never picks the newer chip by itself"
        )
