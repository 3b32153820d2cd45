"""The mbarrier protocol of a warp-specialized kernel, read from its TTGIR text: the barriers the
kernel initializes before ``ttg.warp_specialize``, and per partition the sequence of protocol events
(waits with their parity, arrivals, ``barrier_expect`` transaction bytes, TMA loads into a shared
slot and the barrier they complete, asynchronous wgmma and TMA-store reads of slots and the waits
that retire them, plain shared loads and stores) that partition performs for one program of a
concrete problem. Scalars are evaluated exactly (i32 arithmetic, ``scf.for``/``scf.if``), so loop
trip counts, ring slots and phases are the compiled kernel's; anything a protocol value depends on
that is not modelled raises :class:`Unsupported`, never a guess."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i64": 8, "i32": 4, "f8E4M3FN": 1, "f8E5M2": 1, "i8": 1, "i1": 1}


class Unsupported(Exception):
    """A protocol value depends on something the reader does not model."""


@dataclass(frozen=True)
class Event:
    """One protocol step of a partition. ``kind``: wait(bar, parity) | arrive(bar, count) |
    expect(bar, bytes) | load(bar, slot, bytes) | read(slot) | write(slot) | mma(slots) |
    mma_wait(pending) | store(slot) | store_wait(pending)."""

    kind: str
    bar: tuple | None = None
    value: int = 0
    slots: tuple = ()
    where: str = ""

    def __str__(self) -> str:
        parts = [self.kind]
        if self.bar is not None:
            parts.append(_name(self.bar))
        if self.kind in ("wait", "arrive", "expect", "load", "mma_wait", "store_wait"):
            parts.append(str(self.value))
        parts += [_name(s) for s in self.slots]
        return " ".join(parts)


def _name(ref: tuple) -> str:
    return f"{ref[0]}[{','.join(map(str, ref[1:]))}]"


@dataclass
class Protocol:
    """Barriers (name -> arrival count) and each partition's events, in program order."""

    barriers: dict
    partitions: list  # [(name, [Event])]
    slot_bytes: dict = field(default_factory=dict)


# ------------------------------------------------------------------ parsing


@dataclass
class Op:
    text: str  # the line without its location
    results: list
    name: str
    regions: list = field(default_factory=list)  # [(header line, [Op])]


_RESULT = re.compile(r"^\s*((?:%[\w.]+(?::\d+)?)(?:\s*,\s*%[\w.]+(?::\d+)?)*)\s*=\s*")
_OPNAME = re.compile(r'^"?([a-z_]+\.[\w.]+)"?')


_LOC = re.compile(r"\s*loc\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)")


def _strip_loc(line: str) -> str:
    return _LOC.sub("", line).rstrip() if " loc(" in line else line.rstrip()


def parse(text: str) -> list[Op]:
    """The ops of the module's function bodies as a tree (regions nested)."""
    lines = [_strip_loc(raw) for raw in text.splitlines()]
    pos = 0

    def block() -> list[Op]:
        nonlocal pos
        ops = []
        while pos < len(lines):
            line = lines[pos].strip()
            if line.startswith("}") or line.startswith(")"):
                return ops
            pos += 1
            if not line or line.startswith("#") or line.startswith("module") or line.startswith("tt.func"):
                continue
            m = _RESULT.match(line)
            results, rest = [], line
            if m:
                for r in m.group(1).split(","):
                    r = r.strip()
                    if ":" in r:
                        base, n = r.split(":")
                        results += [f"{base}#{i}" for i in range(int(n))]
                        results.append(base)
                    else:
                        results.append(r)
                rest = line[m.end():]
            nm = _OPNAME.match(rest)
            op = Op(rest, results, nm.group(1) if nm else rest.split(" ")[0])
            ops.append(op)
            if op.name == "ttg.warp_specialize" and pos < len(lines) and lines[pos].strip().startswith("default"):
                line = lines[pos].strip()  # the regions start on the next line
                pos += 1
            if line.endswith("{") or line.endswith("({"):
                header = line
                while True:
                    body = block()
                    op.regions.append((header, body))
                    if pos >= len(lines):
                        break
                    closing = lines[pos].strip()
                    pos += 1
                    if closing.endswith("{"):  # "} else {", "}, {", "partition1(...) {"
                        header = closing
                        continue
                    nxt = lines[pos].strip() if pos < len(lines) else ""
                    if op.name == "ttg.warp_specialize" and (nxt.startswith("partition") or nxt.startswith("default")):
                        header = nxt
                        pos += 1
                        continue
                    break
        return ops

    out = []
    while pos < len(lines):
        out += block()
        pos += 1
    return out


