"""Warp-specialized Hopper kernels in Gluon (``triton.experimental.gluon``).

* :mod:`~ceiling.nvidia.gluon.attention_fwd`, :mod:`~ceiling.nvidia.gluon.attention_bwd`: flash
  attention forward and backward in FlashAttention-3's design (a TMA producer warp, two wgmma
  consumer warpgroups, register reallocation), beside the Triton kernels of
  :mod:`ceiling.triton.attention` (chosen by :mod:`ceiling.nvidia.attention`);
* :mod:`~ceiling.nvidia.gluon.attention`: their host side (descriptors, grids, configs, which
  problems they take) and their compile specs;
* :mod:`~ceiling.nvidia.gluon.sass_facts`: what their SASS must show (tensor-core instructions in
  both consumer partitions, TMA loads, register reallocation, no spills);
* :mod:`~ceiling.nvidia.gluon.static_check`: every shipped config compiled and checked;
* :mod:`~ceiling.nvidia.gluon.pinned_triton`: running those checks under the device's Triton 3.6
  from an environment with a newer Triton.

The device sweep that tunes their table lives a layer up, in :mod:`ceiling.tuning.attention.gluon`.

Gluon has no interpreter: on a CPU the kernels are compiled for sm_90a and their SASS is checked;
their results are checked on a device against the interpreted Triton kernels' oracle.
"""

from __future__ import annotations

# Releases the kernels compile under, checked in CI (3.6: the H200 machine's; 3.9: CI's own).
SUPPORTED_TRITON = ("3.6", "3.9")


def triton_release(version: str) -> str:
    """'3.6' for '3.6.0' or '3.6.1+git...'."""
    return ".".join(version.split("+")[0].split(".")[:2])


def unsupported_reason(version: str | None = None) -> str | None:
    """Why the Gluon kernels cannot be built with this Triton (or ``version``), or None when they can."""
    if version is None:
        try:
            import triton
        except ImportError as exc:
            return f"Triton is not installed ({exc})"
        version = triton.__version__
    if triton_release(version) in SUPPORTED_TRITON:
        return None
    wanted = " or ".join(f"{v}.x" for v in SUPPORTED_TRITON)
    return f"the Gluon kernels need Triton {wanted}; installed {version}"
