"""The properties, each a set of z3 queries over one encoded kernel variant and its contract's domain
(UNSAT of the negated property = proved): ``bounds`` (every masked access inside its buffer),
``overflow`` (no integer operation wraps its width, no division by zero), ``race`` (no two distinct
programs store the same element non-atomically), ``coverage`` (every element of each output buffer is
stored by some program) and ``accumulate`` (each contracted index reaches each output element exactly
once, where the contract names the contraction). A query that times out, or an access the encoder could not model, gives unknown; a property that
assumed no wrap is proved only when ``overflow`` is."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import z3

from ceiling.verify.encoding import LANES, PIDS, Access, Encoder, free_consts, lanes_in

PROPERTIES = ("bounds", "overflow", "race", "coverage", "accumulate")
DEFAULT_TIMEOUT_MS = 10_000
# The query that names an element a one-store count argument leaves unwritten (the counterexample stands
# without it).
NAMING_TIMEOUT_MS = 3_000
RETRY_SEED = 7


@dataclass
class Outcome:
    """One property on one variant: 'proved', 'counterexample' (with its dict) or 'unknown' (with why)."""
    status: str
    counterexample: dict | None = None
    reason: str | None = None


@dataclass
class Problem:
    """An encoded variant and everything a query needs: the scalar environment (name -> z3 term), the
    domain's constraints, the grid, the buffers' extents and element sizes."""
    enc: Encoder
    env: dict
    domain: list
    grid: list
    buffers: dict      # name -> (extent term, element bytes, Buffer)
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    scalar_names: tuple = ()
    # name -> z3 term of the scalars the contract defines by an expression (stride_cm = "N"): a buffer's
    # stride written as that expression is the argument the kernel multiplies by
    definitions: dict = field(default_factory=dict)
    views: dict = field(default_factory=dict)  # buffer name -> its views (see ``views``), made once
    nonnegative: dict = field(default_factory=dict)  # buffer name -> whether its strides are >= 0

    def query(self, constraints):
        """Solve ``constraints`` within the per-query timeout."""
        return solve(constraints, self.timeout_ms)

    def pid_range(self, pids=PIDS):
        return [z3.And(0 <= p, p < g) for p, g in zip(pids, self.grid)] + [p == 0 for p in pids[len(self.grid):]]


def solve(constraints, timeout_ms):
    """(result, model, reason unknown). A query that times out is asked once more with another random seed
    and a third of the time: how long z3 takes depends on the order it meets the terms in (which varies from
    process to process), and a query on the edge of its timeout often falls the other way."""
    constraints = [c for c in constraints if c is not None]
    for seed, budget in ((0, timeout_ms), (RETRY_SEED, timeout_ms / 3)):
        s = z3.Solver()
        s.set(timeout=max(int(budget), 1), random_seed=seed)
        s.add(*constraints)
        r = s.check()
        if r != z3.unknown or "timeout" not in s.reason_unknown() and "canceled" not in s.reason_unknown():
            break
    return r, (s.model() if r == z3.sat else None), (s.reason_unknown() if r == z3.unknown else None)


def _val(model, term):
    v = model.eval(term, model_completion=True)
    return v.as_long() if z3.is_int_value(v) else (z3.is_true(v) if z3.is_bool(v) else str(v))


def _scalars(p: Problem, model) -> dict:
    return {k: p.env[k] if isinstance(p.env[k], int) else _val(model, p.env[k]) for k in p.scalar_names}


def _where(p: Problem, model, acc_shape, ctx, pids=PIDS, lanes=LANES, rename=None) -> dict:
    out = {"program_id": [_val(model, x) for x in pids[:len(p.grid)]],
           "lane": [_val(model, lanes[k]) for k in range(len(acc_shape))]}
    if ctx.loops:
        out["loops"] = {lp.name: _val(model, z3.substitute(lp.iv, *rename) if rename else lp.iv) for lp in ctx.loops}
    return out


def _conds(ctx):
    return list(ctx.conds)


def bounds(p: Problem) -> Outcome:
    unknown = []
    for acc in p.enc.accesses:
        if acc.reason or acc.offset is None:
            unknown.append(f"{acc.op} at {acc.loc}: {acc.reason or 'address not modelled'}")
            continue
        if acc.buffer not in p.buffers:
            unknown.append(f"{acc.op} at {acc.loc}: buffer {acc.buffer!r} has no extent in the contract")
            continue
        extent, esize, _ = p.buffers[acc.buffer]
        if acc.esize == esize and _nonnegative_strides(p, acc.buffer) and \
                indices(p, acc.buffer, acc.offset, acc) is not None:
            # An element's own index on a view of the buffer, every dim inside its size: an element of the
            # buffer (a query per dim, where the whole address against the extent can be a hard product).
            continue
        byte = acc.offset * acc.esize
        outside = z3.Not(z3.And(byte >= 0, byte + acc.esize <= extent * esize))
        r, m, why = p.query(p.domain + p.pid_range() + lanes_in(acc.shape) + _conds(acc.ctx) +
                            [acc.mask, acc.ok, outside])
        if r == z3.sat:
            if not acc.mask_exact:
                unknown.append(f"{acc.op} at {acc.loc}: may be out of bounds, but its mask or branch is not modelled")
                continue
            cx = {"access": acc.op, "loc": acc.loc, "buffer": acc.buffer, "scalars": _scalars(p, m),
                  **_where(p, m, acc.shape, acc.ctx), "offset": _val(m, acc.offset),
                  "extent": _val(m, extent) * esize // acc.esize if acc.esize else _val(m, extent)}
            return Outcome("counterexample", cx)
        if r == z3.unknown:
            unknown.append(f"{acc.op} at {acc.loc}: solver {why}")
    return Outcome("unknown", reason="; ".join(unknown)) if unknown else Outcome("proved")


def _nonnegative_strides(p: Problem, name: str) -> bool:
    """Whether every stride of the buffer is >= 0 over the domain (asked once per buffer)."""
    if name not in p.nonnegative:
        buf = p.buffers[name][2]
        p.nonnegative[name] = not buf.strides or \
            p.query(p.domain + [z3.Or(*[st.z3(p.env) < 0 for st in buf.strides])])[0] == z3.unsat
    return p.nonnegative[name]


def overflow(p: Problem) -> Outcome:
    obs = [o for o in p.enc.obligations if o.ctx.opaque is None]
    if not obs:
        return Outcome("proved")
    unknown = []
    disj = [z3.And(*(lanes_in(o.shape) + _conds(o.ctx) + [c for c in (o.ctx.ok, o.cone) if c is not None]
                     + [z3.Not(o.ok)])) for o in obs]
    r, m, why = p.query(p.domain + p.pid_range() + [z3.Or(*disj)])
    if r == z3.unsat:
        return Outcome("proved")
    if r == z3.sat:
        for o, d in zip(obs, disj):  # the first in program order is a true wrap: its operands did not
            if z3.is_true(m.eval(d, model_completion=True)):
                return Outcome("counterexample", {"operation": o.what, "loc": o.loc, "scalars": _scalars(p, m),
                                                  **_where(p, m, o.shape, o.ctx)})
    # Too hard at once: one query per obligation.
    for o, d in zip(obs, disj):
        r, m, why = p.query(p.domain + p.pid_range() + [d])
        if r == z3.sat:
            return Outcome("counterexample", {"operation": o.what, "loc": o.loc, "scalars": _scalars(p, m),
                                              **_where(p, m, o.shape, o.ctx)})
        if r == z3.unknown:
            unknown.append(f"{o.what} at {o.loc}: solver {why}")
    return Outcome("unknown", reason="; ".join(unknown)) if unknown else Outcome("proved")


def _named_strides(p: Problem, strides: list, offset) -> list:
    """The integer arguments the address multiplies by, for strides given as expressions (a contiguous
    buffer's ``C * N * N`` is the kernel's ``stride_b``, which the contract defines as that product): per
    dim, the first argument not yet taken that the address uses and whose definition is that stride; the
    stride itself otherwise. Sound because the domain makes each argument equal to its definition (equal
    strides taken in another order only make the decomposition fail, never wrong)."""
    used, taken, out = free_consts(offset), set(), []
    for stride in strides:
        names = [n for n, d in p.definitions.items() if n not in taken and str(p.env[n]) in used
                 and z3.simplify(d).eq(stride)]
        if names:
            taken.add(names[0])
            out.append(p.env[names[0]])
        else:
            out.append(stride)
    return out


@dataclass(frozen=True)
class View:
    """A buffer seen with runs of its dims merged where they are contiguous (stride_k = size_k+1 *
    stride_k+1 over the whole domain): the same elements at the same addresses, one to one, so bounds, race
    and coverage read the same on it; a kernel that flattens (batch, row, col) into one row index writes
    the merged view dim by dim. ``groups``: the buffer dims of each view dim."""
    shape: tuple
    strides: tuple
    groups: tuple

    @property
    def merged(self) -> bool:
        return any(len(g) > 1 for g in self.groups)


def views(p: Problem, name: str) -> list:
    """The buffer's own view, then each merge of contiguous runs of its dims (fewest merges first)."""
    if name not in p.views:
        p.views[name] = list(_views(p, name))
    return p.views[name]


