"""The Gluon API the Hopper kernels are written against, over the Triton releases they support.

Gluon (``triton.experimental.gluon``) is an experimental API that changes between Triton
releases. The kernels here are compiled and checked under **Triton 3.6** (the H200 machine's
version) and **Triton 3.9** (CI's version); between those two releases the only change they
meet is the name of the TMA copies (``tma.async_copy_global_to_shared`` /
``async_copy_shared_to_global`` in 3.6, ``tma.async_load`` / ``async_store`` in 3.9), bound
here once as :data:`tma_load` and :data:`tma_store`. Any other release is refused by
:func:`kernels.nvidia.gluon.unsupported_reason` (the Triton kernels then run) rather than tried;
import this module only after that check passed.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# TMA global -> shared (completion counted on an mbarrier) and shared -> global.
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global

__all__ = ["TensorDescriptor", "fence_async_shared", "gl", "gluon", "mbarrier", "tma", "tma_load", "tma_store",
           "warpgroup_mma", "warpgroup_mma_wait"]
