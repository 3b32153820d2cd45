"""The properties, each a set of z3 queries over one encoded kernel variant and its contract's domain
(UNSAT of the negated property = proved): ``bounds`` (every masked access inside its buffer),
``overflow`` (no integer operation wraps its width, no division by zero), ``race`` (no two distinct
programs store the same element non-atomically), ``coverage`` (every element of each output buffer is
stored by some program) and ``accumulate`` (each contraction index reaches each output element exactly
once). A query that times out, or an access the encoder could not model, gives unknown; a property that
assumed no wrap is proved only when ``overflow`` is."""

from __future__ import annotations

import time
from dataclasses import dataclass

import z3

from ceiling.verify.encoding import LANES, PIDS, Access, Encoder, conj, lanes_in

PROPERTIES = ("bounds", "overflow", "race", "coverage", "accumulate")
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
    return {k: _val(model, v) for k, v in p.env.items() if not isinstance(v, int)}


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
            q = (p.domain + p.pid_range() + p.pid_range(pids2) + lanes_in(s1.shape) + lanes_b + _conds(s1.ctx)
                 + [_ren(c, subs) for c in s2.ctx.conds]
                 + [s1.mask, s1.ok, _ren(s2.mask, subs), _ren(s2.ok, subs), distinct,
                    s1.offset * s1.esize == _ren(s2.offset, subs) * s2.esize])
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


