"""Warp-specialized Hopper kernels in Gluon (``triton.experimental.gluon``): flash attention forward and
backward in FlashAttention-3's design (``attention_fwd``, ``attention_bwd``), their host side
(``attention``), the API over the Triton releases they support (``api``) and their static check
(``sass_facts``, ``static_check``, ``pinned_triton``). Gluon has no interpreter, so on a CPU they are
compiled for sm_90a and their SASS is checked; ``docs/attention.md`` describes them.
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
