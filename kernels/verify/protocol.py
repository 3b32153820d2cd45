"""The ``protocol`` property of the Gluon warp-specialized attention kernels: each config of their space
(``kernels/spaces/attention_gluon.json``: every NUM_STAGES, ping-pong or not, every key/query block, at
every head dim the kernels take, causal and not) is compiled to TTGIR for sm_90a on the CPU (in a
subprocess: a Gluon compile can abort the process), its mbarrier protocol is read per partition
(:mod:`ceiling.verify.ttgir`) for one program of a problem long enough to wrap each ring twice and
to run two tiles (forward, persistent), and every interleaving is model-checked
(:mod:`ceiling.verify.barriers`). Configs whose extracted protocols are identical share one check.
Planted bugs (small ring programs and mutated TTGIR) must give counterexamples, their twins proofs."""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import re
import subprocess
import sys
import time

from ceiling.verify import barriers, ttgir
from ceiling.verify.result import Result, Status

PROPERTY = "protocol"
TARGET = "sm_90a"
COMPILE_S = (30, 15)  # a compile subprocess's time limit: a start-up allowance plus this much per kernel
CHUNK = 12  # kernels per compile subprocess


# ------------------------------------------------------------------ configs and TTGIR


def space_points(direction: str) -> list[tuple[int, bool, dict]]:
    """(head dim, causal, knobs) of every point of the Gluon space for ``direction`` ("fwd"/"bwd") that
    its constraints allow at that head dim (bf16; the search-only register bound included: the
    search never proposes a point past it)."""
    from ceiling import spaces
    from ceiling.nvidia.gluon.attention import head_dims

    space = spaces.get("attention_gluon", TARGET)
    flat = space.flat()
    keys = [k.split(".", 1)[1] for k in flat if k.startswith(direction + ".")]
    values = [flat[f"{direction}.{k}"].values for k in keys]
    return [(d, causal, knobs) for d in head_dims(direction) for causal in (False, True)
            for knobs in (dict(zip(keys, combo)) for combo in itertools.product(*values))
            if not space.broken({direction: knobs}, {"head_dim": d, "dtype_bytes": 2})]


_COMPILE = r"""
import json, sys
from ceiling.nvidia.gluon import static_check as sc
from triton.compiler.compiler import make_backend
from triton.backends.compiler import GPUTarget
from triton._C.libtriton import ir
from triton.experimental.gluon._runtime import GluonASTSource
out = {}
for kernel, d, causal, knobs in json.loads(sys.stdin.read()):
    s = sc.spec(kernel, d, causal, knobs)
    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    names = list(s.fn.arg_names)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n, k in s.signature.items() if k.startswith("*")}
    src = GluonASTSource(s.fn, s.signature, s.constexprs, attrs)
    options = backend.parse_options(dict(num_warps=4, **src.parse_options()))
    ctx = ir.context(); ir.load_dialects(ctx); backend.load_dialects(ctx)
    stages = {}; backend.add_stages(stages, options, src.language)
    mod = src.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(), ctx)
    md = {"hash": "", "target": target, **options.__dict__}
    names = list(stages)
    for stage in names[names.index(src.ext):names.index("ttgir") + 1]:
        mod = stages[stage](mod, md)
    boxes = [(m["block_size"], m["swizzle"]) for m in md.get("tensordesc_meta") or []]
    out[json.dumps([kernel, d, causal, knobs])] = {"ttgir": str(mod), "constexprs": s.constexprs, "boxes": boxes}
sys.stdout.write(json.dumps(out))
"""


