"""Where the tests get the model code that ``ceiling.triangle`` replaces: Boltz and OpenFold.

* Boltz: the real package, installed without its dependencies (its layers import with
  only torch and einops): ``pip install --no-deps boltz==2.2.1 einops``. Without it a
  test that needs it is skipped with that command; where ``CEILING_REQUIRE_BOLTZ=1``
  (CI sets it) it fails with it instead, so CI never passes by skipping.
* OpenFold: the real package when one is installed, else the ports in
  ``tests/ports/openfold`` under OpenFold's own module paths (OpenFold cannot be
  pip-installed without its CUDA extensions).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest

BOLTZ_INSTALL = "pip install --no-deps boltz==2.2.1 einops"
REQUIRE_BOLTZ = "CEILING_REQUIRE_BOLTZ"
PORTS = Path(__file__).resolve().parent / "ports"


def boltz_missing() -> str | None:
    """Why Boltz's layers cannot be imported here, or None."""
    try:
        importlib.import_module("boltz.model.layers.pairformer")
    except ImportError as exc:
        return f"Boltz is not installed ({exc.__class__.__name__}: {exc}); install it without its dependencies: " \
               f"{BOLTZ_INSTALL}"
    return None


def require_boltz() -> None:
    """Skip (locally) or fail (``CEILING_REQUIRE_BOLTZ=1``) with the install command when Boltz is missing."""
    why = boltz_missing()
    if why is None:
        return
    if os.environ.get(REQUIRE_BOLTZ) == "1":
        pytest.fail(f"{why} ({REQUIRE_BOLTZ}=1: a missing Boltz is a failure here)", pytrace=False)
    pytest.skip(why)


def openfold(module: str):
    """``openfold.<module>``: the installed OpenFold, else the port of it in tests/ports."""
    if importlib.util.find_spec("openfold") is None and str(PORTS) not in sys.path:
        sys.path.insert(0, str(PORTS))
    return importlib.import_module(f"openfold.{module}")
