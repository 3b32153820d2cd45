"""The one error type that bad input gets. Every op validates its arguments before any kernel launches
and raises :class:`InputError` with the argument's name and what was expected. It derives from
``ValueError`` so callers that already catch that keep working.
"""


class InputError(ValueError):
    """An argument does not satisfy an op's spec."""

    def __init__(self, argument: str, expected: str, got: str):
        self.argument = argument
        self.expected = expected
        self.got = got
        super().__init__(f"{argument}: expected {expected}, got {got}")


class BackendUnavailable(RuntimeError):
    """A backend was asked for that cannot run here; the message says why."""
