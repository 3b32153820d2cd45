"""The properties, each a set of z3 queries over one encoded kernel variant and its contract's domain
(UNSAT of the negated property = proved): ``bounds`` (every masked access inside its buffer),
``overflow`` (no integer operation wraps its width, no division by zero), ``race`` (no two distinct
programs store the same element non-atomically), and ``coverage`` (every element of each output buffer is
stored by some program). A query that times out, or an access the encoder could not model, gives unknown; a property that
assumed no wrap is proved only when ``overflow`` is."""

from __future__ import annotations

import time
from dataclasses import dataclass

import z3

from ceiling.verify.encoding import LANES, PIDS, Access, Encoder, conj, lanes_in

PROPERTIES = ("bounds", "overflow", "race", "coverage")
DEFAULT_TIMEOUT_MS = 10_000


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

    def query(self, constraints, subs=None):
        """Solve with the divisions' cheap facts first (an UNSAT there is a proof), then exactly. ``subs``
        renames a second program instance's variables: its divisions are added too."""
        facts, defs = list(self.enc.facts), list(self.enc.defs)
        if subs:
            facts += [z3.substitute(f, *subs) for f in self.enc.facts]
            defs += [z3.substitute(d, *subs) for d in self.enc.defs]
        if facts:
            r, m, why = solve(constraints + facts, max(self.timeout_ms // 4, 500))
            if r == z3.unsat:
                return r, m, why
        return solve(constraints + facts + defs, self.timeout_ms)

    def pid_range(self, pids=PIDS):
        return [z3.And(0 <= p, p < g) for p, g in zip(pids, self.grid)] + [p == 0 for p in pids[len(self.grid):]]


def solve(constraints, timeout_ms):
    s = z3.Solver()
    s.set(timeout=int(timeout_ms))
    s.add(*[c for c in constraints if c is not None])
    r = s.check()
    return r, (s.model() if r == z3.sat else None), (s.reason_unknown() if r == z3.unknown else None)


def _val(model, term):
    v = model.eval(term, model_completion=True)
    return v.as_long() if z3.is_int_value(v) else (z3.is_true(v) if z3.is_bool(v) else str(v))


def _scalars(p: Problem, model) -> dict:
    return {k: _val(model, v) for k, v in p.env.items() if not isinstance(v, int) or k in p.scalar_names}


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


def indices(p: Problem, name: str, offset):
    """The element index per dim of an address into buffer ``name``, when the buffer's strides are
    distinct integer arguments and the address is linear in them (``sum(index_k * stride_k)``, which
    z3 compares dim by dim far faster than the products); None otherwise."""
    buf = p.buffers[name][2]
    strides = [s.z3(p.env) for s in buf.strides]
    if not all(z3.is_const(t) and not z3.is_int_value(t) for t in strides) or len({str(t) for t in strides}) < len(strides):
        return None
    zero = [(t, z3.IntVal(0)) for t in strides]
    base = z3.substitute(offset, *zero)
    idx = [z3.substitute(offset, *[(t, z3.IntVal(1 if j == k else 0)) for j, t in enumerate(strides)]) - base
           for k in range(len(strides))]
    rest = z3.simplify(offset - base - sum((i * t for i, t in zip(idx, strides)), z3.IntVal(0)), som=True)
    if not (z3.is_int_value(rest) and rest.as_long() == 0):
        return None
    return base, idx


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
    divs2 = [z3.Int(f"{d}_b") for d in p.enc.div_vars]
    return pids2, lanes2, (list(zip(PIDS, pids2)) + list(zip(LANES, lanes2)) + list(zip(its, its2))
                           + list(zip(p.enc.div_vars, divs2)))


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
            d1, d2 = indices(p, s1.buffer, s1.offset), indices(p, s2.buffer, s2.offset)
            by_index = d1 is not None and d2 is not None and s1.esize == s2.esize and injective(p, s1.buffer)
            if by_index:  # an injective view: the same element is the same index in every dim
                same = z3.And(d1[0] == _ren(d2[0], subs), *[a == _ren(b, subs) for a, b in zip(d1[1], d2[1])])
            q = (p.domain + p.pid_range() + p.pid_range(pids2) + lanes_in(s1.shape) + lanes_b + _conds(s1.ctx)
                 + [_ren(c, subs) for c in s2.ctx.conds]
                 + [s1.mask, s1.ok, _ren(s2.mask, subs), _ren(s2.ok, subs), distinct, same])
            r, m, why = p.query(q, subs)
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
    d = indices(p, acc.buffer, acc.offset) if elem is not None else None
    at = [acc.offset == target] if d is None else [d[0] == 0] + [a == e for a, e in zip(d[1], elem)]
    body = z3.And(*(p.pid_range() + lanes_in(acc.shape) + _conds(acc.ctx) + list(p.enc.defs) +
                    [acc.mask] + ([acc.ok] if acc.ok is not None else []) + at))
    # Every program id is bound, the unused ones too (the grid pins them to 0).
    return PIDS + LANES[:len(acc.shape)] + loops + list(p.enc.div_vars), body


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
        q = p.domain + [z3.And(0 <= i, i < n) for i, n in zip(idx, shape)] + not_hit
        r, m, why = solve(q, p.timeout_ms)
        if r == z3.sat and not injective(p, name):
            unknown.append(f"{name}: element {[_val(m, i) for i in idx]} not written by index, and the view may overlap")
            continue
        if r == z3.sat:
            return Outcome("counterexample", {"buffer": name, "element": [_val(m, i) for i in idx],
                                              "offset": _val(m, target), "scalars": _scalars(p, m),
                                              "stored_by": "no program"})
        if r == z3.unknown:
            unknown.append(f"{name}: solver {why} on the quantified coverage query")
    return Outcome("unknown", reason="; ".join(unknown)) if unknown else Outcome("proved")