def _views(p: Problem, name: str):
    import itertools

    buf = p.buffers[name][2]
    shape = [z3.simplify(s.z3(p.env)) for s in buf.shape]
    strides = [z3.simplify(s.z3(p.env)) for s in buf.strides]
    yield View(tuple(shape), tuple(strides), tuple((k,) for k in range(len(shape))))
    joints = []
    for k in range(len(shape) - 1):
        gap = z3.simplify(strides[k] - shape[k + 1] * strides[k + 1], som=True)
        if (z3.is_int_value(gap) and gap.as_long() == 0) or solve(p.domain + [gap != 0], p.timeout_ms)[0] == z3.unsat:
            joints.append(k)
    for n in range(1, len(joints) + 1):
        for chosen in itertools.combinations(joints, n):
            groups, cur = [], [0]
            for k in range(1, len(shape)):
                if k - 1 in chosen:
                    cur.append(k)
                else:
                    groups.append(tuple(cur))
                    cur = [k]
            groups.append(tuple(cur))
            size = [z3.simplify(_product([shape[k] for k in g])) for g in groups]
            yield View(tuple(size), tuple(strides[g[-1]] for g in groups), tuple(groups))


def _product(terms):
    out = z3.IntVal(1)
    for t in terms:
        out = out * t
    return out


