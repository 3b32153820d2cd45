"""Symbolic semantics of one program instance of a compiled kernel, in z3: every TTIR value becomes a term
over the program ids, the kernel's integer arguments, one lane variable per tensor dimension and one
iteration variable per loop. Integers are exact (``Int``) and each integer operation records the
obligation that its result fits its bit width as compiled, so a proof under those obligations plus a proof
of the obligations is a proof under wrapping arithmetic. Pointers are (buffer, element offset); loads,
stores and atomics are recorded with their mask and the conditions under which they run. Loop-carried
integers and pointers must be affine in the iteration (``init + it * inc``); anything the encoder does
not model becomes an opaque value carrying its reason, and an access that depends on one is never
proved."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import z3

from ceiling.verify.ir import Kernel, Op

MAX_RANK = 8
LANES = [z3.Int(f"lane{k}") for k in range(MAX_RANK)]
PIDS = [z3.Int(f"pid_{a}") for a in "xyz"]

# Ops whose results are data (floating point, matrix products, reductions): opaque without complaint,
# since only an address, a mask or a loop bound that depends on them makes a property unknown.
_DATA_PREFIXES = ("math.", "tt.dot", "tt.reduce", "tt.scan", "tt.fp_to_fp", "tt.precise_", "tt.clampf",
                  "tt.elementwise_inline_asm", "tt.histogram", "tt.join", "tt.split", "tt.cat", "tt.gather",
                  "tt.dot_scaled", "tt.extern_elementwise", "tt.mulhiui", "tt.bitcast", "tt.int_to_ptr",
                  "tt.ptr_to_int", "tt.unsplat")
_FLOAT_ARITH = re.compile(r"arith\.(add|sub|mul|div|rem|neg|max|min|cmp|trunc|ext)f|arith\.(si|ui)tofp|arith\.fpto|"
                          r"arith\.(maximumf|minimumf|maxnumf|minnumf|bitcast)")
# The ops that only move a value between lanes (a bool known from above stays so through them).
_LANE_OPS = ("tt.splat", "tt.expand_dims", "tt.broadcast", "tt.reshape", "tt.trans")
_IGNORED = {"tt.return", "tt.assert", "tt.print", "gpu.barrier", "tt.func", "scf.yield"}
_ESIZE = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i16": 2, "i8": 1, "i1": 1}


def _elem(t: str) -> tuple[tuple, str]:
    """(shape, element type) of a type string: ``tensor<64x1xi32>`` -> ((64, 1), 'i32')."""
    m = re.fullmatch(r"tensor<((?:\d+x)*)(.+)>", t)
    if not m:
        return (), t
    dims = tuple(int(d) for d in m.group(1).split("x") if d)
    return dims, m.group(2)


def _bits(elem: str) -> int:
    m = re.fullmatch(r"i(\d+)", elem)
    return int(m.group(1)) if m else 0


def pointee_size(elem: str) -> int:
    """Bytes of a pointer's pointee: ``!tt.ptr<f16>`` -> 2 (FP8 formats one byte)."""
    m = re.fullmatch(r"!tt\.ptr<(.+?)(?:,\s*\d+)?>", elem)
    inner = m.group(1) if m else elem
    if inner in _ESIZE:
        return _ESIZE[inner]
    return 1 if inner.lower().startswith("f8") else 0


@dataclass(frozen=True)
class Val:
    """A value: kind 'int', 'bool', 'ptr', 'desc' or 'opaque'; its tensor shape; its z3 term (the
    element offset for a pointer); the obligations in its cone; the reason when opaque."""
    kind: str
    shape: tuple = ()
    expr: object = None
    bits: int = 0
    buffer: str | None = None
    esize: int = 0
    obl: frozenset = frozenset()
    reason: str | None = None
    desc: tuple | None = None  # (shape terms, stride terms, block shape) of a tensor descriptor
    ok: object = None          # z3 Bool: no operation in its cone wrapped (None: nothing to assume)
    # A bool known only from above: the value implies ``expr`` (a conjunct the encoder cannot read, a loaded
    # key mask, is dropped); why. Sound for the masks of bounds and race, never exact.
    upper: str | None = None


def opaque(reason: str, shape=()) -> Val:
    return Val("opaque", tuple(shape), reason=reason)


