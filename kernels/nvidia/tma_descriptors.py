"""The tensor descriptors the Hopper Triton launchers build, as functions of the problem: which view of
an operand TMA reads (as it is, its transpose, a contiguous or a row-padded copy), the descriptor's
shape, strides and block, and the rules a descriptor must satisfy (the driver's
``cuTensorMapEncodeTiled`` contract and Triton's i32 descriptor shapes). Every function takes plain
integers, as the launchers call it, or z3 terms, as :mod:`ceiling.verify.tma` calls it to prove the
same decisions legal over a whole shape domain; so the proof is about the code that runs."""

from __future__ import annotations

from dataclasses import dataclass

TMA_ALIGN = 16  # bytes: base address and every global stride but the last
MAX_STRIDE_BYTES = 2 ** 40  # global strides are below 2^40 bytes
MAX_DIM = 2 ** 32  # global dims are at most 2^32 elements
I32_LIMIT = 2 ** 31  # Triton passes a descriptor's shape to the kernel as i32
MAX_BOX = 256  # box dims are at most 256 elements
MAX_RANK = 5
SWIZZLES = (128, 64, 32)  # the NVMMA swizzle widths in bytes, widest first
FRESH = 0  # base address of a fresh allocation: the CUDA caching allocator aligns them to 512 bytes


# ------------------------------------------------------------------ integers or z3 terms


def _concrete(*xs) -> bool:
    return all(isinstance(x, (bool, int)) for x in xs)


def all_(*conds):
    if _concrete(*conds):
        return all(conds)
    import z3

    return z3.And(*conds)


def any_(*conds):
    if _concrete(*conds):
        return any(conds)
    import z3

    return z3.Or(*conds)


def not_(cond):
    if _concrete(cond):
        return not cond
    import z3

    return z3.Not(cond)


def ite(cond, a, b):
    if _concrete(cond):
        return a if cond else b
    import z3

    return z3.If(cond, a, b)


def cdiv(a, b):
    return (a + b - 1) // b if _concrete(a, b) else (a + b - 1) / b


# ------------------------------------------------------------------ operands and descriptors


@dataclass(frozen=True)
class Operand:
    """What TMA sees of a tensor: base address, shape and strides in elements, element bytes."""

    ptr: object
    shape: tuple
    strides: tuple
    item: int

    @classmethod
    def of(cls, t) -> "Operand":
        return cls(t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.element_size())


@dataclass(frozen=True)
class Descriptor:
    """A tensor descriptor as built: base, global shape and strides (elements), block (elements),
    element bytes, and the shared-memory swizzle width in bytes (None: Triton picks it from the block)."""

    name: str
    base: object
    shape: tuple
    strides: tuple
    block: tuple
    item: int
    swizzle: int | None = None


def transposed(x: Operand) -> Operand:
    """``x.mT``: the same storage, last two dims swapped."""
    return Operand(x.ptr, (*x.shape[:-2], x.shape[-1], x.shape[-2]), (*x.strides[:-2], x.strides[-1], x.strides[-2]),
                   x.item)


def is_contiguous(x: Operand):
    """torch's rule: every dim of size > 1 has the row-major stride (size-1 dims are ignored)."""
    conds, expected = [], 1
    for size, stride in reversed(list(zip(x.shape, x.strides))):
        conds.append(any_(size == 1, stride == expected))
        expected = expected * size
    return all_(*conds)


def row_major(shape: tuple, cols_padded=None) -> tuple:
    """Row-major strides of ``shape`` with the last dim's rows ``cols_padded`` long (default: unpadded)."""
    strides, expected = [1], cols_padded if cols_padded is not None else shape[-1]
    for size in reversed(shape[:-1]):
        strides.append(expected)
        expected = expected * size
    return tuple(reversed(strides))


def contiguous(x: Operand) -> Operand:
    """``x.contiguous()``: x itself when torch deems it contiguous, else a fresh row-major copy."""
    fresh = row_major(x.shape)
    return Operand(ite(is_contiguous(x), x.ptr, FRESH), x.shape,
                   tuple(ite(is_contiguous(x), s, f) for s, f in zip(x.strides, fresh)), x.item)


def padded_cols(cols, item: int):
    """Row length of a row-padded copy: ``cols`` rounded up so each row starts on 16 bytes."""
    per_row = TMA_ALIGN // item
    return cdiv(cols, per_row) * per_row