def indices(p: Problem, name: str, offset, acc: Access | None = None):
    """(base, index per dim, view) of an address into buffer ``name`` (``sum(index_k * stride_k)``, which z3
    compares dim by dim far faster than the products), on the first view of the buffer whose strides are
    distinct integer arguments or products of them, except at most one that is 1, and in which the address
    is linear; with ``acc``, the first such view on which every index the access reaches lies inside its
    dim (the element's own index). None when there is none."""
    for view in views(p, name):
        d = _indices(p, view, offset)
        if d is not None and (acc is None or in_shape(p, acc, (*d, view))):
            return (*d, view)
    return None


def _indices(p: Problem, view: View, offset, zeros_ok: bool = False):
    strides = _named_strides(p, list(view.strides), offset)
    shape = list(view.shape)
    used = free_consts(offset)
    size_one = [k for k, n in enumerate(shape) if z3.is_int_value(n) and n.as_long() == 1]
    # A dim of constant size 1 has index 0 inside the shape, whatever its stride: its stride need not be an
    # argument the address uses (a channel count pinned to 1 leaves a stride the kernel never multiplies by).
    flat = [k for k in size_one if not (z3.is_const(strides[k]) and str(strides[k]) in used)]
    var = [k for k, t in enumerate(strides) if k not in flat and not z3.is_int_value(t) and _monomial(t)]
    one = [k for k, t in enumerate(strides) if k not in flat and z3.is_int_value(t) and t.as_long() == 1]
    if len(one) > 1:
        # Several unit strides (a size pinned to 1 makes its stride 1 too): all of the unit-stride part
        # belongs to the one dim that is not of size 1.
        wide = [k for k in one if k not in size_one]
        if len(wide) > 1:
            return None
        keep = wide or one[-1:]
        flat += [k for k in one if k not in keep]
        one = keep
    if len(var) + len(one) + len(flat) != len(strides) or len({str(strides[k]) for k in var}) < len(var):
        return None
    split = _coefficients(offset, [strides[k] for k in var])
    if split is None:
        return None
    base, coefficients = split
    if not zeros_ok and any(z3.is_int_value(c) and c.as_long() == 0 and k not in size_one
                            for k, c in zip(var, coefficients)):
        # a stride the address never multiplies by: another view (the dims merged) may fit it
        return None
    idx = [None] * len(strides)
    for k, c in zip(var, coefficients):
        idx[k] = c
    if one:
        idx[one[0]], base = base, z3.IntVal(0)
    for k in flat:
        idx[k] = z3.IntVal(0)
    rest = z3.simplify(offset - base - sum((i * t for i, t in zip(idx, strides)), z3.IntVal(0)), som=True)
    if not (z3.is_int_value(rest) and rest.as_long() == 0):
        return None
    return base, idx


def _atoms(t) -> list:
    """The factors of a product, nested products flattened."""
    parts, stack = [], [t]
    while stack:
        x = stack.pop()
        if z3.is_mul(x):
            stack.extend(reversed(x.children()))
        else:
            parts.append(x)
    return parts


def _monomial(t) -> bool:
    """A product of one or more integer arguments, with at most one positive integer factor (a stride such
    as ``D * N`` or ``2 * C``, the row of a (rows, 2, C) buffer)."""
    atoms = _atoms(t)
    numbers = [x for x in atoms if z3.is_int_value(x)]
    return (all(z3.is_const(x) for x in atoms) and len(numbers) <= 1 and len(numbers) < len(atoms)
            and all(x.as_long() > 0 for x in numbers))


def _coefficients(offset, factors):
    """(rest, coefficient of each factor) of ``offset`` as a sum of monomials: each monomial holding a factor
    gives that factor its coefficient (a factor that is itself a product, ``D * N``, needs all its atoms;
    the monomial goes to the largest factor it holds), those holding none the rest; None when a monomial
    holds two factors of the same size. A factor may also appear inside an atom of another monomial (a
    stride the program id is divided by)."""
    expanded = z3.simplify(offset, som=True)
    terms = expanded.children() if z3.is_add(expanded) else [expanded]
    rest, coef = [], [[] for _ in factors]
    atoms = [_atoms(f) for f in factors]
    for t in terms:
        parts = _atoms(t)
        hits = []
        for j, fa in enumerate(atoms):
            left = list(parts)
            for a in fa:
                k = next((n for n, x in enumerate(left) if x.eq(a)), None)
                if k is None:
                    break
                left.pop(k)
            else:
                hits.append((len(fa), j, left))
        if not hits:
            rest.append(t)
            continue
        hits.sort(key=lambda h: -h[0])
        if len(hits) > 1 and hits[1][0] == hits[0][0]:
            return None
        _, j, left = hits[0]
        coef[j].append(_product(left))
    total = lambda ts: z3.simplify(sum(ts, z3.IntVal(0)))  # noqa: E731
    return total(rest), [total(c) for c in coef]


def in_shape(p: Problem, acc: Access, d) -> bool:
    """Whether every index of every access the mask lets through lies inside the buffer's shape (so that,
    on an injective view, equal addresses are equal indices)."""
    base, idx, view = d
    shape = list(view.shape)
    q = p.domain + p.pid_range() + lanes_in(acc.shape) + _conds(acc.ctx) + [acc.mask, acc.ok] + \
        [z3.Or(base != 0, *[z3.Or(i < 0, i >= n) for i, n in zip(idx, shape)])]
    r, _, _ = p.query(q)
    return r == z3.unsat