@dataclass(frozen=True)
class Loop:
    it: object      # z3 Int: the iteration number, from 0
    iv: object      # z3 term: the induction variable's value
    name: str
    ub: object = None  # z3 term: the bound the induction variable stays below


@dataclass(frozen=True)
class Ctx:
    """Where an op runs: the conditions that hold there (loop bounds, branch conditions), its loops, the
    obligations in their cone; ``inexact`` when a branch condition was not modelled (the conditions then
    over-approximate), ``opaque`` when the whole region is not modelled."""
    conds: tuple = ()
    loops: tuple = ()
    obl: frozenset = frozenset()
    inexact: str | None = None
    opaque: str | None = None
    ok: object = None


@dataclass
class Access:
    kind: str            # load, store, atomic
    op: str
    loc: str
    buffer: str
    esize: int
    offset: object       # z3 Int, elements of the pointee
    mask: object         # z3 Bool
    shape: tuple
    ctx: Ctx
    obl: frozenset
    reason: str | None = None       # why the address cannot be modelled (then offset is None)
    mask_exact: bool = True
    atomic_op: str | None = None
    value: Val | None = None
    ok: object = None


def conj(*terms):
    """The conjunction of the terms that are not None (None when all are)."""
    terms = [t for t in terms if t is not None]
    return None if not terms else terms[0] if len(terms) == 1 else z3.And(*terms)


@dataclass
class Obligation:
    id: int
    ok: object           # z3 Bool: the result fits its width / the divisor is not zero
    what: str            # e.g. "i32 arith.muli"
    loc: str
    shape: tuple
    ctx: Ctx
    cone: object         # z3 Bool or None: none of its operands wrapped


def lanes_in(shape) -> list:
    return [z3.And(0 <= LANES[k], LANES[k] < n) for k, n in enumerate(shape)]


def free_consts(e) -> set[str]:
    seen, out, stack = set(), set(), [e]
    while stack:
        x = stack.pop()
        if x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if z3.is_const(x) and x.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            out.add(str(x))
        stack.extend(x.children())
    return out


def _tdiv(a, b):
    """Signed division truncating toward zero (``arith.divsi``) from z3's Euclidean one."""
    if z3.is_int_value(b) and b.as_long() > 0:
        return z3.If(a >= 0, a / b, -((-a) / b))
    q = z3.If(b > 0, z3.If(a >= 0, a / b, -((-a) / b)), z3.If(a >= 0, -(a / (-b)), (-a) / (-b)))
    return q


def _unsigned(a, bits):
    return z3.If(a < 0, a + 2**bits, a)


def _wrap(a, bits):
    return (a + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)


def _fits(e, bits):
    return z3.And(-(2 ** (bits - 1)) <= e, e < 2 ** (bits - 1))


