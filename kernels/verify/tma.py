"""The ``tma`` property: every tensor descriptor a Hopper launcher builds is legal over the op's whole
domain. Each launcher's choice of view (as it is, transposed, copied, row-padded) and its descriptor
come from :mod:`ceiling.nvidia.tma_descriptors` / :mod:`ceiling.nvidia.gluon.tma_descriptors`, the
functions the launchers call; here they are called on z3 terms (shapes, strides and base address of
every input, under the launcher's own path conditions and refusals) and each rule that depends on the
problem is proved for all of it, while the rules that depend only on the block are checked for every
block of the config space. A rule that fails gives the problem (shapes, strides, base) and config."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from ceiling.nvidia import tma_descriptors as td
from ceiling.verify.result import Result, Status

PROPERTY = "tma"
# The domain: every tensor, and every copy a launcher makes of it, fits in one device's memory.
# 2^38 bytes (256 GiB) is above any Hopper or Blackwell part (H200: 141 GB).
MEMORY_BYTES = 2 ** 38
TIMEOUT_MS = 20_000
ITEM = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}


@dataclass
class Case:
    """One launcher path: its descriptors under a path condition, the domain, the variables to report."""

    kernel: str
    constexprs: dict
    descriptors: list  # [(path condition, Descriptor)]
    domain: list = field(default_factory=list)
    variables: dict = field(default_factory=dict)  # name -> z3 term
    blocks: list = field(default_factory=list)  # [(config, [Descriptor])]: box rules, concrete


# ------------------------------------------------------------------ symbolic problems


def _z3():
    import z3

    return z3


def operand(name: str, rank: int, item: int, case: Case, base=None) -> td.Operand:
    """A symbolic input tensor: any shape of at least one element, any non-negative strides and base,
    whose storage and whose logical size fit in memory."""
    z3 = _z3()
    shape = tuple(z3.Int(f"{name}.shape{i}") for i in range(rank))
    strides = tuple(z3.Int(f"{name}.stride{i}") for i in range(rank))
    ptr = z3.Int(f"{name}.ptr") if base is None else base
    limit = MEMORY_BYTES // item
    extent = sum(z3.If(n > 1, (n - 1) * s, 0) for n, s in zip(shape, strides))
    numel = 1
    for n in shape:
        numel = numel * n
    case.domain += [*[n >= 1 for n in shape], *[n <= limit for n in shape], *[s >= 0 for s in strides],
                    extent < limit, numel <= limit]
    if base is None:
        case.domain += [ptr >= 0, ptr < 2 ** 64]
        case.variables[f"{name}.ptr"] = ptr
    case.variables.update({str(v): v for v in shape + strides})
    return td.Operand(ptr, shape, strides, item)


def _fresh(name: str, shape: tuple, item: int) -> td.Operand:
    """A fresh contiguous allocation (the launcher's own output)."""
    return td.Operand(td.FRESH, shape, td.row_major(shape), item)


def _views(kind, x: td.Operand):
    """(condition, view, transposed) of every path the launcher can take to its descriptor's view."""
    choices = td.gemm_view(x) if kind == "gemm" else td.fp8_view(x)
    for cond, view, trans in choices:
        for ready, final in td.ready_view(view):
            yield td.all_(cond, ready), final, trans


# ------------------------------------------------------------------ the launchers


def _space_blocks(space: str) -> list[dict]:
    from ceiling import spaces

    flat = spaces.get(space, "sm_90a").flat()
    keys = [k for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "EPILOGUE_SUBTILE") if k in flat]
    return [dict(zip(keys, values)) for values in itertools.product(*[flat[k].values for k in keys])]