def padded(x: Operand) -> Operand:
    """A fresh copy of x whose rows start on 16-byte boundaries (the launchers' ``_pad_rows``)."""
    return Operand(FRESH, x.shape, row_major(x.shape, padded_cols(x.shape[-1], x.item)), x.item)


def tma_ready(x: Operand):
    """Whether a descriptor can read ``x`` as it is: 16-byte aligned base, unit last stride, every
    other stride a multiple of 16 bytes and below 2^40 bytes (a size-1 dim's stride too: torch
    leaves it arbitrary, and the driver checks it all the same)."""
    outer = x.strides[:-1]
    return all_(x.ptr % TMA_ALIGN == 0, x.strides[-1] == 1,
                *[(s * x.item) % TMA_ALIGN == 0 for s in outer],
                *[s * x.item < MAX_STRIDE_BYTES for s in outer], *[s >= 0 for s in outer])


def over(name: str, x: Operand, block, swizzle: int | None = None) -> Descriptor:
    """``TensorDescriptor.from_tensor`` over x with ``block``."""
    return Descriptor(name, x.ptr, tuple(x.shape), tuple(x.strides), tuple(block), x.item, swizzle)


# ------------------------------------------------------------------ the GEMM launchers' decisions


def choose(cond, a: Operand, b: Operand) -> Operand:
    """a where ``cond`` holds, else b (same shape)."""
    return Operand(ite(cond, a.ptr, b.ptr), a.shape, tuple(ite(cond, p, q) for p, q in zip(a.strides, b.strides)),
                   a.item)


def keeps_layout(x: Operand):
    """A GEMM operand TMA reads as it is: unit last stride, rows that do not overlap."""
    return all_(x.strides[-1] == 1, any_(x.shape[-2] == 1, x.strides[-2] >= x.shape[-1]))


def transposable(x: Operand):
    """A GEMM operand TMA reads through its transpose (unit stride down the rows)."""
    return x.strides[-2] == 1


def gemm_view(x: Operand) -> list[tuple[object, Operand, bool]]:
    """The views TMA may read of a GEMM operand (``ceiling.nvidia.gemm._tma_storage``), each with
    the condition under which the launcher takes it and whether it is the transpose."""
    keep = keeps_layout(x)
    trans = all_(not_(keep), transposable(x))
    copy = all_(not_(keep), not_(transposable(x)))
    return [(keep, x, False), (trans, transposed(x), True), (copy, contiguous(x), False)]


def strided_k(x: Operand):
    """An FP8 (rows, K) operand whose K is strided: copied (K = 1 has no K stride to speak of)."""
    return all_(x.strides[1] != 1, x.shape[1] > 1)


def overlapping_rows(x: Operand):
    """An FP8 (rows, K) operand whose rows overlap: copied."""
    return all_(x.shape[0] > 1, x.strides[0] < x.shape[1])


def fp8_view(x: Operand) -> list[tuple[object, Operand, bool]]:
    """The FP8 GEMM's K-major view of a (rows, K) operand (``ceiling.nvidia.gemm_fp8._k_major``)."""
    y = choose(strided_k(x), contiguous(x), x)
    return [(True, choose(overlapping_rows(y), contiguous(y), y), False)]


def needs_copy_for_tma(x: Operand):
    """Whether the launcher replaces view ``x`` by a row-padded copy before building its descriptor."""
    return not_(tma_ready(x))


def ready_view(x: Operand) -> list[tuple[object, Operand]]:
    """(condition, the view the descriptor is built on): x when ready, else its row-padded copy."""
    return [(tma_ready(x), x), (needs_copy_for_tma(x), padded(x))]


def gemm_too_large(batch, m, n, k):
    """The first dim of a GEMM's descriptors that Triton's i32 descriptor shapes cannot hold, as
    (argument, dim name, value), or None: M and K (a), N (b), the batch."""
    for arg, name, d in (("a", "M", m), ("a", "K", k), ("b", "N", n), ("a", "batch", batch)):
        if d >= I32_LIMIT:
            return arg, name, d
    return None


def gemm_fits(batch, m, n, k):
    """Symbolic twin of :func:`gemm_too_large`: every dim below 2^31."""
    return all_(*[d < I32_LIMIT for d in (batch, m, n, k)])


