"""Blackwell (B200, GB200: sm_100a; B300: sm_103a) for the tl-level Triton kernels: which compile
target a problem's GPU is, and the config it runs with where no table of that target or device
holds an entry: the Hopper heuristic and the sm_90a table's entries (never an H200 measurement)
fitted to the Blackwell space (:mod:`ceiling.spaces.derive`), which adds tensor memory and the
spills the compiler shows there to Hopper's limits. The Hopper Gluon kernels (wgmma) do not run
here; they refuse these GPUs (:mod:`ceiling.nvidia.gluon.attention`)."""

from __future__ import annotations

from typing import Any

from ceiling import spaces
from ceiling.spaces.derive import derived

HOPPER = "sm_90a"
ARCH_TARGETS = {"sm_100": "sm_100a", "sm_103": "sm_103a"}  # the GPU's architecture -> compile target


def target(problem) -> str:
    """The compile target of ``problem``'s GPU: a Blackwell one, else Hopper's (every other GPU,
    and the interpreter, run the Hopper configs as before)."""
    return ARCH_TARGETS.get(problem.arch or "", HOPPER)


def units(target_name: str, hopper_units: int) -> int:
    """SMs the heuristic sizes its grid for: the target's device (148 on a B200, 160 on a B300)."""
    return int(spaces.target_limits(target_name).get("units", hopper_units))


def config(family: str, problem, heuristic: dict[str, Any], features: dict[str, Any]) -> dict[str, Any]:
    """``heuristic`` on Hopper; on Blackwell, derived from it and the sm_90a table for ``target``."""
    where = target(problem)
    if where == HOPPER:
        return heuristic
    return derived("nvidia", family, HOPPER, where, heuristic, features)