# ------------------------------------------------------------------ evaluation


_INT = re.compile(r"^-?\d+$")
_TMA_LOAD = re.compile(r"ttng\.async_tma_copy_global_to_local %[\w.]+\[[^\]]*\]\s+(%[\w.#]+),\s*(%[\w.#]+)"
                       r"(?:,\s*(%[\w.#]+))?")


@dataclass(frozen=True)
class Slot:
    """A view of shared memory: an allocation and the indices taken into it."""

    alloc: str
    index: tuple
    bytes: int
    barrier: bool


def _memdesc_bytes(ty: str) -> tuple[int, bool]:
    m = re.search(r"!ttg\.memdesc<([\dx]+)x(\w+),", ty)
    if not m:
        raise Unsupported(f"shared memory type {ty!r}")
    n = 1
    for d in m.group(1).split("x"):
        n *= int(d)
    return n * _BYTES.get(m.group(2), 0), m.group(2) == "i64"


# Dialects whose ops may touch shared memory, barriers or control flow: an op of theirs that is
# neither modelled above nor known to touch none of them makes the result unknown.
_GUARDED = ("ttg", "ttng", "gpu", "nvvm", "cf", "scf", "llvm", "nvgpu", "amdgpu")
_HARMLESS = {"ttg.convert_layout", "ttg.warp_yield", "ttg.warp_return", "ttng.fence_async_shared",
             "ttg.local_dealloc", "scf.yield"}