def injective(p: Problem, name: str) -> bool:
    """Whether two distinct elements of buffer ``name``'s view always have distinct addresses."""
    buf = p.buffers[name][2]
    i = [z3.Int(f"inj_i{k}") for k in range(len(buf.shape))]
    j = [z3.Int(f"inj_j{k}") for k in range(len(buf.shape))]
    shape = [s.z3(p.env) for s in buf.shape]
    strides = [s.z3(p.env) for s in buf.strides]
    q = p.domain + [z3.And(0 <= a, a < n, 0 <= b, b < n) for a, b, n in zip(i, j, shape)] + \
        [z3.Or(*[a != b for a, b in zip(i, j)]), sum(a * t for a, t in zip(i, strides)) == sum(b * t for b, t in zip(j, strides))]
    r, _, _ = solve(q, p.timeout_ms)
    return r == z3.unsat


def _second(p: Problem):
    """Renaming of one program instance's variables (program ids, lanes, loop iterations) to a second's."""
    pids2 = [z3.Int(f"{x}_b") for x in map(str, PIDS)]
    lanes2 = [z3.Int(f"{x}_b") for x in map(str, LANES)]
    its = [z3.Int(f"it{n}") for n in range(len(p.enc.loops))]
    its2 = [z3.Int(f"it{n}_b") for n in range(len(p.enc.loops))]
    return pids2, lanes2, list(zip(PIDS, pids2)) + list(zip(LANES, lanes2)) + list(zip(its, its2))


def _ren(term, subs):
    return None if term is None else z3.substitute(term, *subs)


def race(p: Problem) -> Outcome:
    stores = [a for a in p.enc.accesses if a.kind == "store"]
    pids2, lanes2, subs = _second(p)
    unknown = []
    for i, s1 in enumerate(stores):
        for s2 in stores[i:]:
            if s1.buffer != s2.buffer:
                continue
            if s1.reason or s2.reason:
                unknown.append(f"{s1.op} at {s1.loc}: {s1.reason or s2.reason}")
                continue
            distinct = z3.Or(*[a != b for a, b in zip(PIDS[:len(p.grid)], pids2)])
            lanes_b = [z3.And(0 <= lanes2[k], lanes2[k] < n) for k, n in enumerate(s2.shape)]
            same = s1.offset * s1.esize == _ren(s2.offset, subs) * s2.esize
            d1, d2 = indices(p, s1.buffer, s1.offset, s1), indices(p, s2.buffer, s2.offset, s2)
            # indices(..., access) is the in-shape split: equal elements are equal indices on an injective view
            by_index = (d1 is not None and d2 is not None and d1[2].groups == d2[2].groups
                        and s1.esize == s2.esize and injective(p, s1.buffer))
            if by_index:  # an injective view: the same element is the same index in every dim
                same = z3.And(d1[0] == _ren(d2[0], subs), *[a == _ren(b, subs) for a, b in zip(d1[1], d2[1])])
            q = (p.domain + p.pid_range() + p.pid_range(pids2) + lanes_in(s1.shape) + lanes_b + _conds(s1.ctx)
                 + [_ren(c, subs) for c in s2.ctx.conds]
                 + [s1.mask, s1.ok, _ren(s2.mask, subs), _ren(s2.ok, subs), distinct, same])
            r, m, why = p.query(q)
            if r == z3.sat:
                if not (s1.mask_exact and s2.mask_exact):
                    unknown.append(f"{s1.op} at {s1.loc}: may race, but a mask or branch is not modelled")
                    continue
                return Outcome("counterexample", {
                    "buffer": s1.buffer, "offset": _val(m, s1.offset), "scalars": _scalars(p, m),
                    "first": {"store": s1.loc, **_where(p, m, s1.shape, s1.ctx)},
                    "second": {"store": s2.loc, **_where(p, m, s2.shape, s2.ctx, pids2, lanes2, subs)}})
            if r == z3.unknown:
                unknown.append(f"{s1.op} at {s1.loc}: solver {why}")
    return Outcome("unknown", reason="; ".join(unknown)) if unknown else Outcome("proved")


def _hit(acc: Access, target, p: Problem, elem=None):
    """The conditions under which access ``acc`` (its program, lanes, iterations free) writes element
    offset ``target`` (or, by index, element ``elem``), with the variables to quantify."""
    loops = [lp.it for lp in acc.ctx.loops]
    d = indices(p, acc.buffer, acc.offset, acc) if elem is not None else None
    # By index only where it is the element's own index: ``elem`` indexes the buffer's own dims, and a
    # decomposition with an index outside its dim (a unit stride absorbing a size-1 dim's rows) is not it
    d = None if d is None or d[2].merged else d
    at = [acc.offset == target] if d is None else [d[0] == 0] + [a == e for a, e in zip(d[1], elem)]
    body = z3.And(*(p.pid_range() + lanes_in(acc.shape) + _conds(acc.ctx) +
                    [acc.mask] + ([acc.ok] if acc.ok is not None else []) + at))
    # Every program id is bound, the unused ones too (the grid pins them to 0).
    return PIDS + LANES[:len(acc.shape)] + loops, body


def _grid_size(p: Problem):
    size = z3.IntVal(1)
    for g in p.grid:
        size = size * g
    return size