def gemm_cases(dtype: str = "bfloat16", out_dtype: str | None = None) -> list[Case]:
    """The persistent/split-K/stream-K GEMM (``ceiling.nvidia.gemm.forward``): A and B as the
    launcher views them (2-D and batched), C (or the split-K partial planes) as it allocates it."""
    z3 = _z3()
    item, out_item = ITEM[dtype], ITEM[out_dtype or dtype]
    cases = []
    for batched in (False, True):
        rank = 3 if batched else 2
        case = Case("nvidia.gemm", {"dtype": dtype, "batched": batched}, [])
        a, b = operand("a", rank, item, case), operand("b", rank, item, case)
        if batched:
            case.domain += [a.shape[0] == b.shape[0]]
        case.domain += [a.shape[-1] == b.shape[-2]]
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        out_shape = (a.shape[0], m, n) if batched else (m, n)
        case.domain += [td.gemm_fits(a.shape[0] if batched else 1, m, n, k)]  # else the launcher refuses
        out = _fresh("c", out_shape, out_item)
        case.domain += [m * n <= MEMORY_BYTES // out_item]
        for role, x in (("a", a), ("b", b)):
            for cond, view, trans in _views("gemm", x):
                case.descriptors.append((cond, td.over(role, view, (1,) * rank)))
        for ready, final in td.ready_view(out):
            case.descriptors.append((ready, td.over("c", final, (1,) * rank)))
        if not batched:
            split = z3.Int("split_k")
            case.domain += [split >= 2, split <= 8, split * m * n <= MEMORY_BYTES // 4]
            case.variables["split_k"] = split
            case.descriptors.append((True, td.splitk_partials(split, m, n, 1, 1)))
        for cfg in _space_blocks("gemm"):
            descs = []
            for a_trans, b_trans in itertools.product((False, True), repeat=2):
                bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
                c_cols = bn // 2 if cfg["EPILOGUE_SUBTILE"] else bn
                ab, bb, cb = td.gemm_blocks(bm, bn, bk, a_trans, b_trans, batched, c_cols)
                descs += [td.Descriptor("a", 0, tuple(ab), (0,) * rank, tuple(ab), item),
                          td.Descriptor("b", 0, tuple(bb), (0,) * rank, tuple(bb), item),
                          td.Descriptor("c", 0, tuple(cb), (0,) * rank, tuple(cb), out_item)]
                if not batched:
                    descs.append(td.Descriptor("c_partials", 0, (1, bm, bn), (0, 0, 1), (1, bm, bn), 4))
            case.blocks.append(({**cfg, "A_TRANS/B_TRANS": "all"}, descs))
        cases.append(case)
    return cases


def fp8_cases(out_dtype: str = "bfloat16") -> list[Case]:
    """The FP8 GEMM (``ceiling.nvidia.gemm_fp8.forward``): A and B^T K-major, C as allocated."""
    from ceiling.nvidia.gemm_fp8 import fp8_blocks

    case = Case("nvidia.gemm_fp8", {"dtype": "float8_e4m3fn", "out_dtype": out_dtype}, [])
    a, b = operand("a", 2, 1, case), operand("b", 2, 1, case)
    case.domain += [a.shape[1] == b.shape[0]]
    m, n = a.shape[0], b.shape[1]
    case.domain += [td.gemm_fits(1, m, n, a.shape[1])]  # else the launcher refuses
    out_item = ITEM[out_dtype]
    case.domain += [m * n <= MEMORY_BYTES // out_item]
    for role, x in (("a", a), ("b^T", td.transposed(b))):
        for cond, view, _ in _views("fp8", x):
            case.descriptors.append((cond, td.over(role, view, (1, 1))))
    for ready, final in td.ready_view(_fresh("c", (m, n), out_item)):
        case.descriptors.append((ready, td.over("c", final, (1, 1))))
    for cfg in _space_blocks("gemm_fp8"):
        ab, bb, cb = fp8_blocks(cfg)
        case.blocks.append((cfg, [td.Descriptor("a", 0, tuple(ab), (0, 1), tuple(ab), 1),
                                  td.Descriptor("b^T", 0, tuple(bb), (0, 1), tuple(bb), 1),
                                  td.Descriptor("c", 0, tuple(cb), (0, 1), tuple(cb), out_item)]))
    return [case]


def _attention_problem(case: Case, head_dims: list[int], item: int):
    z3 = _z3()
    names = ("batch", "q_len", "k_len", "heads", "kv_heads", "head_dim")
    batch, q_len, k_len, heads, kv_heads, head_dim = (z3.Int(n) for n in names)
    limit = MEMORY_BYTES // item
    case.domain += [batch >= 1, q_len >= 1, k_len >= 1, kv_heads >= 1, heads >= kv_heads, heads % kv_heads == 0,
                    z3.Or(*[head_dim == d for d in head_dims]),
                    batch <= limit, q_len <= limit, k_len <= limit, heads <= limit,
                    batch * q_len * heads * head_dim <= limit, batch * k_len * kv_heads * head_dim <= limit]
    case.variables.update({n: v for n, v in zip(names, (batch, q_len, k_len, heads, kv_heads, head_dim))})
    return batch, q_len, k_len, heads, kv_heads, head_dim


def triton_attention_cases(dtype: str = "bfloat16") -> list[Case]:
    """The Triton attention's TMA path (``ceiling.nvidia.attention``): taken when ``uses_tma`` says
    so, over (batch * seq, heads * head_dim_pad) views of the padded, contiguous inputs."""
    from ceiling.triton.attention import head_dim_pad

    item = ITEM[dtype]
    cases = []
    for pad in sorted({head_dim_pad(d) for d in range(1, 257)}):
        case = Case("triton.attention", {"dtype": dtype, "head_dim_pad": pad}, [])
        batch, q_len, k_len, heads, kv_heads, _ = _attention_problem(case, [pad], item)
        takes_tma = td.attention_fits(batch, q_len, k_len, heads, pad)
        for name, seq, h in (("q", q_len, heads), ("o", q_len, heads), ("do", q_len, heads),
                             ("k", k_len, kv_heads), ("v", k_len, kv_heads)):
            case.descriptors.append((takes_tma, td.attention_rows(name, batch, seq, h, pad, item, 1)))
        from ceiling import spaces

        flat = spaces.get("attention", "sm_90a").flat()
        rows = sorted({v for k, p in flat.items() if k.endswith(("block_m", "block_n")) for v in p.values})
        case.blocks = [({"block_rows": r}, [td.attention_rows("q", 1, 1, 1, pad, item, r)]) for r in rows]
        cases.append(case)
    return cases


def gluon_attention_cases(dtype: str = "bfloat16") -> list[Case]:
    """The Gluon forward and backward (``ceiling.nvidia.gluon.attention``): taken when ``uncovered``
    refuses nothing; Q/K/V/O/dO row blocks, dQ float32 pieces, the statistics' vectors."""
    from ceiling import spaces
    from ceiling.nvidia.gluon import tma_descriptors as gtd
    from ceiling.nvidia.gluon.attention import BLOCK_M, BWD_BLOCK_N, DQ_PIECE, head_dims, smem_layout

    item = ITEM[dtype]
    flat = spaces.get("attention_gluon", "sm_90a").flat()
    cases = []
    for direction in ("fwd", "bwd"):
        dims = head_dims(direction)
        case = Case(f"gluon.attention_{direction}", {"dtype": dtype, "head_dims": dims}, [])
        batch, q_len, k_len, heads, kv_heads, head_dim = _attention_problem(case, dims, item)
        runs = _z3().Not(gtd.too_large(batch, q_len, k_len, heads, head_dim, direction))
        rows = [BLOCK_M // 2] if direction == "fwd" else list(flat["bwd.block_m"].values)
        key_rows = list(flat["fwd.block_n"].values) if direction == "fwd" else [BWD_BLOCK_N]
        blocks = []
        for d in dims:
            for r, kr in itertools.product(rows, key_rows):
                sw = smem_layout([1, r, d], dtype).swizzle_byte_width
                ksw = smem_layout([1, kr, d], dtype).swizzle_byte_width
                descs = [gtd.rows("q", 1, 1, 1, d, item, r, sw), gtd.rows("k", 1, 1, 1, d, item, kr, ksw)]
                if direction == "bwd":
                    dq_swizzle = smem_layout([1, r, DQ_PIECE], "float32").swizzle_byte_width
                    descs += [gtd.rows("dq", 1, 1, 1, d, 4, r, dq_swizzle, DQ_PIECE),
                              gtd.vector("lse", 1, r, smem_layout([r], "float32").swizzle_byte_width)]
                blocks.append(({"head_dim": d, "rows": r, "key_rows": kr}, descs))
        case.blocks = blocks
        sw = 128  # the global rules do not depend on the swizzle
        for name, seq, h, it in (("q", q_len, heads, item), ("o", q_len, heads, item), ("k", k_len, kv_heads, item),
                                 ("v", k_len, kv_heads, item)):
            case.descriptors.append((runs, gtd.rows(name, batch, seq, h, head_dim, it, 1, sw)))
        if direction == "bwd":
            case.descriptors += [(runs, gtd.rows("do", batch, q_len, heads, head_dim, item, 1, sw)),
                                 (runs, gtd.rows("dq", batch, q_len, heads, head_dim, 4, 1, sw, 1)),
                                 (runs, gtd.vector("lse", batch * heads * q_len, 1, 0)),
                                 (runs, gtd.vector("delta", batch * heads * q_len, 1, 0))]
        cases.append(case)
    return cases


def planted_cases() -> list[Case]:
    """A launcher that views a (rows, K) bf16 operand's storage as it is (stride K, not padded: a
    stride that is not a multiple of 16 bytes for most K), and its twin that pads the rows."""
    cases = []
    for name, pad in (("planted.rows_unpadded", False), ("planted.rows_padded", True)):
        case = Case(name, {"dtype": "bfloat16"}, [])
        x = operand("x", 2, 2, case, base=td.FRESH)
        case.domain += [x.strides[1] == 1, x.strides[0] == x.shape[1], *[n < td.I32_LIMIT for n in x.shape]]
        view = td.padded(x) if pad else x
        case.descriptors.append((True, td.over("x", view, (64, 64))))
        case.blocks = [({"BLOCK": 64}, [td.over("x", view, (64, 64))])]
        cases.append(case)
    return cases


# ------------------------------------------------------------------ the model against the compiler

SWIZZLE_BYTES = {0: 0, 1: 32, 2: 64, 3: 128}  # Triton's tensordesc metadata: CUtensorMapSwizzle


def compiled_boxes(spec) -> list[tuple[list, int]]:
    """(box dims, swizzle bytes) Triton encodes for each tensor-descriptor argument of ``spec`` (a
    ``ceiling.isa.CompileSpec`` for sm_90a), read from the compiler's own metadata after the TTGIR
    passes (no GPU, no binary): what :func:`ceiling.nvidia.tma_descriptors.box` must agree with."""
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource, make_backend

    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    src = ASTSource(spec.fn, spec.signature, spec.constexprs)
    options = backend.parse_options(dict(spec.options, **src.parse_options()))
    ctx = ir.context()
    ir.load_dialects(ctx)
    backend.load_dialects(ctx)
    stages: dict = {}
    backend.add_stages(stages, options, src.language)
    module = src.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(), ctx)
    metadata = {"hash": "", "target": target, **options.__dict__}
    names = list(stages)
    for stage in names[names.index(src.ext):names.index("ttgir") + 1]:
        module = stages[stage](module, metadata)
    return [(list(m["block_size"]), SWIZZLE_BYTES[m["swizzle"]]) for m in metadata["tensordesc_meta"]]


# ------------------------------------------------------------------ proving


def _value(model, term):
    z3 = _z3()
    if isinstance(term, (bool, int)):
        return term
    v = model.eval(term, model_completion=True)
    return v.as_long() if z3.is_int_value(v) else str(v)


def prove(case: Case, timeout_ms: int = TIMEOUT_MS) -> Result:
    """Every rule of every descriptor of ``case``: proved, or the first counterexample, or unknown."""
    z3 = _z3()
    start = time.perf_counter()

    def result(status, counterexample=None, reason=None):
        return Result(case.kernel, PROPERTY, status, case.constexprs, time.perf_counter() - start,
                      counterexample, reason)

    for config, descs in case.blocks:
        for d in descs:
            broken = [name for name, ok in td.box_rules(d) if not ok]
            if broken:
                return result(Status.COUNTEREXAMPLE, {"descriptor": d.name, "rule": broken[0], "config": config,
                                                      "block": list(d.block), "box": list(td.box(d)[0])})
    unknown = None
    for cond, d in case.descriptors:
        for name, rule in td.global_rules(d):
            if isinstance(rule, bool) and rule:
                continue
            s = z3.Solver()
            s.set("timeout", timeout_ms)
            s.add(*case.domain, cond, z3.Not(rule))
            answer = s.check()
            if answer == z3.sat:
                m = s.model()
                problem = {k: _value(m, v) for k, v in sorted(case.variables.items())}
                return result(Status.COUNTEREXAMPLE, {
                    "descriptor": d.name, "rule": name, "problem": problem,
                    "built": {"base": _value(m, d.base), "shape": [_value(m, v) for v in d.shape],
                              "strides": [_value(m, v) for v in d.strides], "element_bytes": d.item}})
            if answer == z3.unknown and unknown is None:
                unknown = f"{d.name}: {name}: solver {s.reason_unknown()}"
    if unknown:
        return result(Status.UNKNOWN, reason=unknown)
    return result(Status.PROVED)


def shipped_cases() -> list[Case]:
    """Every launcher that builds descriptors, per dtype it takes."""
    return [*gemm_cases("bfloat16"), *gemm_cases("float16"), *gemm_cases("float32"), *fp8_cases("bfloat16"),
            *fp8_cases("float32"), *triton_attention_cases("bfloat16"), *gluon_attention_cases("bfloat16")]


def verify_all(targets=("sm_90a",)) -> list[Result]:
    """The ``tma`` results of every shipped launcher (descriptors exist on sm_90a only; other targets
    have none, so they add nothing)."""
    if "sm_90a" not in targets:
        return []
    return [prove(c) for c in shipped_cases()]
