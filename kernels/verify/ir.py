"""The TTIR of a ``@triton.jit`` kernel for a GPU target, compiled on a CPU and read through Triton's MLIR
bindings into a tree of :class:`Op` (name, operands, results, regions, attributes). The compile runs
``triton.compile``'s own front end and stages (``ASTSource.make_ir`` then the backend's ``ttir`` stage)
and stops there: no GPU, no assembler. Values are linked by the bindings' ``id()``; the only text read is
each dense integer constant's literal, which the bindings do not expose. Integer arguments are
specialised the way Triton's launcher does: a value of 1 becomes a constant, a multiple of 16 carries
``tt.divisibility``, and the argument is ``i32`` or ``i64`` by its range."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field

from ceiling.verify.errors import ContractError

# The two GPU targets of the project's kernels: Hopper (sm_90a) and CDNA3 (MI300, gfx942).
TARGETS = {"sm_90a": ("cuda", 90, 32), "gfx942": ("hip", "gfx942", 64)}
INT32_MAX = 2**31 - 1

_DTYPES = {  # torch dtype name -> (Triton signature type, bytes)
    "float32": ("fp32", 4), "float16": ("fp16", 2), "bfloat16": ("bf16", 2), "float64": ("fp64", 8),
    "float8_e4m3fn": ("fp8e4nv", 1), "float8_e5m2": ("fp8e5", 1), "float8_e4m3fnuz": ("fp8e4b8", 1),
    "float8_e5m2fnuz": ("fp8e5b16", 1), "int8": ("i8", 1), "uint8": ("u8", 1), "int16": ("i16", 2),
    "int32": ("i32", 4), "int64": ("i64", 8), "bool": ("i1", 1),
}


def dtype_info(name: str, key: str) -> tuple[str, int]:
    """(Triton pointee type, element bytes) of a torch dtype name; an unknown name is an error naming ``key``."""
    try:
        return _DTYPES[name]
    except KeyError:
        raise ContractError(f"{key}: unknown dtype {name!r} (expected one of {', '.join(_DTYPES)})") from None


@dataclass
class Op:
    """One operation: its name, operand and result value ids, result types, attributes it has, regions
    (each a list of blocks: (argument value ids, argument types, ops))."""
    name: str
    operands: list[int]
    results: list[int]
    result_types: list[str]
    attrs: dict = field(default_factory=dict)
    regions: list = field(default_factory=list)
    loc: str = ""


@dataclass
class Kernel:
    """A compiled kernel's entry function: its argument names, ids and types, and its body."""
    name: str
    target: str
    arg_names: list[str]
    arg_ids: list[int]
    arg_types: list[str]
    body: list[Op]
    ttir: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.ttir.encode()).hexdigest()


_INT_ATTRS = {"tt.make_range": ("start", "end"), "tt.expand_dims": ("axis",), "arith.cmpi": ("predicate",),
              "tt.get_program_id": ("axis",), "tt.get_num_programs": ("axis",), "tt.reduce": ("axis",)}
_CONST_RE = re.compile(r"arith\.constant\s+(dense<(.*?)>|[^:]+?)\s*:\s*(\S+)")


def _dense_constants(text: str) -> list[object]:
    """Each ``arith.constant``'s literal in textual order (the walk's order among constants: none has
    regions). A splat integer or boolean gives its value; anything else None."""
    out = []
    for line in text.splitlines():
        m = _CONST_RE.search(line)
        if not m or "arith.constant" not in line.split("=", 1)[-1]:
            continue
        lit = m.group(2) if m.group(2) is not None else m.group(1)
        lit = lit.strip()
        if lit in ("true", "false"):
            out.append(lit == "true")
        elif re.fullmatch(r"-?\d+", lit):
            out.append(int(lit))
        else:
            out.append(None)
    return out


