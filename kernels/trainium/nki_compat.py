"""The NKI modules a kernel imports (``from ceiling.trainium.nki_compat import nki, nl, nisa``): the
real ones when the Neuron toolchain is installed, the emulator's otherwise, under the same names;
``EMULATED`` says which. The PyPI ``nki`` distribution is an empty placeholder, so the real package
counts only when it has ``nki.jit``, ``nki.language`` and ``nki.isa``.
"""

from __future__ import annotations

import types


def _real():
    try:
        import nki as real_nki
        import nki.isa as real_nisa
        import nki.language as real_nl
    except ImportError:
        return None
    if not hasattr(real_nki, "jit") or not hasattr(real_nisa, "nc_matmul"):
        return None
    return real_nki, real_nl, real_nisa


_found = _real()
EMULATED = _found is None

if _found is not None:
    nki, nl, nisa = _found
else:
    from ceiling.trainium import emulator as _emulator

    nl = _emulator.language
    nisa = _emulator.isa
    nki = types.SimpleNamespace(jit=_emulator.jit, language=nl, isa=nisa, emulate=_emulator.emulate)

__all__ = ["EMULATED", "nki", "nl", "nisa"]