def compile_ttgir(points: list[tuple[str, int, bool, dict]], triton: str | None = None) -> dict:
    """{(kernel, head dim, causal, knobs) json: {"ttgir", "constexprs", "boxes"}} for the points
    (``boxes``: each descriptor's encoded box and swizzle, from the compiler's metadata), compiled in
    one subprocess through the launcher's own specs (``ceiling.nvidia.gluon.static_check.spec``),
    stopping at TTGIR (what runs, after the Gluon passes; the later LLVM/PTX stages are not read).
    ``triton``: a release to compile with instead of the running one (the device's, "3.6.0",
    installed apart by :mod:`ceiling.nvidia.gluon.pinned_triton`)."""
    env = None
    if triton is not None:
        from ceiling.nvidia.gluon import pinned_triton

        env = pinned_triton.environment(triton)
    out = {}
    for i in range(0, len(points), CHUNK):
        chunk = points[i:i + CHUNK]
        try:
            proc = subprocess.run([sys.executable, "-c", _COMPILE], input=json.dumps(chunk), capture_output=True,
                                  text=True, timeout=COMPILE_S[0] + COMPILE_S[1] * len(chunk), env=env)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the Gluon compile of {len(chunk)} kernels took over "
                               f"{COMPILE_S[0] + COMPILE_S[1] * len(chunk)} s") from None
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            raise RuntimeError(f"the Gluon compile failed (exit {proc.returncode}): {last[-300:]}")
        out.update(json.loads(proc.stdout))
    return out


# ------------------------------------------------------------------ the problem each program runs