class Interpreter:
    """Runs one partition's region on concrete scalars, collecting its events."""

    _ARITH = {
        "arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b, "arith.muli": lambda a, b: a * b,
        "arith.andi": lambda a, b: a & b, "arith.ori": lambda a, b: a | b, "arith.xori": lambda a, b: a ^ b,
        "arith.minsi": min, "arith.maxsi": max, "arith.shli": lambda a, b: a << b, "arith.shrsi": lambda a, b: a >> b,
        "arith.divsi": lambda a, b: int(a / b), "arith.remsi": lambda a, b: a - b * int(a / b),
        "arith.divui": lambda a, b: a // b, "arith.remui": lambda a, b: a % b,
        "arith.ceildivsi": lambda a, b: -((-a) // b), "arith.floordivsi": lambda a, b: a // b,
    }
    _CMP = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "slt": lambda a, b: a < b,
            "sle": lambda a, b: a <= b, "sgt": lambda a, b: a > b, "sge": lambda a, b: a >= b,
            "ult": lambda a, b: a < b, "ule": lambda a, b: a <= b, "ugt": lambda a, b: a > b,
            "uge": lambda a, b: a >= b}

    def __init__(self, env: dict, program: dict, max_events: int = 200_000):
        self.env = dict(env)
        self.program = program  # {"pid": (x, y, z), "num_programs": (x, y, z)}
        self.events: list[Event] = []
        self.max_events = max_events

    # values -------------------------------------------------------
    def val(self, name: str, what: str = "value"):
        name = name.strip()
        if _INT.match(name):
            return int(name)
        if name not in self.env:
            raise Unsupported(f"{what} {name} is not defined where it is used")
        return self.env[name]

    def scalar(self, name: str, what: str) -> int:
        v = self.val(name, what)
        if isinstance(v, bool):
            return int(v)
        if not isinstance(v, int):
            raise Unsupported(f"{what} {name} is not a scalar the reader evaluates")
        return v

    def slot(self, name: str, what: str) -> Slot:
        v = self.val(name, what)
        if not isinstance(v, Slot):
            raise Unsupported(f"{what} {name} is not a shared-memory view the reader follows")
        return v

    def emit(self, event: Event):
        self.events.append(event)
        if len(self.events) > self.max_events:
            raise Unsupported("more protocol events than the model checker takes; choose a smaller problem")

    # ops ----------------------------------------------------------
    def run(self, ops: list[Op]):
        for op in ops:
            self.op(op)

    def _set(self, op: Op, value):
        if op.results:
            self.env[op.results[0]] = value

    def op(self, op: Op):  # noqa: C901 - one branch per op of the protocol vocabulary
        name, t = op.name, op.text
        operands = re.findall(r"%[\w.#]+", t.split(":")[0] if name not in ("scf.for",) else t)
        if name == "arith.constant":
            m = re.match(r"arith\.constant (true|false|-?\d+)(?:\s*:\s*(i\d+|index))?$", t)
            word = m.group(1) if m else None
            self._set(op, None if word is None else word == "true" if word in ("true", "false") else int(word))
        elif name in self._ARITH and ": tensor" not in t:
            a, b = operands[:2]
            try:
                self._set(op, self._ARITH[name](self.scalar(a, "operand"), self.scalar(b, "operand")))
            except Unsupported:
                self._set(op, None)
        elif name == "arith.cmpi" and ": tensor" not in t:
            pred = t.split()[1].rstrip(",")
            try:
                self._set(op, self._CMP[pred](self.scalar(operands[0], "operand"), self.scalar(operands[1], "operand")))
            except Unsupported:
                self._set(op, None)
        elif name == "arith.select" and t.count(":") == 1 and "tensor" not in t:
            c, a, b = operands[:3]
            try:
                self._set(op, self.val(a) if self.scalar(c, "condition") else self.val(b))
            except Unsupported:
                self._set(op, None)
        elif name in ("arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast") and "tensor" not in t:
            self._set(op, self.env.get(operands[0]))
        elif name == "tt.get_program_id":
            self._set(op, self.program["pid"]["xyz".index(t.split()[1])])
        elif name == "tt.get_num_programs":
            self._set(op, self.program["num_programs"]["xyz".index(t.split()[1])])
        elif name == "ttg.local_alloc":
            nbytes, is_bar = _memdesc_bytes(t.split("->")[-1])
            slot = Slot(op.results[0], (), nbytes, is_bar)
            self._set(op, slot)
            if operands:
                self.emit(Event("write", slots=(slot,), where=op.results[0]))
        elif name == "ttg.memdesc_index":
            base = self.slot(operands[0], "memdesc")
            idx = self.scalar(operands[1], "slot index")
            nbytes, _ = _memdesc_bytes(t.split("->")[-1])
            self._set(op, Slot(base.alloc, base.index + (idx,), nbytes, base.barrier))
        elif name in ("ttg.memdesc_reshape", "ttg.memdesc_trans", "ttg.memdesc_subslice", "ttg.memdesc_reinterpret"):
            self._set(op, self.slot(operands[0], "memdesc"))
        elif name == "ttng.init_barrier":
            count = int(re.search(r",\s*(\d+)\s*:", t).group(1))
            self.emit(Event("init", _ref(self.slot(operands[0], "barrier")), count))
        elif name == "ttng.inval_barrier":
            pass
        elif name in ("ttng.wait_barrier", "ttng.arrive_barrier", "ttng.barrier_expect"):
            args = [a.strip() for a in t.split(":")[0].split(" ", 1)[1].split(",")]
            bar = _ref(self.slot(args[0], "barrier"))
            pred = self.scalar(args[2], "predicate") if len(args) > 2 else 1
            if not pred:
                return
            if name == "ttng.wait_barrier":
                self.emit(Event("wait", bar, self.scalar(args[1], "phase") & 1, where=t[:60]))
            elif name == "ttng.arrive_barrier":
                self.emit(Event("arrive", bar, int(args[1])))
            else:
                self.emit(Event("expect", bar, int(args[1])))
        elif name == "ttng.async_tma_copy_global_to_local":
            m = _TMA_LOAD.match(t)
            if not m:
                raise Unsupported(f"TMA load form {t[:80]!r}")
            if m.group(3) and not self.scalar(m.group(3), "predicate"):
                return
            dst, bar = self.slot(m.group(1), "TMA destination"), self.slot(m.group(2), "barrier")
            self.emit(Event("load", _ref(bar), dst.bytes, (_ref(dst),)))
        elif name in ("ttng.async_tma_copy_local_to_global", "ttng.async_tma_reduce"):
            src = re.search(r"\]\s+(%[\w.#]+)", t).group(1)
            self.emit(Event("store", slots=(_ref(self.slot(src, "TMA source")),)))
        elif name == "ttng.async_tma_store_wait":
            self.emit(Event("store_wait", value=int(re.search(r"pendings = (\d+)", t).group(1))))
        elif name == "ttng.warp_group_dot":
            slots = tuple(_ref(v) for v in (self.env.get(o) for o in operands[:2]) if isinstance(v, Slot))
            self.emit(Event("mma", slots=slots))
        elif name == "ttng.warp_group_dot_wait":
            self.emit(Event("mma_wait", value=int(re.search(r"pendings = (\d+)", t).group(1))))
        elif name == "ttg.local_load":
            self.emit(Event("read", slots=(_ref(self.slot(operands[0], "memdesc")),)))
        elif name == "ttg.local_store":
            self.emit(Event("write", slots=(_ref(self.slot(operands[1], "memdesc")),)))
        elif name == "scf.for":
            self._for(op)
        elif name == "scf.if":
            self._if(op)
        elif name == "scf.while":
            raise Unsupported("scf.while")
        elif name in ("ttg.warp_specialize",):
            raise Unsupported("nested warp_specialize")
        elif (name.split(".")[0] in _GUARDED and name not in _HARMLESS) or name == "tt.call":
            # shared memory, barriers, control flow the model does not know: fail closed
            raise Unsupported(f"op {name}")
        else:
            for r in op.results:  # tensors, pointers, floats: no protocol value
                self.env[r] = None

    def _yield(self, body: list[Op]) -> list:
        last = body[-1] if body else None
        if last is None or last.name != "scf.yield":
            return []
        names = re.findall(r"%[\w.#]+", last.text.split(":")[0])
        return [self.env.get(n) for n in names]

    def _bind_results(self, op: Op, values: list):
        multi = [r for r in op.results if "#" in r]
        if multi:
            for r, v in zip(multi, values):
                self.env[r] = v
        elif op.results and values:
            self.env[op.results[0]] = values[0]

    def _for(self, op: Op):
        m = re.match(r"scf\.for (%[\w.]+) = (%[\w.#]+) to (%[\w.#]+) step (%[\w.#]+)", op.text)
        iv, lb, ub, st = m.groups()
        lo, hi, step = (self.scalar(x, "loop bound") for x in (lb, ub, st))
        inits = re.findall(r"(%[\w.]+) = (%[\w.#]+)", op.text.split("iter_args(")[1].split(")")[0]) \
            if "iter_args(" in op.text else []
        carried = [self.env.get(v) for _, v in inits]
        body = op.regions[0][1]
        i = lo
        while i < hi:
            self.env[iv] = i
            for (n, _), v in zip(inits, carried):
                self.env[n] = v
            self.run(body)
            carried = self._yield(body) or carried
            i += step
        self._bind_results(op, carried)

    def _if(self, op: Op):
        cond = re.match(r"scf\.if (%[\w.#]+)", op.text).group(1)
        taken = self.scalar(cond, "branch condition")
        if taken:
            body = op.regions[0][1]
        elif len(op.regions) > 1:
            body = op.regions[1][1]
        else:
            return
        self.run(body)
        self._bind_results(op, self._yield(body))