def gemm_blocks(bm: int, bn: int, bk: int, a_trans: bool, b_trans: bool, batched: bool, c_cols: int):
    """Blocks of A, B and C descriptors of the persistent and stream-K GEMMs."""
    lead = [1] if batched else []
    a = lead + ([bk, bm] if a_trans else [bm, bk])
    b = lead + ([bn, bk] if b_trans else [bk, bn])
    return a, b, lead + [bm, c_cols]


def splitk_partials(split_k: int, m, n, bm: int, bn: int) -> Descriptor:
    """The split-K partial planes: float32 (split_k * m, n) rows padded to 16 bytes, read as (split_k, m, n)."""
    row = padded_cols(n, 4)
    return Descriptor("c_partials", FRESH, (split_k, m, n), (m * row, row, 1), (1, bm, bn), 4)


def attention_rows(name: str, batch, seq, heads, head_dim_pad, item: int, block_rows: int) -> Descriptor:
    """The Triton attention's descriptor over a contiguous (batch, seq, heads, head_dim_pad) tensor
    viewed as (batch * seq, heads * head_dim_pad), blocks of ``block_rows`` rows of one head."""
    shape = (batch * seq, heads * head_dim_pad)
    return Descriptor(name, FRESH, shape, row_major(shape), (block_rows, head_dim_pad), item)


def attention_fits(batch, q_len, k_len, heads, head_dim_pad):
    """Whether the Triton attention's descriptors hold the problem (dims below 2^31)."""
    return all_(batch * q_len < I32_LIMIT, batch * k_len < I32_LIMIT, heads * head_dim_pad < I32_LIMIT)


# ------------------------------------------------------------------ legality


def swizzle_for(block: tuple, item: int) -> int:
    """Triton's default NVMMA swizzle for ``block``: the widest of 128/64/32 bytes that divides the
    block's inner row, else none."""
    inner = block[-1] * item
    return next((s for s in SWIZZLES if inner % s == 0), 0)


def box(d: Descriptor) -> tuple[tuple, int]:
    """(box dims, swizzle bytes) Triton encodes for ``d``: the block, with the inner dim cut to the
    swizzle width and the others to 256 (Triton issues several copies for a larger block)."""
    swizzle = d.swizzle if d.swizzle is not None else swizzle_for(d.block, d.item)
    inner = min(d.block[-1], swizzle // d.item) if swizzle else d.block[-1]
    return (*[min(b, MAX_BOX) for b in d.block[:-1]], inner), swizzle


def box_rules(d: Descriptor) -> list[tuple[str, bool]]:
    """The descriptor rules that depend only on the block (concrete per config)."""
    dims, swizzle = box(d)
    inner_bytes = dims[-1] * d.item
    return [
        ("rank is 1 to 5", 1 <= len(d.shape) <= MAX_RANK and len(d.block) == len(d.shape) == len(d.strides)),
        ("box dims are 1 to 256", all(1 <= b <= MAX_BOX for b in dims)),
        ("block dims are powers of two", all(b > 0 and b & (b - 1) == 0 for b in d.block)),
        ("inner box bytes are a multiple of 16", inner_bytes % TMA_ALIGN == 0),
        ("inner box bytes fit the swizzle width", swizzle == 0 or inner_bytes <= swizzle),
    ]


def global_rules(d: Descriptor) -> list[tuple[str, object]]:
    """The descriptor rules over its base, shape and strides (integers or z3 terms)."""
    rules = [("base is 16-byte aligned", d.base % TMA_ALIGN == 0),
             ("last stride is 1", d.strides[-1] == 1)]
    for i, s in enumerate(d.strides[:-1]):
        rules.append((f"stride {i} is a multiple of 16 bytes", (s * d.item) % TMA_ALIGN == 0))
        rules.append((f"stride {i} is in [0, 2^40) bytes", all_(s >= 0, s * d.item < MAX_STRIDE_BYTES)))
    for i, n in enumerate(d.shape):
        rules.append((f"dim {i} is in [1, 2^32]", all_(n >= 1, n <= MAX_DIM)))
        rules.append((f"dim {i} fits Triton's i32 descriptor shape", n < I32_LIMIT))
    return rules


def violations(d: Descriptor) -> list[str]:
    """The rules a concrete descriptor breaks (empty when legal)."""
    return [name for name, ok in box_rules(d) + global_rules(d) if not ok]