def program(kernel: str, constexprs: dict) -> tuple[dict, dict]:
    """(scalar arguments, program) of one program in which every ring slot is refilled (the ring wraps
    twice) and the ring wraps within one tile, with a ragged last block so that every loop of the
    kernel (masked, full, tail) runs. Forward: one persistent program over two tiles (the Q slots and
    ping-pong turns are reused across them) of NUM_STAGES + 1 key blocks; causal, its second tile is
    the last query block, which sees all 2 * NUM_STAGES key blocks. Backward: the first key block,
    which all 2 * NUM_STAGES query blocks see."""
    s, d = constexprs["NUM_STAGES"], constexprs["HEAD_DIM"]
    bm, bn = constexprs["BLOCK_M"], constexprs["BLOCK_N"]
    if kernel == "fwd":
        if constexprs["CAUSAL"]:
            seqlen_q = seqlen_k = max(2 * bm, 2 * s * bn) - bn // 2
        else:
            seqlen_q, seqlen_k = 2 * bm, (s + 1) * bn - bn // 2  # the ring wraps within each tile
        n_mblocks = -(-seqlen_q // bm)
        args = dict(seqlen_q=seqlen_q, seqlen_k=seqlen_k, n_heads=1, group=1, n_mblocks=n_mblocks, n_bh=1)
        prog = {"pid": (0, 0, 0), "num_programs": (n_mblocks - 1, 1, 1)}  # pid 0: tiles 0 and n_mblocks - 1
        descs = {"q": seqlen_q, "o": seqlen_q, "k": seqlen_k, "v": seqlen_k}
    else:
        seqlen_q = 2 * s * bm - bm // 2
        seqlen_k = seqlen_q if constexprs["CAUSAL"] else bn
        args = dict(seqlen_q=seqlen_q, seqlen_k=seqlen_k, n_heads=1, group=1)
        prog = {"pid": (0, 0, 0), "num_programs": (-(-seqlen_k // bn), 1, 1)}
        descs = {"q": seqlen_q, "do": seqlen_q, "dq": seqlen_q, "k": seqlen_k, "v": seqlen_k}
        for v in ("lse", "delta"):
            args[f"desc_{v}.shape.0"], args[f"desc_{v}.stride.0"] = seqlen_q, 1
    for name, rows in descs.items():
        for i, v in enumerate((1, rows, d)):
            args[f"desc_{name}.shape.{i}"] = v
        for i, v in enumerate((rows * d, d, 1)):
            args[f"desc_{name}.stride.{i}"] = v
    return args, prog


def laps(proto: ttgir.Protocol) -> int:
    """How often the least-refilled slot of a ring is loaded (a ring: an allocation some slot of which
    is loaded more than once; a buffer loaded once, as the backward's K and V, is none)."""
    loads: dict = {}
    for _, events in proto.partitions:
        for e in events:
            if e.kind == "load":
                loads[e.slots[0]] = loads.get(e.slots[0], 0) + 1
    rings: dict = {}
    for slot, n in loads.items():
        rings.setdefault(slot[0], []).append(n)
    counts = [n for ns in rings.values() if max(ns) > 1 for n in ns]
    return min(counts) if counts else 0


def _key(proto: ttgir.Protocol) -> str:
    body = json.dumps([sorted(map(str, proto.barriers.items())),
                       [(n, [str(e) for e in evs]) for n, evs in proto.partitions]])
    return hashlib.sha256(body.encode()).hexdigest()


def check_ttgir(name: str, kernel: str, text: str, constexprs: dict, cache: dict | None = None) -> Result:
    """The protocol of one compiled kernel: proved, a counterexample trace, or unknown with the reason."""
    start = time.perf_counter()
    shown = {k: v for k, v in constexprs.items() if k not in ("CONSUMER_REGS", "PRODUCER_REGS")}
    try:
        args, prog = program(kernel, constexprs)
        proto = ttgir.protocol(text, args, prog)
    except ttgir.Unsupported as why:
        return Result(name, PROPERTY, Status.UNKNOWN, shown, time.perf_counter() - start,
                      reason=f"TTGIR not modelled: {why}")
    if laps(proto) < 2:
        return Result(name, PROPERTY, Status.UNKNOWN, shown, time.perf_counter() - start,
                      reason="the chosen problem does not refill every ring slot twice")
    key = _key(proto)
    verdict = cache.get(key) if cache is not None else None
    if verdict is None:
        verdict = barriers.check(proto)
        if cache is not None:
            cache[key] = verdict
    seconds = time.perf_counter() - start
    if verdict.ok:
        return Result(name, PROPERTY, Status.PROVED, shown, seconds)
    if verdict.kind == "state bound":
        return Result(name, PROPERTY, Status.UNKNOWN, shown, seconds, reason=verdict.message)
    cex = {**verdict.counterexample(), "problem": args, "program": prog}
    return Result(name, PROPERTY, Status.COUNTEREXAMPLE, shown, seconds, cex)


def _name(kernel: str, d: int, causal: bool, knobs: dict) -> str:
    return f"gluon.attention_{kernel}_d{d}{'_causal' if causal else ''}[" + \
        ",".join(f"{k}={v}" for k, v in sorted(knobs.items())) + "]"


def verify_points(points: list[tuple[str, int, bool, dict]], cache: dict | None = None,
                  triton: str | None = None) -> list[Result]:
    """Compile and check each (kernel, head dim, causal, knobs) point, a compile subprocess per
    :data:`CHUNK` points (a chunk that does not compile makes its points unknown, with the reason)."""
    cache = {} if cache is None else cache
    results = []
    for i in range(0, len(points), CHUNK):
        chunk = points[i:i + CHUNK]
        try:
            compiled = compile_ttgir(chunk, triton)
        except RuntimeError as err:
            results += [Result(_name(*p), PROPERTY, Status.UNKNOWN, {}, 0.0, reason=f"no TTGIR: {err}") for p in chunk]
            continue
        for p in chunk:
            c = compiled[json.dumps(list(p))]
            results.append(check_ttgir(_name(*p), p[0], c["ttgir"], c["constexprs"], cache))
    return results


def shipped_points() -> list[tuple[str, int, bool, dict]]:
    """The shipped configs (the sm_90a table's, per head dim), forward and backward, causal and not."""
    from ceiling.nvidia.gluon.attention import shipped

    return [(kernel, d, causal, entry[kernel]) for d, entry in shipped().items() for kernel in ("fwd", "bwd")
            if kernel in entry for causal in (False, True)]


def verify_all(scope: str = "space", triton: str | None = None) -> list[Result]:
    """``scope="space"``: every point of the Gluon space, forward and backward, each head dim, causal
    and not; ``"shipped"``: the shipped configs only. ``triton``: see :func:`compile_ttgir`."""
    if scope == "shipped":
        return verify_points(shipped_points(), triton=triton)
    points = [("fwd", d, c, k) for d, c, k in space_points("fwd")] + \
             [("bwd", d, c, k) for d, c, k in space_points("bwd")]
    return verify_points(points, triton=triton)


# ------------------------------------------------------------------ planted bugs


PLANTED = ("correct", "wrong_phase_producer", "wrong_phase_consumer", "missing_release", "early_overwrite",
           "tx_short_one_box", "tx_over_one_box")


@functools.cache
def ring(stages: int, tiles: int, bug: str = "correct", box: int = 8192) -> ttgir.Protocol:
    """A producer (TMA loads into ``stages`` ring slots) and two consumers (wgmma reads, then a
    release on the slot's ``empty`` barrier, count 2) over ``tiles`` tiles, with one planted bug."""
    E = ttgir.Event  # noqa: N806
    producer, consumers = [], [[], []]
    for i in range(tiles):
        s, lap = i % stages, (i // stages) & 1
        free_parity = lap if bug == "wrong_phase_producer" else lap ^ 1
        producer.append(E("wait", ("empty", s), free_parity))
        expect = {"tx_short_one_box": box, "tx_over_one_box": 3 * box}.get(bug, 2 * box)
        producer.append(E("expect", ("ready", s), expect))
        producer += [E("load", ("ready", s), box, (("ring_a", s),)), E("load", ("ready", s), box, (("ring_b", s),))]
        for c, events in enumerate(consumers):
            ready_parity = lap ^ 1 if bug == "wrong_phase_consumer" and c == 1 else lap
            events.append(E("wait", ("ready", s), ready_parity))
            events.append(E("mma", slots=(("ring_a", s), ("ring_b", s))))
            release = E("arrive", ("empty", s), 1)
            if bug == "early_overwrite" and c == 1:
                events += [release, E("mma_wait", value=0)]
            elif bug == "missing_release" and c == 1 and i == tiles - stages - 1:
                events.append(E("mma_wait", value=0))
            else:
                events += [E("mma_wait", value=0), release]
    bars = {**{("ready", s): 1 for s in range(stages)}, **{("empty", s): 2 for s in range(stages)}}
    return ttgir.Protocol(bars, [("consumer0", consumers[0]), ("consumer1", consumers[1]), ("producer", producer)])


def check_planted(bug: str, stages: int = 2) -> Result:
    """The planted ring ``bug`` at ``stages`` slots over enough tiles to wrap the ring twice and more."""
    start = time.perf_counter()
    verdict = barriers.check(ring(stages, 2 * stages + 2, bug))
    status = Status.PROVED if verdict.ok else Status.COUNTEREXAMPLE
    return Result(f"planted.ring.{bug}", PROPERTY, status, {"NUM_STAGES": stages}, time.perf_counter() - start,
                  None if verdict.ok else verdict.counterexample())


def mutate(text: str, bug: str) -> str:
    """A compiled TTGIR with one planted bug: ``tx_over_one_box`` (the first K expect announces one
    box more), ``missing_release`` (the default partition's first K-slot release removed),
    ``wrong_phase`` (the producer's first ring wait parity flipped), ``early_release`` (the default
    partition releases its first K slot before the wgmma reading it retires)."""
    lines = text.splitlines()
    if bug == "tx_over_one_box":
        for i, line in enumerate(lines):
            m = re.search(r"ttng\.barrier_expect (%\w+), (\d+)", line)
            if m and int(m.group(2)) > 8192:
                lines[i] = line.replace(f", {m.group(2)},", f", {2 * int(m.group(2))},", 1)
                return "\n".join(lines)
    if bug == "missing_release":
        start = next(i for i, line in enumerate(lines) if line.strip().startswith("default {"))
        for i in range(start, len(lines)):
            if "ttng.arrive_barrier" in lines[i] and "k_empty" in lines[i - 1]:
                return "\n".join(lines[:i] + lines[i + 1:])
    if bug == "wrong_phase":
        start = next(i for i, line in enumerate(lines) if line.strip().startswith("partition1("))
        for i in range(start, len(lines)):
            m = re.search(r"ttng\.wait_barrier (%\w+), (%\w+)", lines[i])
            if m and "arith.xori" in "\n".join(lines[i - 4:i]):
                xor = next(j for j in range(i - 4, i) if "arith.xori" in lines[j])
                lines[xor] = re.sub(r"arith\.xori (%\w+), (%\w+)", r"arith.ori \1, \1", lines[xor])
                return "\n".join(lines)
    if bug == "early_release":
        start = next(i for i, line in enumerate(lines) if line.strip().startswith("default {"))
        for i in range(start, len(lines) - 2):
            if "ttng.warp_group_dot_wait" in lines[i] and "k_empty" in lines[i + 1] and \
                    "ttng.arrive_barrier" in lines[i + 2]:
                lines[i:i + 3] = [lines[i + 1], lines[i + 2], lines[i]]
                return "\n".join(lines)
    raise ValueError(f"no site for {bug!r} in this TTGIR")
