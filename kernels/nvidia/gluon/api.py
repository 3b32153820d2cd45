"""The Gluon API the Hopper kernels are written against, over the Triton releases they are compiled
and checked under (3.6, the H200 machine's, and 3.9, CI's): the names that differ between the two are
bound here once. Any other release is refused by :func:`ceiling.nvidia.gluon.unsupported_reason` (the
Triton kernels then run) rather than tried; import this module only after that check passed.
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

# TMA global -> shared (completion counted on an mbarrier) and shared -> global: async_load and
# async_store in Triton 3.9, async_copy_global_to_shared and async_copy_shared_to_global in 3.6.
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global


if hasattr(tma, "async_atomic_add"):
    tma_atomic_add = tma.async_atomic_add
else:
    from triton._C.libtriton import ir as _ir
    from triton.experimental.gluon.language._core import builtin as _builtin

    @_builtin
    def tma_atomic_add(tensor_desc, coord, src, _semantic=None):
        """Add a shared-memory tile into global memory with a TMA reduction
        (``cp.reduce.async.bulk.tensor.add``). Gluon 3.6 has the operation in its IR builder
        (``create_async_tma_reduce``) but no Python wrapper; this is the one 3.9 ships as
        ``tma.async_atomic_add``."""
        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        _semantic.builder.create_async_tma_reduce(_ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord,
                                                  src.handle)

__all__ = ["TensorDescriptor", "fence_async_shared", "gl", "gluon", "mbarrier", "tma", "tma_atomic_add", "tma_load",
           "tma_store", "warpgroup_mma", "warpgroup_mma_wait"]
