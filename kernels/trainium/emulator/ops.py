"""Element-wise operators and activation functions, as the ISA applies them (in float32). Each is an
``Op`` with an NKI name; ``nki.language`` exports them (``nl.add``, ``nl.relu``...), and the ISA also
accepts numpy ufuncs (``np.add``, ``np.exp``...) as older samples pass them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

try:  # scipy's erf is vectorized; math.erf is the fallback
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover - scipy ships with the test extra
    _erf = np.frompyfunc(math.erf, 1, 1)


@dataclass(frozen=True)
class Op:
    name: str
    fn: Callable
    identity: float | None = None  # for reductions

    def __call__(self, *args):
        return self.fn(*(np.asarray(a, dtype=np.float32) for a in args))

    def __repr__(self):
        return f"nl.{self.name}"


def _f32(fn):
    return lambda *a: np.asarray(fn(*a), dtype=np.float32)


def _gelu(x):
    return 0.5 * x * (1.0 + np.asarray(_erf(x / np.float32(math.sqrt(2.0))), dtype=np.float32))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.float32(math.sqrt(2.0 / math.pi)) * (x + np.float32(0.044715) * x * x * x)))


def _sigmoid(x):
    # tanh form: no overflow for large |x|
    return np.float32(0.5) * (np.float32(1.0) + np.tanh(np.float32(0.5) * x))


BINARY = {
    "add": Op("add", _f32(np.add), 0.0),
    "subtract": Op("subtract", _f32(np.subtract)),
    "multiply": Op("multiply", _f32(np.multiply), 1.0),
    "divide": Op("divide", _f32(np.divide)),
    "maximum": Op("maximum", _f32(np.maximum), -np.inf),
    "minimum": Op("minimum", _f32(np.minimum), np.inf),
    "power": Op("power", _f32(np.power)),
    "equal": Op("equal", _f32(np.equal)),
    "not_equal": Op("not_equal", _f32(np.not_equal)),
    "greater": Op("greater", _f32(np.greater)),
    "greater_equal": Op("greater_equal", _f32(np.greater_equal)),
    "less": Op("less", _f32(np.less)),
    "less_equal": Op("less_equal", _f32(np.less_equal)),
}

UNARY = {
    "copy": Op("copy", _f32(lambda x: x)),
    "identity": Op("identity", _f32(lambda x: x)),
    "relu": Op("relu", _f32(lambda x: np.maximum(x, np.float32(0)))),
    "gelu": Op("gelu", _f32(_gelu)),
    "gelu_apprx_tanh": Op("gelu_apprx_tanh", _f32(_gelu_tanh)),
    "silu": Op("silu", _f32(lambda x: x * _sigmoid(x))),
    "sigmoid": Op("sigmoid", _f32(_sigmoid)),
    "tanh": Op("tanh", _f32(np.tanh)),
    "exp": Op("exp", _f32(np.exp)),
    "log": Op("log", _f32(np.log)),
    "sqrt": Op("sqrt", _f32(np.sqrt)),
    "rsqrt": Op("rsqrt", _f32(lambda x: np.float32(1.0) / np.sqrt(x))),
    "reciprocal": Op("reciprocal", _f32(lambda x: np.float32(1.0) / x)),
    "square": Op("square", _f32(np.square)),
    "abs": Op("abs", _f32(np.abs)),
    "negative": Op("negative", _f32(np.negative)),
}

_NUMPY_NAMES = {"absolute": "abs", "true_divide": "divide"}


def resolve(op, kinds=("binary", "unary")) -> Op:
    """An ``Op`` from an ``Op``, a numpy ufunc or its name."""
    if isinstance(op, Op):
        return op
    name = getattr(op, "__name__", op if isinstance(op, str) else None)
    name = _NUMPY_NAMES.get(name, name)
    for kind in kinds:
        table = BINARY if kind == "binary" else UNARY
        if name in table:
            return table[name]
    raise ValueError(f"operator {op!r} is not one the emulator knows ({sorted(BINARY) + sorted(UNARY)})")