def _hits(p: Problem, writes, name, elem, model, view: View) -> bool:
    """Whether, at the model's scalars, some write of ``writes`` stores element ``elem`` (a plain
    existential query: the scalars are numbers, so no quantifier is needed)."""
    fix = [p.env[k] == model.eval(p.env[k], model_completion=True) for k in p.scalar_names]
    esize = p.buffers[name][1]
    target = sum((e * s for e, s in zip(elem, view.strides)), z3.IntVal(0))
    for a in writes:
        q = p.domain + fix + p.pid_range() + lanes_in(a.shape) + _conds(a.ctx) + [a.mask, a.ok,
                                                                                   a.offset * a.esize == target * esize]
        r, _, _ = p.query(q)
        if r != z3.unsat:
            return True
    return False


def _degenerate(p: Problem, acc: Access) -> Access:
    """``acc`` with the program ids of grid dims of size 1 set to 0 and the lanes its mask keeps at 0 set to 0
    (a size pinned to 1 leaves a 128-lane tile one lane wide): the box it really writes. Sound: under the
    grid and the mask those variables take no other value."""
    fix = [(PIDS[k], z3.IntVal(0)) for k, g in enumerate(p.grid)
           if z3.is_int_value(z3.simplify(g)) and z3.simplify(g).as_long() == 1]
    live = p.domain + p.pid_range() + lanes_in(acc.shape) + _conds(acc.ctx) + [acc.mask] + \
        ([acc.ok] if acc.ok is not None else [])
    fix += [(LANES[k], z3.IntVal(0)) for k, n in enumerate(acc.shape)
            if n > 1 and p.query(live + [LANES[k] > 0])[0] == z3.unsat]
    if not fix:
        return acc
    return replace(acc, offset=z3.simplify(z3.substitute(acc.offset, *fix)), mask=z3.substitute(acc.mask, *fix),
                   ok=_ren(acc.ok, fix))


def _trips(p: Problem, acc: Access):
    """(the conditions that bound the store's loop iterations, the number of (program, iteration) pairs),
    or None when the store sits under a branch or a loop whose trip count depends on the program or on
    an enclosing loop (the count is then not a product)."""
    loops = acc.ctx.loops
    bound = [c for lp in loops for c in (lp.it >= 0, lp.iv < lp.ub)] if all(lp.ub is not None for lp in loops) else None
    if bound is None or len(bound) != len(acc.ctx.conds) or \
            not all(a.eq(b) for a, b in zip(bound, acc.ctx.conds)):
        return None
    count = _grid_size(p)
    varying = {str(x) for x in PIDS} | {str(lp.it) for lp in loops}
    for lp in loops:
        lb = z3.simplify(z3.substitute(lp.iv, (lp.it, z3.IntVal(0))))
        step = z3.simplify(z3.substitute(lp.iv, (lp.it, z3.IntVal(1))) - lb)
        if (free_consts(lb) | free_consts(step) | free_consts(lp.ub)) & varying or \
                p.query(p.domain + [step <= 0])[0] != z3.unsat:
            return None
        count = count * z3.If(lp.ub > lb, (lp.ub - lb + step - 1) / step, 0)
    return bound, count


def _unmerged(p: Problem, name: str, view: View, elem: list, model) -> list:
    """An element's index on a view of merged dims, as the buffer's own index (at the model's sizes)."""
    shape = [s.z3(p.env) for s in p.buffers[name][2].shape]
    out = [0] * len(shape)
    for g, v in zip(view.groups, elem):
        for k in reversed(g):
            n = max(_val(model, shape[k]), 1)
            out[k], v = v % n, v // n
    return out


def _iterations(model, acc: Access) -> dict:
    return {"iterations": {lp.name: _val(model, lp.it) for lp in acc.ctx.loops}} if acc.ctx.loops else {}