def _tree(module, text: str, target: str) -> Kernel:
    ops = []
    module.walk(ops.append)
    consts = _dense_constants(text)
    const_ops = [o for o in ops if o.get_name() == "arith.constant"]
    if len(consts) != len(const_ops):  # the text and the walk disagree: read no literal rather than a wrong one
        consts = [None] * len(const_ops)
    literal = {id(o): c for o, c in zip(const_ops, consts)}
    blocks: dict[int, list] = {}  # block id -> [block, ops in order]
    for o in ops:
        b = o.get_block()
        if b is not None:
            blocks.setdefault(b.id(), [b, []])[1].append(o)
    by_region: dict[int, list] = {}
    for bid, (b, _) in blocks.items():
        by_region.setdefault(b.get_parent().id(), []).append(bid)

    def convert(o) -> Op:
        name = o.get_name()
        res = [o.get_result(i) for i in range(o.get_num_results())]
        op = Op(name, [o.get_operand(i).id() for i in range(o.get_num_operands())], [r.id() for r in res],
                [str(r.get_type()) for r in res])
        if res:
            op.loc = str(res[0].get_loc())
        for a in _INT_ATTRS.get(name, ()):
            op.attrs[a] = o.get_int_attr(a)
        if name == "arith.constant":
            v = o.get_constant_value()
            op.attrs["value"] = v if v is not None else literal.get(id(o))
        for r in range(o.get_num_regions()):
            region = []
            for bid in by_region.get(o.get_region(r).id(), []):
                b, bops = blocks[bid]
                args = [b.arg(i) for i in range(b.get_num_arguments())]
                region.append(([a.id() for a in args], [str(a.get_type()) for a in args], [convert(x) for x in bops]))
            op.regions.append(region)
        return op

    funcs = [o for o in ops if o.get_name() == "tt.func"]
    if len(funcs) != 1:
        raise ContractError(f"kernel: expected one function in the compiled module, found {len(funcs)} (noinline calls?)")
    f = convert(funcs[0])
    (arg_ids, arg_types, body), = f.regions[0]
    return Kernel(funcs[0].get_str_attr("sym_name"), target, [], arg_ids, arg_types, body, text)


def target_of(name: str):
    from triton.backends.compiler import GPUTarget

    if name not in TARGETS:
        raise ContractError(f"target: unknown {name!r} (expected one of {', '.join(TARGETS)})")
    return GPUTarget(*TARGETS[name])


def compile_ttir(fn, signature: dict, constexprs: dict, divisible: tuple = (), target: str = "sm_90a") -> Kernel:
    """TTIR of ``fn`` (a ``@triton.jit`` function) for ``target``: ``signature`` maps every argument to its
    Triton type (``*fp16``, ``i32``, ``i64``, ``constexpr``), ``constexprs`` the constexpr arguments (and
    integer arguments specialised to 1) to their values, ``divisible`` names the arguments known to be
    multiples of 16 (pointers: 16-byte aligned)."""
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    from triton._C.libtriton import ir
    from triton.compiler import ASTSource
    from triton.compiler.compiler import make_backend

    names = list(fn.arg_names)
    for n in constexprs:
        signature[n] = "constexpr"
    src = ASTSource(fn, signature, {(names.index(n),): v for n, v in constexprs.items()},
                    {(names.index(n),): [["tt.divisibility", 16]] for n in divisible if n not in constexprs})
    tgt = target_of(target)
    backend = make_backend(tgt)
    options = backend.parse_options(dict(src.parse_options()))
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    try:
        module = src.make_ir(tgt, options, backend.get_codegen_implementation(options), backend.get_module_map(),
                             context)
        stages: dict = {}
        backend.add_stages(stages, options, src.language)
        ttir = stages["ttir"](module, {"hash": "verify", "target": tgt, **options.__dict__})
    except Exception as exc:  # the kernel does not compile for this launch: say which, in one line
        first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise ContractError(f"kernel: {fn.__name__} does not compile for {target} with {constexprs} "
                            f"({type(exc).__name__}: {first})") from None
    kernel = _tree(ttir, ttir.str_nodebug(), target)
    # Arguments that became constants are not in the function's signature any more.
    kernel.arg_names = [n for n in names if signature.get(n) != "constexpr"]
    if len(kernel.arg_names) != len(kernel.arg_ids):
        raise ContractError(f"kernel: {len(kernel.arg_ids)} arguments compiled, {len(kernel.arg_names)} expected")
    return kernel


def int_type(lo: int, hi: int) -> str:
    """The type Triton's launcher gives an integer argument whose values lie in [lo, hi]: i64 once any
    value leaves the i32 range (the caller splits a range that straddles it)."""
    return "i32" if -(2**31) <= lo and hi <= INT32_MAX else "i64"
