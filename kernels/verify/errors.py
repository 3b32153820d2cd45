"""The verifier's input error: a :class:`ceiling.InputError` built from one line that starts with the key
it names (``grid[0]: unknown name 'X'``), since a contract's errors are about keys, not call arguments."""

from ceiling.errors import InputError


class ContractError(InputError):
    def __init__(self, message: str):
        key, _, rest = message.partition(": ")
        self.argument, self.expected, self.got = key, rest, ""
        ValueError.__init__(self, message)