class Encoder:
    """Walks a :class:`Kernel`'s body once, binding argument names to ``args`` (name -> Val)."""

    def __init__(self, kernel: Kernel, args: dict[str, Val], num_programs: list, domain=()):
        self.kernel = kernel
        self.env: dict[int, Val] = {}
        self.accesses: list[Access] = []
        self.obligations: list[Obligation] = []
        self.loops: dict[int, int] = {}
        self.num_programs = num_programs
        self.domain = list(domain)
        self.record = True
        for name, vid in zip(kernel.arg_names, kernel.arg_ids):
            self.env[vid] = args[name]
        self._block(kernel.body, Ctx())

    # -- building blocks ---------------------------------------------------------------------------
    def _obligation(self, ok, what, loc, shape, ctx, cone) -> frozenset:
        if not self.record:
            return frozenset()
        ob = Obligation(len(self.obligations), ok, what, loc, tuple(shape), ctx, cone)
        self.obligations.append(ob)
        return frozenset([ob.id])

    def _nonnegative(self, a, b, shape, ctx) -> bool:
        """Whether the domain makes the dividend non-negative and the divisor positive (a short query;
        a timeout answers no, which only costs the solver an exact signed encoding)."""
        if z3.is_int_value(b) and b.as_long() <= 0:
            return False
        s = z3.Solver()
        s.set(timeout=2000)
        pids = [z3.And(0 <= p, p < g) for p, g in zip(PIDS, self.num_programs)]
        s.add(*self.domain, *pids, *lanes_in(shape), *ctx.conds, z3.Or(a < 0, b <= 0))
        return s.check() == z3.unsat

    def _access(self, acc: Access):
        if self.record:
            self.accesses.append(acc)

    def _get(self, vid) -> Val:
        return self.env.get(vid) or opaque("a value defined outside the modelled code")

    def _lanes(self, v: Val, subs: list) -> Val:
        if v.expr is None or not subs:
            return v
        return replace(v, expr=z3.substitute(v.expr, *subs), ok=None if v.ok is None else z3.substitute(v.ok, *subs))

    # -- walking -----------------------------------------------------------------------------------
    def _block(self, ops: list[Op], ctx: Ctx) -> list[Val] | None:
        yielded = None
        for op in ops:
            if op.name == "scf.yield":
                yielded = [self._get(v) for v in op.operands]
                continue
            try:
                self._op(op, ctx)
            except z3.Z3Exception as exc:  # a sort mismatch the encoder did not foresee: opaque, never proved
                for r, t in zip(op.results, op.result_types):
                    self.env[r] = opaque(f"{op.name} not encodable ({exc})", _elem(t)[0])
        return yielded

    def _op(self, op: Op, ctx: Ctx):
        name = op.name
        shape, elem = _elem(op.result_types[0]) if op.results else ((), "")
        ins = [self._get(v) for v in op.operands]
        out = None
        if name == "scf.for":
            return self._for(op, ctx, ins)
        if name == "scf.if":
            return self._if(op, ctx, ins)
        if op.regions and name not in ("tt.reduce", "tt.scan", "tt.map_elementwise"):
            # A region the encoder does not model (scf.while, warp specialisation, ...): every access
            # inside it is unknown, and its results are opaque.
            inner = replace(ctx, opaque=f"inside {name}, which is not modelled")
            for region in op.regions:
                for args, types, ops in region:
                    for a, t in zip(args, types):
                        self.env[a] = opaque(f"a block argument of {name}", _elem(t)[0])
                    self._block(ops, inner)
            for r, t in zip(op.results, op.result_types):
                self.env[r] = opaque(f"a result of {name}", _elem(t)[0])
            return
        if name in _IGNORED:
            return
        if name in ("tt.load", "tt.store", "tt.atomic_rmw", "tt.atomic_cas"):
            self._memory(op, ctx, ins)
            if name == "tt.store":
                return
            out = opaque(f"data-dependent (the value of {name} at {op.loc})", shape)
        elif name in ("tt.descriptor_load", "tt.descriptor_store", "tt.descriptor_atomic_rmw"):
            self._descriptor_access(op, ctx, ins)
            if name == "tt.descriptor_store":
                return
            out = opaque(f"data-dependent (the value of {name} at {op.loc})", shape)
        elif name == "tt.make_tensor_descriptor":
            out = self._make_descriptor(op, ins)
        else:
            out = self._pure(op, ins, shape, elem, ctx)
        for r in op.results:
            self.env[r] = out

    def _pure(self, op: Op, ins, shape, elem, ctx) -> Val:
        name, bits = op.name, _bits(elem)
        cone = frozenset().union(*(v.obl for v in ins)) if ins else frozenset()
        cok = conj(*(v.ok for v in ins))
        if name == "arith.constant":
            v = op.attrs.get("value")
            if elem == "i1" and isinstance(v, (bool, int)):
                return Val("bool", shape, z3.BoolVal(bool(v)))
            if bits and isinstance(v, int) and not isinstance(v, bool):
                return Val("int", shape, z3.IntVal(v), bits)
            if bits:
                return opaque(f"a constant the encoder cannot read at {op.loc}", shape)
            return opaque("data", shape)
        if name == "tt.get_program_id":
            return Val("int", (), PIDS[op.attrs["axis"]], 32)
        if name == "tt.get_num_programs":
            return Val("int", (), self.num_programs[op.attrs["axis"]], 32)
        if name == "tt.make_range":
            return Val("int", shape, op.attrs["start"] + LANES[0], 32)
        if elem == "i1" and name == "arith.andi" and any(v.kind == "bool" for v in ins) and \
                any(v.kind == "opaque" or v.upper for v in ins):
            known = [v.expr for v in ins if v.kind == "bool"]
            why = next(v.reason or v.upper for v in ins if v.kind == "opaque" or v.upper)
            return Val("bool", shape, z3.And(*known) if len(known) > 1 else known[0], 1, obl=cone, ok=cok, upper=why)
        bounded = next((v for v in ins if v.upper), None)
        if bounded is not None and name not in _LANE_OPS:
            return opaque(f"{name} of a mask known only in part ({bounded.upper})", shape)
        if any(v.kind == "opaque" for v in ins) and name not in ("arith.select",):
            bad = next(v for v in ins if v.kind == "opaque")
            return replace(bad, shape=shape)
        if name.startswith(_DATA_PREFIXES) or _FLOAT_ARITH.match(name):
            return opaque(f"{name} (data)" if not bits and "ptr" not in elem else f"unsupported op {name}", shape)
        if name == "tt.splat":
            return replace(ins[0], shape=shape)
        if name == "tt.expand_dims":
            axis, rank = op.attrs["axis"], len(ins[0].shape)
            subs = [(LANES[j], LANES[j + 1]) for j in range(axis, rank)]
            return replace(self._lanes(ins[0], subs), shape=shape)
        if name == "tt.broadcast":
            subs = [(LANES[j], z3.IntVal(0)) for j, (a, b) in enumerate(zip(ins[0].shape, shape)) if a == 1 and b != 1]
            return replace(self._lanes(ins[0], subs), shape=shape)
        if name == "tt.trans":
            order = self._order(op, len(shape))
            if order is None:
                return opaque(f"unsupported op {name} (order not read)", shape)
            subs = [(LANES[order[j]], LANES[j]) for j in range(len(shape))]
            return replace(self._lanes(ins[0], subs), shape=shape)
        if name == "tt.reshape":
            return replace(self._lanes(ins[0], self._reshape(ins[0].shape, shape)), shape=shape)
        if name == "tt.addptr":
            p, o = ins
            if p.kind != "ptr" or o.kind != "int":
                return opaque(f"unsupported op {name} on {p.kind}", shape)
            return Val("ptr", shape, p.expr + o.expr, 64, p.buffer, p.esize, cone, ok=cok)
        if name == "arith.select":
            c, a, b = ins
            if c.kind != "bool":
                return opaque(f"a select on {c.reason or c.kind}", shape)
            if a.kind == "opaque" or b.kind == "opaque":
                return a if a.kind == "opaque" else b
            if a.kind != b.kind or (a.kind == "ptr" and a.buffer != b.buffer):
                return opaque("a select between different buffers", shape)
            return replace(a, shape=shape, expr=z3.If(c.expr, a.expr, b.expr), obl=cone, ok=cok)
        if elem == "i1" and name in ("arith.andi", "arith.ori", "arith.xori"):
            a, b = (v.expr for v in ins)
            f = {"arith.andi": z3.And, "arith.ori": z3.Or, "arith.xori": z3.Xor}[name]
            return Val("bool", shape, f(a, b), 1, obl=cone, ok=cok)
        if name == "arith.cmpi":
            a, b = (v.expr for v in ins)
            w = max(v.bits for v in ins)
            p = op.attrs["predicate"]
            if p >= 6:
                a, b = _unsigned(a, w), _unsigned(b, w)
            # eq ne slt sle sgt sge, then ult ule ugt uge on the unsigned readings
            f = [lambda x, y: x == y, lambda x, y: x != y, lambda x, y: x < y, lambda x, y: x <= y,
                 lambda x, y: x > y, lambda x, y: x >= y][p if p < 6 else p - 4]
            return Val("bool", shape, f(a, b), 1, obl=cone, ok=cok)
        if name in ("arith.extsi", "arith.index_cast", "arith.index_castui"):
            return replace(ins[0], shape=shape, bits=bits or 64)
        if name == "arith.extui":
            v = ins[0]
            if v.kind == "bool":
                return Val("int", shape, z3.If(v.expr, 1, 0), bits, obl=cone, ok=cok)
            return Val("int", shape, _unsigned(v.expr, v.bits), bits, obl=cone, ok=cok)
        if name == "arith.trunci":
            v = ins[0]
            if bits == 1:
                return Val("bool", shape, _wrap(v.expr, 2) != 0, 1, obl=cone, ok=cok)
            return Val("int", shape, _wrap(v.expr, bits), bits, obl=cone, ok=cok)
        if bits <= 1 or any(v.kind != "int" for v in ins):
            return opaque(f"unsupported op {name}", shape)
        a = ins[0].expr
        b = ins[1].expr if len(ins) > 1 else None
        arith = {
            "arith.addi": lambda: a + b, "arith.subi": lambda: a - b, "arith.muli": lambda: a * b,
            "arith.minsi": lambda: z3.If(a <= b, a, b), "arith.maxsi": lambda: z3.If(a >= b, a, b),
            "arith.minui": lambda: z3.If(_unsigned(a, bits) <= _unsigned(b, bits), a, b),
            "arith.maxui": lambda: z3.If(_unsigned(a, bits) >= _unsigned(b, bits), a, b),
            "arith.divsi": lambda: _tdiv(a, b), "arith.remsi": lambda: a - b * _tdiv(a, b),
            "arith.divui": lambda: _unsigned(a, bits) / _unsigned(b, bits),
            "arith.remui": lambda: _unsigned(a, bits) % _unsigned(b, bits),
            "arith.floordivsi": lambda: z3.If(b > 0, a / b, -(a / -b) - z3.If(a % -b == 0, 0, 1)),
            "arith.ceildivsi": lambda: -_floordiv(-a, b),
        }
        divides = name in ("arith.divsi", "arith.remsi", "arith.divui", "arith.remui")
        positive = divides and self._nonnegative(a, b, shape, ctx)
        if positive:
            # Both operands proved non-negative and the divisor positive over the domain: every signed and
            # unsigned reading agrees with z3's own division, which the solver handles far better.
            arith[name] = (lambda: a / b) if name in ("arith.divsi", "arith.divui") else (lambda: a % b)
        if name in ("arith.shli", "arith.shrsi", "arith.shrui") and z3.is_int_value(b):
            k = b.as_long()
            expr = a * 2**k if name == "arith.shli" else (a / 2**k if name == "arith.shrsi" else _unsigned(a, bits) / 2**k)
        elif name in arith:
            expr = arith[name]()
        else:
            return opaque(f"unsupported op {name}", shape)
        expr = z3.simplify(expr) if z3.is_int_value(a) and (b is None or z3.is_int_value(b)) else expr
        obl, own = cone, None
        if name in ("arith.divsi", "arith.remsi", "arith.divui", "arith.remui", "arith.floordivsi", "arith.ceildivsi") \
                and not positive:
            own = b != 0
            obl = obl | self._obligation(own, f"division by zero in {name}", op.loc, shape, ctx, cok)
        if name in ("arith.addi", "arith.subi", "arith.muli", "arith.shli"):
            own = _fits(expr, bits)
            obl = obl | self._obligation(own, f"i{bits} wrap in {name}", op.loc, shape, ctx, cok)
        return Val("int", shape, expr, bits, obl=obl, ok=conj(cok, own))

    def _order(self, op, rank):
        # tt.trans's permutation is an array attribute the bindings do not read; 2-D is the only case
        # Triton emits for tl.trans / .T on matrices.
        return [1, 0] if rank == 2 else None

    def _reshape(self, old, new):
        """Row-major reshape: each old lane from the flat index of the new lanes."""
        flat, mult = 0, 1
        for k in reversed(range(len(new))):
            flat = flat + LANES[k] * mult
            mult *= new[k]
        subs, mult = [], 1
        strides = []
        for k in reversed(range(len(old))):
            strides.append(mult)
            mult *= old[k]
        strides.reverse()
        # z3.substitute is simultaneous: the new lanes in the replacements are not substituted again.
        return [(LANES[k], (flat / strides[k]) % old[k]) for k in range(len(old))] if old != new else []

    # -- memory ---------------------------------------------------------------------------------------
    def _memory(self, op: Op, ctx: Ctx, ins):
        name = op.name
        ptr = ins[0]
        mask = None
        value = None
        if name == "tt.load":
            mask = ins[1] if len(ins) > 1 else None
        elif name == "tt.store":
            value = ins[1]
            mask = ins[2] if len(ins) > 2 else None
        elif name == "tt.atomic_rmw":
            value = ins[1]
            mask = ins[2] if len(ins) > 2 else None
        else:
            value = ins[2]
        kind = {"tt.load": "load", "tt.store": "store"}.get(name, "atomic")
        shape = ptr.shape
        reason = ctx.opaque
        if ptr.kind != "ptr":
            reason = reason or f"address depends on {ptr.reason}"
        m_expr, exact = z3.BoolVal(True), True
        obl = ctx.obl | ptr.obl
        ok = conj(ctx.ok, ptr.ok)
        if mask is not None:
            if mask.kind == "bool":
                m_expr, obl, ok = mask.expr, obl | mask.obl, conj(ok, mask.ok)
                exact = mask.upper is None
            else:
                exact = False
        self._access(Access(kind, name, op.loc, ptr.buffer, ptr.esize, ptr.expr if ptr.kind == "ptr" else None,
                            m_expr, shape, ctx, obl, reason, exact and ctx.inexact is None,
                            atomic_op=str(op.attrs.get("atomic_rmw_op")) if kind == "atomic" else None, value=value,
                            ok=ok))

    def _make_descriptor(self, op: Op, ins) -> Val:
        base = ins[0]
        rank = (len(ins) - 1) // 2
        m = re.search(r"tensor<((?:\d+x)+)", op.result_types[0])
        block = tuple(int(d) for d in m.group(1).split("x") if d) if m else ()
        dims, strides = ins[1:1 + rank], ins[1 + rank:1 + 2 * rank]
        if base.kind != "ptr" or any(v.kind != "int" for v in dims + strides) or len(block) != rank:
            return opaque(f"a tensor descriptor the encoder cannot read at {op.loc}")
        cone = frozenset().union(*(v.obl for v in ins))
        return Val("desc", (), base.expr, 64, base.buffer, base.esize, cone, ok=conj(*(v.ok for v in ins)),
                   desc=(tuple(v.expr for v in dims), tuple(v.expr for v in strides), block))

    def _descriptor_access(self, op: Op, ctx: Ctx, ins):
        """A TMA access: the box at the coordinates, clipped by the hardware to the described shape; each
        element inside it is an access at base + sum(coordinate * stride)."""
        d = ins[0]
        name = op.name
        coords = ins[2:] if name != "tt.descriptor_load" else ins[1:]
        kind = {"tt.descriptor_load": "load", "tt.descriptor_store": "store"}.get(name, "atomic")
        if d.kind != "desc" or any(c.kind != "int" for c in coords):
            self._access(Access(kind, name, op.loc, d.buffer, d.esize, None, z3.BoolVal(True), (), ctx, ctx.obl,
                                ctx.opaque or f"descriptor or coordinates depend on {d.reason or 'data'}"))
            return
        dims, strides, block = d.desc
        idx = [c.expr + LANES[k] for k, c in enumerate(coords)]
        inside = z3.And([z3.And(0 <= i, i < n) for i, n in zip(idx, dims)])
        off = d.expr + sum(i * s for i, s in zip(idx, strides))
        obl = ctx.obl | d.obl | frozenset().union(*(c.obl for c in coords))
        ok = conj(ctx.ok, d.ok, *(c.ok for c in coords))
        self._access(Access(kind, name, op.loc, d.buffer, d.esize, off, inside, tuple(block), ctx, obl, ctx.opaque,
                            ctx.inexact is None, value=ins[1] if kind != "load" else None, ok=ok))

    # -- control flow ------------------------------------------------------------------------------
    def _for(self, op: Op, ctx: Ctx, ins):
        lb, ub, step, inits = ins[0], ins[1], ins[2], ins[3:]
        (args, types, body), = op.regions[0]
        n = self.loops.setdefault(id(op), len(self.loops))
        it = z3.Int(f"it{n}")
        bounds_ok = all(v.kind == "int" for v in (lb, ub, step))
        if bounds_ok:
            iv = lb.expr + it * step.expr
            inner = replace(ctx, conds=ctx.conds + (it >= 0, iv < ub.expr),
                            loops=ctx.loops + (Loop(it, iv, f"loop {n} at {op.loc}", ub.expr),),
                            obl=ctx.obl | lb.obl | ub.obl | step.obl, ok=conj(ctx.ok, lb.ok, ub.ok, step.ok))
            ivv = Val("int", (), iv, lb.bits or 32, obl=lb.obl | step.obl, ok=conj(lb.ok, step.ok))
        else:
            inner = replace(ctx, opaque=ctx.opaque or f"a loop whose bounds depend on "
                                                      f"{next(v.reason for v in (lb, ub, step) if v.kind != 'int')}")
            ivv = opaque("the induction variable of a loop with unmodelled bounds")
        # Pass 1: carried values as placeholders, to read each one's increment per iteration.
        holders = [z3.Int(f"carry{n}_{j}") for j in range(len(inits))]
        record, self.record = self.record, False
        self.env[args[0]] = ivv
        for j, (a, v) in enumerate(zip(args[1:], inits)):
            self.env[a] = replace(v, expr=holders[j]) if v.kind in ("int", "ptr") else v
        ys = self._block(body, inner) or []
        self.record = record
        carried = []
        names = {str(h) for h in holders} | {str(it)}
        for j, (v, y) in enumerate(zip(inits, ys)):
            if v.kind in ("int", "ptr") and y.kind == v.kind and y.buffer == v.buffer:
                inc = z3.simplify(y.expr - holders[j])
                if not (free_consts(inc) & names):
                    carried.append(("affine", inc, (y.obl, y.ok)))
                    continue
            if y is not None and v.kind not in ("int", "ptr") and y.kind == v.kind and y.expr is not None \
                    and v.expr is not None and y.expr.eq(v.expr):
                carried.append(("same", None, None))
                continue
            carried.append(("opaque", None, None))
        # Pass 2: the closed forms, recording accesses and obligations.
        self.env[args[0]] = ivv
        for (how, inc, iobl), a, v in zip(carried, args[1:], inits):
            if how == "affine":
                # The yield's own obligations mention the placeholder; the closed form keeps the cone ids.
                self.env[a] = replace(v, expr=v.expr + it * inc, obl=v.obl | iobl[0])
            elif how == "same":
                self.env[a] = v
            else:
                self.env[a] = opaque(f"a loop-carried value that is not affine in the iteration ({op.loc})", v.shape)
        self._block(body, inner)
        trip = None
        if bounds_ok:
            trip = z3.If(ub.expr > lb.expr, (ub.expr - lb.expr + step.expr - 1) / step.expr, 0)
        for (how, inc, iobl), r, v in zip(carried, op.results, inits):
            if how == "affine" and trip is not None:
                self.env[r] = replace(v, expr=v.expr + trip * inc, obl=v.obl | iobl[0])
            elif how == "same":
                self.env[r] = v
            else:
                self.env[r] = opaque(f"a loop-carried value after its loop ({op.loc})", v.shape)

    def _if(self, op: Op, ctx: Ctx, ins):
        c = ins[0]
        if c.upper:
            c = opaque(c.upper)
        if c.kind == "bool":
            then_ctx = replace(ctx, conds=ctx.conds + (c.expr,), obl=ctx.obl | c.obl, ok=conj(ctx.ok, c.ok))
            else_ctx = replace(ctx, conds=ctx.conds + (z3.Not(c.expr),), obl=ctx.obl | c.obl, ok=conj(ctx.ok, c.ok))
        else:
            why = f"a branch on {c.reason}"
            then_ctx = else_ctx = replace(ctx, inexact=ctx.inexact or why)
        outs = []
        for region, sub in zip(op.regions, (then_ctx, else_ctx)):
            ys = None
            for args, types, ops in region:
                ys = self._block(ops, sub)
            outs.append(ys)
        for k, (r, t) in enumerate(zip(op.results, op.result_types)):
            shape = _elem(t)[0]
            a = outs[0][k] if outs[0] else None
            b = outs[1][k] if len(outs) > 1 and outs[1] else None
            if c.kind == "bool" and a is not None and b is not None and a.kind == b.kind and a.kind in ("int", "bool", "ptr") \
                    and a.buffer == b.buffer:
                self.env[r] = replace(a, expr=z3.If(c.expr, a.expr, b.expr), obl=a.obl | b.obl | c.obl,
                                      ok=conj(c.ok, z3.If(c.expr, a.ok if a.ok is not None else z3.BoolVal(True),
                                                          b.ok if b.ok is not None else z3.BoolVal(True))))
            else:
                self.env[r] = opaque(f"a result of a branch at {op.loc}", shape)


def _floordiv(a, b):
    return z3.If(b > 0, a / b, -(a / -b) - z3.If(a % -b == 0, 0, 1))