def _tiles(p: Problem, acc: Access, name: str, writes, fixed=None) -> Outcome | None:
    """Coverage of a tile-shaped store without quantifiers: each (program, loop iteration) writes the box
    of lanes at its origin (every in-shape element of it, by the witness lane = element - origin), and the
    origins are a bijection onto the tile grid (on it, injective, and as many (program, iteration) pairs
    as tiles). None when the store is not of that shape. With ``fixed`` = (dim, j), the slice of the
    buffer at index j of that dim, which the store must never leave (only a proof is answered then)."""
    trips = _trips(p, acc)
    if trips is None:
        return None
    iters, count = trips
    acc = _degenerate(p, acc)
    if fixed is None:
        d = indices(p, name, acc.offset, acc)
    else:  # a slice of the buffer's own dims, where index 0 of the sliced dim is the first slice
        own = views(p, name)[0]
        d = _indices(p, own, acc.offset, zeros_ok=True)
        d = None if d is None else (*d, own)
    # a decomposition with an index outside its dim is not the element's own (indices checks it for acc)
    if d is None or (fixed is not None and not in_shape(p, acc, d)):
        return None
    base, idx, view = d
    shape = list(view.shape)
    if fixed is not None:
        dim, j = fixed
        if view.merged or p.query(p.domain + p.pid_range() + iters + lanes_in(acc.shape) + [acc.mask, acc.ok]
                                  + [idx[dim] != j])[0] != z3.unsat:
            return None
        idx, shape = list(idx), list(shape)
        idx[dim], shape[dim] = z3.IntVal(0), z3.IntVal(1)
    zero = [(LANES[k], z3.IntVal(0)) for k in range(len(acc.shape))]
    origin = [z3.substitute(i, *zero) for i in idx]
    # Each dim's index is its origin plus a sum of lanes; the witness gives the element's offset in the box
    # to the first of them and 0 to the others.
    lane_of, box, zeroed = [], [], set()
    for i, o in zip(idx, origin):
        delta = z3.simplify(i - o)
        used = [k for k in range(len(acc.shape)) if str(LANES[k]) in free_consts(delta)]
        if free_consts(delta) - {str(LANES[k]) for k in used}:
            return None
        if not z3.is_int_value(z3.simplify(delta - sum((LANES[k] for k in used), z3.IntVal(0)), som=True)) or \
                z3.simplify(delta - sum((LANES[k] for k in used), z3.IntVal(0)), som=True).as_long() != 0:
            return None
        k = used[0] if used else None
        if k is not None and (k in lane_of or k in zeroed):
            return None
        lane_of.append(k)
        zeroed.update(used[1:])
        box.append(acc.shape[k] if k is not None else 1)
    if zeroed & set(lane_of):
        return None
    elem = [z3.Int(f"elem{k}") for k in range(len(idx))]
    witness = [(LANES[k], e - o) for k, e, o in zip(lane_of, elem, origin) if k is not None] + \
        [(LANES[k], z3.IntVal(0)) for k in zeroed]
    inside = [z3.And(0 <= e, e < n, o <= e, e < o + b) for e, n, o, b in zip(elem, shape, origin, box)]
    hole = z3.Not(z3.And(acc.mask, acc.ok if acc.ok is not None else z3.BoolVal(True),
                         base == 0))
    r, m, why = p.query(p.domain + p.pid_range() + iters + inside + [z3.substitute(hole, *witness)])
    if r == z3.sat and fixed is not None:
        return None
    if r == z3.sat:
        e = [_val(m, x) for x in elem]
        if not _hits(p, writes, name, e, m, view):
            return Outcome("counterexample", {"buffer": name, "element": _unmerged(p, name, view, e, m),
                                              "scalars": _scalars(p, m),
                                              "program_id": [_val(m, x) for x in PIDS[:len(p.grid)]],
                                              **_iterations(m, acc),
                                              "stored_by": "no program: its tile's program masks it off"})
        return None
    if r == z3.unknown:
        return None
    # The origins: multiples of the box, not negative, on the grid of tiles, one (program, iteration) each.
    pids2, _, subs = _second(p)
    ntiles = [(n + b - 1) / b for n, b in zip(shape, box)]
    aligned = [z3.Or(*[z3.Or(o < 0, o % b != 0) for o, b in zip(origin, box)])]
    if p.query(p.domain + p.pid_range() + iters + aligned)[0] != z3.unsat:
        return None
    distinct = z3.Or(*[a != b for a, b in zip(PIDS[:len(p.grid)], pids2)],
                     *[lp.it != _ren(lp.it, subs) for lp in acc.ctx.loops])
    same = [o == _ren(o, subs) for o in origin]
    if p.query(p.domain + p.pid_range() + p.pid_range(pids2) + iters + [_ren(c, subs) for c in iters]
               + [distinct] + same)[0] != z3.unsat:
        return None
    total = z3.IntVal(1)
    for t in ntiles:
        total = total * t
    r_out, m_out, _ = p.query(p.domain + p.pid_range() + iters + [z3.Or(*[o >= n for o, n in zip(origin, shape)])])
    r_few, m_few, _ = p.query(p.domain + [count < total])
    if r_out == z3.unsat and r_few == z3.unsat:
        return Outcome("proved")
    if fixed is not None:
        return None
    # Injective onto the tiles but a program lands off the grid, or fewer programs than tiles: some tile
    # is written by no program (pigeonhole).
    m = m_out if r_out == z3.sat else m_few if r_few == z3.sat else None
    if m is None:
        return None
    if r_out == z3.sat and not z3.is_true(m.eval(count <= total, model_completion=True)):
        return None  # more programs than tiles: one off the grid need not leave a tile without one
    writers = "(program, iteration) pairs" if acc.ctx.loops else "programs"
    cx = {"buffer": name, "scalars": _scalars(p, m), "stored_by": f"no program (more tiles than {writers} on them)"}
    if r_out == z3.sat:
        cx["program_id"] = [_val(m, x) for x in PIDS[:len(p.grid)]]
        cx.update(_iterations(m, acc))
        cx["tile_origin"] = [_val(m, o) for o in origin]
        cx["stored_by"] = "no program: this program's tile lies outside the buffer, so one tile has none"
    return Outcome("counterexample", cx)


def _sliced(p: Problem, name, buf, writes) -> bool:
    """Whether, along some dim of small constant size (the two halves of a partials row), each slice of the
    buffer is covered by one store that never leaves it (several stores, one slice each)."""
    for dim, n in enumerate(buf.shape):
        size = z3.simplify(n.z3(p.env))
        if not z3.is_int_value(size) or not 2 <= size.as_long() <= 8:
            continue
        if all(any(o is not None and o.status == "proved" for o in (_tiles(p, a, name, writes, (dim, j))
                                                                      for a in writes))
               for j in range(size.as_long())):
            return True
    return False