def _ref(slot: Slot) -> tuple:
    return (slot.alloc.lstrip("%"), *slot.index)


# ------------------------------------------------------------------ the kernel's protocol


def _func_args(text: str) -> list[str]:
    m = re.search(r"tt\.func public @\w+\((.*)\) attributes", text)
    if not m:
        raise Unsupported("no public function in the TTGIR")
    return re.findall(r"(%[\w.]+):", re.sub(r'loc\("[^"]*"\(#\w+\)\)', "", m.group(1)))


def protocol(text: str, args: dict, program: dict) -> Protocol:
    """The protocol of program ``program`` ({"pid": (x, y, z), "num_programs": (...)}) with the
    kernel's scalar arguments ``args`` (name -> int; descriptor shapes as ``desc.shape.i``)."""
    ops = parse(text)
    names = _func_args(text)
    env = {n: args.get(n.lstrip("%")) for n in names}
    pre = Interpreter(env, program)
    ws = None
    for op in ops:
        if op.name == "ttg.warp_specialize":
            ws = op
            break
        pre.op(op)
    if ws is None:
        raise Unsupported("no ttg.warp_specialize: not a warp-specialized kernel")
    barriers = {}
    for e in pre.events:
        if e.kind == "init":
            barriers[e.bar] = e.value
        elif e.kind not in ("write",):
            raise Unsupported(f"protocol event {e} before warp_specialize")
    captured = re.findall(r"%[\w.#]+", ws.text.split("(", 1)[1].split(")")[0])
    partitions = []
    for header, body in ws.regions:
        env = dict(pre.env)
        label = header.split("(")[0].split(" ")[0].rstrip("{").strip()
        if label.startswith("partition"):
            params = re.findall(r"(%[\w.]+):", header)
            env.update({p: pre.env.get(c) for p, c in zip(params, captured)})
        interp = Interpreter(env, program)
        interp.run(body)
        partitions.append((label, [e for e in interp.events if e.kind != "init"]))
    return Protocol(barriers, partitions)
