"""The one answer type of every verifier property: which kernel and property, under which constexprs,
how long it took, and either proved, a concrete counterexample, or unknown with the reason (a timeout,
an op the encoder does not model, a data-dependent address). Never proved on a timeout."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Status(str, enum.Enum):
    PROVED = "proved"
    COUNTEREXAMPLE = "counterexample"
    UNKNOWN = "unknown"


# The CLI's exit status per outcome: 0 when all proved, 1 on any counterexample, 2 otherwise.
EXIT_CODES = {Status.PROVED: 0, Status.COUNTEREXAMPLE: 1, Status.UNKNOWN: 2}


@dataclass(frozen=True)
class Result:
    kernel: str
    property: str
    status: Status
    constexprs: dict = field(default_factory=dict)
    seconds: float = 0.0
    counterexample: dict | None = None
    reason: str | None = None

    def __post_init__(self):
        # Accept the enum's value as a string too (results read back from JSON or a cache).
        object.__setattr__(self, "status", Status(self.status))
        if self.status is Status.COUNTEREXAMPLE and not self.counterexample:
            raise ValueError("a counterexample result needs its counterexample")
        if self.status is Status.UNKNOWN and not self.reason:
            raise ValueError("an unknown result needs its reason")

    @property
    def proved(self) -> bool:
        return self.status is Status.PROVED

    def as_dict(self) -> dict:
        # A constexpr may be a Triton dtype (an FP8 format): JSON gets its name.
        ce = {k: v if isinstance(v, (int, float, bool, str, type(None))) else str(v) for k, v in self.constexprs.items()}
        return {"kernel": self.kernel, "property": self.property, "status": self.status.value,
                "constexprs": ce, "seconds": round(float(self.seconds), 6),
                "counterexample": None if self.counterexample is None else dict(self.counterexample),
                "reason": self.reason}

    @classmethod
    def from_dict(cls, d: dict) -> "Result":
        return cls(kernel=d["kernel"], property=d["property"], status=Status(d["status"]),
                   constexprs=dict(d.get("constexprs") or {}), seconds=float(d.get("seconds", 0.0)),
                   counterexample=d.get("counterexample"), reason=d.get("reason"))


def exit_code(results) -> int:
    """0 when every result is proved, 1 when any is a counterexample, 2 otherwise (unknowns or none)."""
    statuses = {r.status for r in results}
    if Status.COUNTEREXAMPLE in statuses:
        return EXIT_CODES[Status.COUNTEREXAMPLE]
    if not statuses or Status.UNKNOWN in statuses:
        return EXIT_CODES[Status.UNKNOWN]
    return EXIT_CODES[Status.PROVED]