def _unwritten(p: Problem, name, buf, writes, fix=(), timeout_ms=None):
    """(result, model or the solver's reason, element index terms, its offset) of the quantified query for
    an element of ``name`` that no write stores (``fix`` pins scalars)."""
    idx = [z3.Int(f"elem{k}") for k in range(len(buf.shape))]
    shape = [s.z3(p.env) for s in buf.shape]
    strides = [s.z3(p.env) for s in buf.strides]
    target = sum((i * s for i, s in zip(idx, strides)), z3.IntVal(0))
    esize = p.buffers[name][1]
    not_hit = []
    for a in writes:
        # By index, a hit is only one way to write the element: sound for a proof; a counterexample
        # then needs the view to be injective.
        vs, body = _hit(a, target * esize // max(a.esize, 1) if a.esize != esize else target, p,
                        idx if a.esize == esize else None)
        not_hit.append(z3.ForAll(vs, z3.Not(body)))
    r, m, why = solve(p.domain + list(fix) + [z3.And(0 <= i, i < n) for i, n in zip(idx, shape)] + not_hit,
                      timeout_ms or p.timeout_ms)
    return r, (m if r == z3.sat else why), idx, target


def coverage(p: Problem) -> Outcome:
    outs = [(name, b) for name, (_, _, b) in p.buffers.items() if b.output]
    if not outs:
        return Outcome("unknown", reason="the contract names no output buffer")
    unknown = []
    for name, buf in outs:
        writes = [a for a in p.enc.accesses if a.buffer == name and a.kind in ("store", "atomic")]
        bad = [a for a in writes if a.reason or not a.mask_exact]
        if bad:
            unknown.append(f"{name}: {bad[0].op} at {bad[0].loc} not modelled ({bad[0].reason or 'its mask'})")
            continue
        tiled = [o for o in (_tiles(p, a, name, writes) for a in writes) if o is not None]
        if any(o.status == "proved" for o in tiled) or _sliced(p, name, buf, writes):
            continue
        for o in tiled:
            cx = o.counterexample
            if "element" not in cx:
                # A count argument over one store: the element it leaves may be another store's, so the
                # counterexample stands only with an element that no write stores, at its scalars.
                fix = [p.env[k] == cx["scalars"][k] for k in p.scalar_names if k in cx["scalars"]]
                # over one store the count alone stands, and the element is a courtesy: a short budget
                budget = p.timeout_ms if len(writes) > 1 else min(p.timeout_ms, NAMING_TIMEOUT_MS)
                r, m, idx, _ = _unwritten(p, name, buf, writes, fix, budget)
                if r == z3.sat:
                    cx["element"] = [_val(m, i) for i in idx]
                    if len(writes) > 1:
                        cx["stored_by"] = "no program: none of the stores reaches it"
                elif len(writes) > 1:
                    continue
            return o
        r, m, idx, target = _unwritten(p, name, buf, writes)
        if r == z3.sat and not injective(p, name):
            unknown.append(f"{name}: element {[_val(m, i) for i in idx]} not written by index, and the view may overlap")
            continue
        if r == z3.sat:
            return Outcome("counterexample", {"buffer": name, "element": [_val(m, i) for i in idx],
                                              "offset": _val(m, target), "scalars": _scalars(p, m),
                                              "stored_by": "no program"})
        if r == z3.unknown:
            unknown.append(f"{name}: solver {m} on the quantified coverage query")
    return Outcome("unknown", reason="; ".join(unknown)) if unknown else Outcome("proved")


