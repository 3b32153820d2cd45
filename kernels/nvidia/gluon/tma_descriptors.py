"""The Gluon attention's tensor descriptors as functions of the problem: (batch, seq, heads * head_dim)
row blocks over contiguous 16-byte-aligned tensors, float32 vectors for the backward's statistics, and
the problem sizes the launcher refuses because a descriptor could not describe them (Triton passes a
descriptor's shape to the kernel as i32). Integers as the launcher calls them, z3 terms as
:mod:`ceiling.verify.tma` proves them legal over the op's domain."""

from __future__ import annotations

from ceiling.nvidia.tma_descriptors import FRESH, I32_LIMIT, Descriptor, any_, row_major


def rows(name: str, batch, seq, heads, head_dim, item: int, block_rows: int, swizzle: int,
         cols: int | None = None, base=FRESH) -> Descriptor:
    """A descriptor over a contiguous (batch, seq, heads, head_dim) tensor viewed as
    (batch, seq, heads * head_dim), blocks of ``block_rows`` positions of one head."""
    shape = (batch, seq, heads * head_dim)
    return Descriptor(name, base, shape, row_major(shape), (1, block_rows, cols or head_dim), item, swizzle)


def vector(name: str, numel, block_rows: int, swizzle: int, base=FRESH) -> Descriptor:
    """A descriptor over a contiguous float32 tensor read as one flat vector."""
    return Descriptor(name, base, (numel,), (1,), (block_rows,), 4, swizzle)


def too_large(batch, q_len, k_len, heads, head_dim, direction: str):
    """Whether a descriptor dim of the ``direction`` ("fwd"/"bwd") kernel would not fit i32: the batch,
    either sequence, heads * head_dim (the row), or (backward) the flat batch * heads * q_len statistics."""
    dims = [batch, q_len, k_len, heads * head_dim]
    if direction == "bwd":
        dims.append(batch * heads * q_len)
    return any_(*[d >= I32_LIMIT for d in dims])

