"""Verifying a contract: per target and constexpr combination, the variants Triton's launcher would compile
(each integer argument i32 or i64 by its range, specialised to a constant where it is 1, with
``tt.divisibility`` where the domain makes it a multiple of 16), each compiled, encoded and checked for
every property; one :class:`Result` per (target, combination, property), the worst over the variants."""

from __future__ import annotations

import itertools
import time

import z3

from ceiling.verify.errors import ContractError
from ceiling.verify import properties as props
from ceiling.verify.contract import Contract
from ceiling.verify.encoding import Encoder, Val, pointee_size
from ceiling.verify.ir import INT32_MAX, compile_ttir, dtype_info
from ceiling.verify.result import Result, Status


def _domain(contract: Contract, combo: dict):
    """(env: name -> z3 term or int, constraints) for one constexpr combination."""
    env: dict = dict(combo)
    for name in contract.domain_scalars():
        env[name] = z3.Int(name)
    cons = []
    for s in contract.domain_scalars().values():
        v = env[s.name]
        if s.expr is not None:
            cons.append(v == s.expr.z3(env))
        else:
            cons.append(z3.And(s.lo <= v, v <= s.hi))
    cons += [c.z3(env) for c in contract.assume]
    return env, cons


def _implied(cons, fact) -> bool:
    s = z3.Solver()
    s.set(timeout=2000)
    s.add(*cons, z3.Not(fact))
    return s.check() == z3.unsat


def _possible(cons, fact) -> bool:
    s = z3.Solver()
    s.set(timeout=2000)
    s.add(*cons, fact)
    return s.check() != z3.unsat


def variants(contract: Contract, combo: dict):
    """Each (extra constraints, signature, constexprs, divisible) the launcher can produce over the domain."""
    env, cons = _domain(contract, combo)
    if not _possible(cons, z3.BoolVal(True)):
        raise ContractError(f"scalars: the domain is empty for {combo} (check [assume])")
    base_sig = {}
    for name, b in contract.buffers.items():
        base_sig[name] = "*" + dtype_info(b.dtype, f"buffers.{name}.dtype")[0]
    divisible = [n for n in contract.buffers]
    widths = {}
    for name in contract.scalars:
        v = env[name]
        big = _possible(cons, z3.Or(v > INT32_MAX, v < -(2**31)))
        small = _possible(cons, z3.And(v <= INT32_MAX, v >= -(2**31)))
        widths[name] = [w for w, ok in (("i32", small), ("i64", big)) if ok]
        if _implied(cons, v % 16 == 0):
            divisible.append(name)
    # An argument the domain pins to 1 is always the constant (Triton's launcher specialises it every call).
    pinned = [n for n in contract.scalars if _implied(cons, env[n] == 1)]
    out = []
    # i32/i64: every combination of the arguments whose range straddles 2^31.
    split = [n for n, w in widths.items() if len(w) > 1]
    for choice in itertools.product(*(widths[n] for n in split)):
        sig, extra = dict(base_sig), []
        for n in contract.scalars:
            w = dict(zip(split, choice)).get(n, widths[n][0])
            sig[n] = w
            if n in split:
                v = env[n]
                extra.append(z3.And(v <= INT32_MAX, v >= -(2**31)) if w == "i32" else
                             z3.Or(v > INT32_MAX, v < -(2**31)))
        base_ce = dict(combo, **{n: 1 for n in pinned})
        base = {k: v for k, v in sig.items() if k not in pinned}
        div = [d for d in divisible if d not in pinned]
        out.append((extra, base, base_ce, div, tuple(pinned)))
        # A value of 1 is compiled as a constant: one variant per ranged argument that can be 1, with every
        # argument that is then 1 too (a stride equal to that size) also a constant, as in that launch.
        # The general variant covers the rest.
        for n, spec in contract.scalars.items():
            if spec.expr is not None or n in pinned or sig[n] != "i32" or not _possible(cons + extra, env[n] == 1):
                continue
            ones = [m for m in contract.scalars if m not in pinned and _implied(cons + extra + [env[n] == 1], env[m] == 1)]
            s1 = {k: v for k, v in base.items() if k not in ones}
            out.append((extra + [env[n] == 1], s1, dict(base_ce, **{m: 1 for m in ones}),
                        [d for d in div if d not in ones], tuple(pinned) + tuple(ones)))
    return env, cons, out