def _hit(acc: Access, target, p: Problem):
    """The conditions under which access ``acc`` (its program, lanes, iterations free) writes element
    offset ``target``, with the variables to quantify."""
    loops = [lp.it for lp in acc.ctx.loops]
    body = z3.And(*(p.pid_range() + lanes_in(acc.shape) + _conds(acc.ctx) + list(p.enc.defs) +
                    [acc.mask] + ([acc.ok] if acc.ok is not None else []) + [acc.offset == target]))
    return PIDS[:max(len(p.grid), 1)] + LANES[:len(acc.shape)] + loops + list(p.enc.div_vars), body


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
            vs, body = _hit(a, target * esize // max(a.esize, 1) if a.esize != esize else target, p)
            not_hit.append(z3.ForAll(vs, z3.Not(body)))
        q = p.domain + [z3.And(0 <= i, i < n) for i, n in zip(idx, shape)] + not_hit
        r, m, why = solve(q, p.timeout_ms)
        if r == z3.sat:
            return Outcome("counterexample", {"buffer": name, "element": [_val(m, i) for i in idx],
                                              "offset": _val(m, target), "scalars": _scalars(p, m),
                                              "stored_by": "no program"})
        if r == z3.unknown:
            unknown.append(f"{name}: solver {why} on the quantified coverage query")
    return Outcome("unknown", reason="; ".join(unknown)) if unknown else Outcome("proved")


def accumulate(p: Problem, contraction) -> Outcome:
    """Each contraction index reaches each output element exactly once: the load of the contracted
    operand, in the same program instance as the write of the output element (the load's non-contracted
    dims the write's lanes), reads each index in [0, extent) under exactly one (program, iteration, lane)."""
    if contraction is None:
        return Outcome("proved", reason=None) if False else Outcome("unknown", reason="the contract names no contraction")
    loads = [a for a in p.enc.accesses if a.buffer == contraction.load and a.kind == "load"]
    writes = [a for a in p.enc.accesses if a.buffer == contraction.output and a.kind in ("store", "atomic")]
    if not loads or not writes:
        return Outcome("unknown", reason=f"no load of {contraction.load} or no write of {contraction.output}")
    for a in loads + writes:
        if a.reason or not a.mask_exact:
            return Outcome("unknown", reason=f"{a.op} at {a.loc} not modelled ({a.reason or 'its mask'})")
    buf = p.buffers[contraction.load][2]
    out = p.buffers[contraction.output][2]
    axis = contraction.axis
    lmap = dict(enumerate(contraction.lanes)) if contraction.lanes else None
    pids2, lanes2, subs = _second(p)
    unknown = []
    kk = z3.Int("contraction_index")
    k_extent = buf.shape[axis].z3(p.env)
    for ld in loads:
        for wr in writes:
            # Tie the load's non-contracted dims to the write's lanes; the contracted dim is its own lane.
            other = [d for d in range(len(ld.shape)) if d != axis]
            tie = lmap or {d: d for d in other}
            wl = [z3.Int(f"wlane{k}") for k in range(len(wr.shape))]
            wsubs = [(LANES[k], wl[k]) for k in range(len(wr.shape))]
            ties = [LANES[d] == wl[tie[d]] for d in other if tie.get(d) is not None and tie[d] < len(wr.shape)]
            # The contraction index a load lane reads: its address's coordinate along the axis.
            st = [s.z3(p.env) for s in buf.strides]
            kcoord = z3.Int("kcoord")
            rowc = [z3.Int(f"coord{d}") for d in range(len(buf.shape))]
            coord_ok = [ld.offset == sum((c * s for c, s in zip(rowc, st)), z3.IntVal(0)), kcoord == rowc[axis]] + \
                       [z3.And(0 <= c, c < n.z3(p.env)) for c, n in zip(rowc, buf.shape)]
            inst = (lanes_in(ld.shape) + [z3.And(0 <= w, w < n) for w, n in zip(wl, wr.shape)] + _conds(ld.ctx)
                    + [z3.substitute(c, *wsubs) for c in wr.ctx.conds] + [ld.mask, z3.substitute(wr.mask, *wsubs)]
                    + [c for c in (ld.ok, _ren(wr.ok, wsubs) if wr.ok is not None else None) if c is not None] + ties)
            inst2 = [_ren(c, subs) for c in inst]
            wl2 = [z3.Int(f"wlane{k}_b") for k in range(len(wr.shape))]
            inst2 = [z3.substitute(c, *zip(wl, wl2)) for c in inst2]
            coord2 = [z3.substitute(_ren(c, subs), *([(kcoord, z3.Int("kcoord_b"))] + [(c0, z3.Int(f"coord{d}_b"))
                                                                                      for d, c0 in enumerate(rowc)]))
                      for c in coord_ok]
            same_out = z3.substitute(wr.offset, *wsubs) == z3.substitute(_ren(wr.offset, subs), *zip(wl, wl2))
            differs = z3.Or(*([a != b for a, b in zip(PIDS[:len(p.grid)], pids2)]
                              + [LANES[axis] != lanes2[axis]]
                              + [lp.it != _ren(lp.it, subs) for lp in ld.ctx.loops]))
            q = (p.domain + p.pid_range() + p.pid_range(pids2) + inst + inst2 + coord_ok + coord2
                 + [same_out, z3.Int("kcoord") == z3.Int("kcoord_b"), differs])
            r, m, why = p.query(q, subs)
            if r == z3.sat:
                return Outcome("counterexample", {
                    "output": contraction.output, "contraction_index": _val(m, kcoord), "scalars": _scalars(p, m),
                    "output_offset": _val(m, z3.substitute(wr.offset, *wsubs)),
                    "first": _where(p, m, ld.shape, ld.ctx),
                    "second": _where(p, m, ld.shape, ld.ctx, pids2, lanes2, subs),
                    "reads": "twice"})
            if r == z3.unknown:
                unknown.append(f"at most once: solver {why}")
            # At least once: some output element and index in range that no instance reads.
            # One quantified query over the instance's variables.
            qs = [z3.Int(f"q_out{k}") for k in range(len(out.shape))]
            ost = [s.z3(p.env) for s in out.strides]
            otarget = sum((c * s for c, s in zip(qs, ost)), z3.IntVal(0))
            vs = PIDS[:len(p.grid)] + LANES[:len(ld.shape)] + wl + [lp.it for lp in ld.ctx.loops] + \
                [lp.it for lp in wr.ctx.loops if all(not lp.it.eq(x.it) for x in ld.ctx.loops)] + rowc + [kcoord] + \
                list(p.enc.div_vars)
            body = z3.And(*(p.pid_range() + inst + coord_ok + list(p.enc.defs) + [z3.substitute(wr.offset, *wsubs) == otarget,
                                                               kcoord == kk]))
            q = p.domain + [z3.And(0 <= c, c < n.z3(p.env)) for c, n in zip(qs, out.shape)] + \
                [0 <= kk, kk < k_extent, z3.ForAll(vs, z3.Not(body))]
            r, m, why = solve(q, p.timeout_ms)
            if r == z3.sat:
                return Outcome("counterexample", {"output": contraction.output,
                                                  "element": [_val(m, c) for c in qs], "contraction_index": _val(m, kk),
                                                  "scalars": _scalars(p, m), "reads": "never"})
            if r == z3.unknown:
                unknown.append(f"at least once: solver {why} on the quantified query")
    return Outcome("unknown", reason="; ".join(unknown)) if unknown else Outcome("proved")