def accumulate(p: Problem, contraction) -> Outcome:
    """Each index of the contracted dim reaches each output element exactly once. The load of the
    contracted operand (``contraction.load``, dim ``contraction.axis``) and the write of the output share
    their other dims' lanes (the tile's rows stay rows): at most once is an existential query over two
    read events of one output element; at least once takes the witness iteration ``(k - k0) // step`` and
    lane ``(k - k0) % step`` of the program that writes the element, and is confirmed across programs
    before it is reported (a split reduction reads other indices in other programs)."""
    name, axis, out = contraction
    loads = [a for a in p.enc.accesses if a.buffer == name and a.kind == "load"]
    writes = [a for a in p.enc.accesses if a.buffer == out and a.kind in ("store", "atomic")]
    if len(loads) != 1 or not writes:
        return Outcome("unknown", reason=f"expected one load of {name} and a write of {out}, found "
                                         f"{len(loads)} and {len(writes)}")
    ld = loads[0]
    unknown = []
    for wr in writes:
        for a in (ld, wr):
            if a.reason or not a.mask_exact:
                return Outcome("unknown", reason=f"{a.op} at {a.loc} not modelled ({a.reason or 'its mask'})")
        dl, dw = indices(p, name, ld.offset, ld), indices(p, out, wr.offset, wr)
        if dl is None or dw is None or dl[2].merged:
            return Outcome("unknown", reason="the load or the write is not indexed dim by dim inside its buffer")
        # The tile dim of the load that walks the contracted buffer dim: the one lane in its index.
        kvars = free_consts(z3.simplify(dl[1][axis], som=True))
        walking = [d for d in range(len(ld.shape)) if str(LANES[d]) in kvars]
        if not walking and len(dl[1]) == len(ld.shape):
            # A contracted size pinned to 1 leaves the index constant; a tile of the buffer's rank keeps
            # the buffer's dim order, so the contracted dim is the tile's too.
            walking = [axis]
        if len(walking) != 1:
            return Outcome("unknown", reason=f"the contracted index of {name} is not walked by one tile dim")
        kdim = walking[0]
        if any(ld.shape[d] != wr.shape[d] for d in range(min(len(ld.shape), len(wr.shape))) if d != kdim):
            return Outcome("unknown", reason="the load's and the write's tiles differ in a shared dim")
        inner = [lp for lp in ld.ctx.loops if all(not lp.it.eq(w.it) for w in wr.ctx.loops)]
        kl = z3.Int("klane")
        to_k = [(LANES[kdim], kl)]
        kidx = z3.substitute(dl[1][axis], *to_k)
        read = (lanes_in(wr.shape) + [0 <= kl, kl < ld.shape[kdim]]
                + [z3.substitute(c, *to_k) for c in ld.ctx.conds] + [z3.substitute(ld.mask, *to_k)]
                + ([z3.substitute(ld.ok, *to_k)] if ld.ok is not None else []))
        write = _conds(wr.ctx) + [wr.mask] + ([wr.ok] if wr.ok is not None else [])
        pids2, lanes2, subs = _second(p)
        subs2 = subs + [(kl, z3.Int("klane_b"))]
        distinct = z3.Or(*([a != b for a, b in zip(PIDS[:len(p.grid)], pids2)] + [kl != z3.Int("klane_b")]
                           + [lp.it != _ren(lp.it, subs) for lp in inner]))
        q = (p.domain + p.pid_range() + p.pid_range(pids2) + read + write + [_ren(c, subs2) for c in read + write]
             + [a == _ren(b, subs) for a, b in zip(dw[1], dw[1])] + [kidx == _ren(kidx, subs2), distinct])
        r, m, why = p.query(q)
        if r == z3.sat:
            return Outcome("counterexample", {
                "output": out, "element": [_val(m, i) for i in dw[1]], "contraction_index": _val(m, kidx),
                "scalars": _scalars(p, m), "reads": "twice",
                "first": {**_where(p, m, ld.shape, ld.ctx), "k_lane": _val(m, kl)},
                "second": {**_where(p, m, ld.shape, ld.ctx, pids2, lanes2, subs), "k_lane": _val(m, z3.Int("klane_b"))}})
        if r == z3.unknown:
            unknown.append(f"at most once: solver {why}")
            continue
        # At least once, by the witness iteration and lane of the writing program.
        if len(inner) > 1:
            unknown.append("at least once: the contracted load is in more than one loop of its own")
            continue
        kk = z3.Int("contraction_index")
        extent = p.buffers[name][2].shape[axis].z3(p.env)
        if z3.is_int_value(z3.simplify(extent)) and z3.simplify(extent).as_long() == 1:
            # One index (a size pinned to 1): the first iteration's first lane reads it.
            form, step = kidx, z3.IntVal(1)
            wit = [(kl, z3.IntVal(0))] + ([(inner[0].it, z3.IntVal(0))] if inner else [])
        elif inner:
            it = inner[0].it
            k0 = z3.substitute(kidx, (it, z3.IntVal(0)), (kl, z3.IntVal(0)))
            step = z3.simplify(z3.substitute(kidx, (it, z3.IntVal(1)), (kl, z3.IntVal(0))) - k0)
            form = k0 + it * step + kl
            wit = [(it, (kk - k0) / step), (kl, (kk - k0) % step)]
        else:  # a loop of one iteration that the compiler removed: the lanes alone
            k0 = z3.substitute(kidx, (kl, z3.IntVal(0)))
            step, form, wit = z3.IntVal(1), k0 + kl, [(kl, kk - k0)]
        rest = z3.simplify(kidx - form, som=True)
        if not (z3.is_int_value(rest) and rest.as_long() == 0):
            unknown.append("at least once: the contraction index is not k0 + iteration * step + lane")
            continue
        miss = z3.Not(z3.And(*[z3.substitute(c, *wit) for c in read], z3.substitute(kidx, *wit) == kk))
        q = p.domain + p.pid_range() + lanes_in(wr.shape) + write + [0 <= kk, kk < extent, step > 0, miss]
        r, m, why = p.query(q)
        if r == z3.unknown:
            unknown.append(f"at least once: solver {why}")
            continue
        if r == z3.sat:
            # Another program may read it (a split reduction): look for any read event at these scalars.
            fix = [p.env[k] == m.eval(p.env[k], model_completion=True) for k in p.scalar_names]
            elem = [m.eval(i, model_completion=True) for i in dw[1]]
            other = (p.domain + fix + p.pid_range(pids2) + [_ren(c, subs2) for c in read + write]
                     + [_ren(i, subs) == e for i, e in zip(dw[1], elem)] + [_ren(kidx, subs2) == m.eval(kk)])
            r2, _, why2 = p.query(other)
            if r2 == z3.unsat:
                return Outcome("counterexample", {"output": out, "element": [e.as_long() for e in elem],
                                                  "contraction_index": _val(m, kk), "scalars": _scalars(p, m),
                                                  "reads": "never"})
            unknown.append("at least once: the reduction is split across programs, which is not modelled")
    return Outcome("unknown", reason="; ".join(unknown)) if unknown else Outcome("proved")