def _args(kernel, contract, env) -> dict:
    args = {}
    for name, t in zip(kernel.arg_names, kernel.arg_types):
        if name in contract.buffers:
            args[name] = Val("ptr", (), z3.IntVal(0), 64, name, pointee_size(t))
        elif name in contract.scalars:
            args[name] = Val("int", (), env[name], 64 if t == "i64" else 32)
        else:
            args[name] = Val("opaque", (), reason=f"argument {name} of type {t}")
    return args


def _worst(outcomes):
    for o in outcomes:
        if o.status == "counterexample":
            return o
    unknown = [o for o in outcomes if o.status == "unknown"]
    if unknown:
        return props.Outcome("unknown", reason="; ".join(dict.fromkeys(o.reason for o in unknown)))
    return props.Outcome("proved")


def verify(contract: Contract, properties=None, targets=None, timeout_ms=props.DEFAULT_TIMEOUT_MS,
           combinations=None) -> list[Result]:
    """Every (target, constexpr combination, property) of ``contract`` as a :class:`Result`."""
    properties = list(properties or [p for p in props.PROPERTIES if p != "accumulate" or contract.contraction])
    for p in properties:
        if p not in props.PROPERTIES:
            raise ContractError(f"properties: unknown {p!r} (expected {', '.join(props.PROPERTIES)})")
    results = []
    for target in targets or contract.targets:
        for combo in combinations or contract.combinations():
            per = {p: [] for p in properties}
            secs = {p: 0.0 for p in properties}
            env, cons, vs = variants(contract, combo)
            for extra, sig, ce, div, one in vs:
                t0 = time.perf_counter()
                kernel = compile_ttir(contract.fn, dict(sig), ce, tuple(div), target)
                venv, vcons = dict(env), cons + extra
                for n in one:  # the argument is the constant 1 in this compile: so it is in every term
                    venv[n] = z3.IntVal(1)
                    vcons = [z3.substitute(c, (env[n], z3.IntVal(1))) for c in vcons]
                grid = [g.z3(venv) for g in contract.grid]
                enc = Encoder(kernel, _args(kernel, contract, venv), grid, vcons)
                bufs = {n: (b.extent(venv), dtype_info(b.dtype, n)[1], b) for n, b in contract.buffers.items()}
                defined = {n: s.expr.z3(venv) for n, s in contract.domain_scalars().items()
                           if s.expr is not None and n not in one}
                problem = props.Problem(enc, venv, vcons + [g >= 0 for g in grid], grid, bufs, timeout_ms,
                                        tuple(contract.domain_scalars()), defined)
                setup = time.perf_counter() - t0
                ovf = None
                for p in properties:
                    t1 = time.perf_counter()
                    o = props.accumulate(problem, contract.contraction) if p == "accumulate" else \
                        getattr(props, p)(problem)
                    if p == "overflow":
                        ovf = o
                    per[p].append(o)
                    secs[p] += time.perf_counter() - t1 + setup / len(properties)
                if ovf is None and any(p != "overflow" for p in properties):
                    ovf = props.overflow(problem)
                # The others were proved assuming no operation wraps: only as good as overflow.
                for p in properties:
                    o = per[p][-1]
                    if p != "overflow" and o.status == "proved" and ovf.status != "proved":
                        per[p][-1] = props.Outcome("unknown", reason="proved only where no integer operation "
                                                                     "wraps, and overflow is not proved")
                    # A missing write or read may come from a wrapped operation the exact encoding
                    # leaves out (bounds and race counterexamples assume no wrap, so they stand).
                    if p in ("coverage", "accumulate") and o.status == "counterexample" and ovf.status != "proved":
                        per[p][-1] = props.Outcome("unknown", reason=f"an element is missed under exact arithmetic "
                                                                     f"({o.counterexample}), but overflow is not proved")
            for p in properties:
                o = _worst(per[p])
                cx = o.counterexample
                if cx is not None:
                    safe = {k: v if isinstance(v, (int, float, bool, str)) else str(v) for k, v in combo.items()}
                    cx = {**cx, "constexprs": safe, "target": target}
                results.append(Result(f"{contract.name}@{target}", p, Status(o.status), dict(combo), secs[p], cx,
                                      o.reason))
    return results
