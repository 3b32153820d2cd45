"""What a warp-specialized kernel's SASS must show, per partition, and the check of it: :func:`facts`
attributes each instruction to the partition whose entry reaches it and counts what each does,
:func:`violations` compares that with a :class:`Design` (FlashAttention-3's schedule: two consumer
partitions with HGMMA, one producer with the TMA loads, register reallocation, no spills). Why that
attribution is exact for Gluon's lowering is in ``docs/attention.md``.
"""

from __future__ import annotations

import collections
import re
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_x]+)*)\s*([^;]*);")
_HEX = re.compile(r"-?0x[0-9a-f]+")
_REG = re.compile(r"\bR(\d+)\b")
# Opcodes after which the next instruction does not run (when unpredicated).
_STOPS = {"EXIT", "BRA", "BRX", "RET", "JMP", "JMX", "KILL"}
# Work instructions: what a partition exists to issue.
_WORK = ("HGMMA", "UTMALDG")


@dataclass(frozen=True)
class Instruction:
    address: int
    predicated: bool
    opcode: str  # with modifiers: "HGMMA.64x128x16.F32.BF16"
    operands: str

    @property
    def base(self) -> str:
        return self.opcode.split(".")[0]


def parse_sass(text: str) -> list[Instruction]:
    """The instructions of one kernel's ``cuobjdump -sass`` text, in address order."""
    out = []
    for m in _LINE.finditer(text):
        pred = m.group(2)
        out.append(Instruction(int(m.group(1), 16), bool(pred) and pred.strip() != "@PT", m.group(3), m.group(4)))
    return out


def jump_table(elf_text: str, kernel: str) -> list[int]:
    """The 32-bit words of ``.nv.constant2.<kernel>`` in ``cuobjdump -elf`` output (the targets
    of the warp-specialize dispatch); empty when the kernel has none."""
    lines = elf_text.splitlines()
    header = f".nv.constant2.{kernel}"
    for i, line in enumerate(lines):
        if line.strip() == header:
            words = []
            for row in lines[i + 1:]:
                if not row.strip():
                    break
                words += [int(w, 16) for w in row.split()]
            return words
    return []


def _successors(instrs: list[Instruction], i: int, index: dict[int, int]) -> list[int]:
    ins = instrs[i]
    nxt = [i + 1] if i + 1 < len(instrs) else []
    if ins.base == "BRA":
        target = _HEX.search(ins.operands)
        targets = [index[int(target.group(0), 16)]] if target and int(target.group(0), 16) in index else []
        return targets + (nxt if ins.predicated else [])
    if ins.base in _STOPS:  # BRX is a sink: its targets are the other partitions' entries
        return nxt if (ins.predicated and ins.base != "BRX") else []
    return nxt


def _reach(instrs: list[Instruction], start: int, index: dict[int, int]) -> set[int]:
    seen, todo = set(), [start]
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        todo += _successors(instrs, i, index)
    return seen


def _highest_register(ins: Instruction) -> int:
    regs = [int(r) for r in _REG.findall(ins.operands)]
    if not regs:
        return -1
    top = max(regs)
    if ins.base == "HGMMA":  # the accumulator is a run of N/2 registers (64 x N float32 over 128 threads)
        shape = re.match(r"HGMMA\.64x(\d+)x\d+\.F32", ins.opcode)
        if shape:
            top = max(top, regs[0] + int(shape.group(1)) // 2 - 1)
    elif ".64" in ins.opcode or ".128" in ins.opcode:
        top += 3 if ".128" in ins.opcode else 1
    return top


@dataclass
class Partition:
    entry: int  # address of its first instruction
    kind: str  # "default" (the kernel's own warps) or "worker"
    instructions: int
    hgmma: int
    hgmma_shapes: dict[str, int]
    utmaldg: int
    utmastg: int
    ldg: int  # pointer loads from global memory
    atomics: int  # additions to global memory: RED/ATOM, and TMA reductions (UTMAREDG)
    ldl_stl: int
    setmaxnreg: list[tuple[str, int]]  # ("DEALLOC" | "TRY_ALLOC", registers), in address order
    budget: int | None  # registers its work runs under: the last USETMAXREG before its first HGMMA/UTMALDG
    max_register: int  # highest register it names, +1 (a lower bound on what it uses)

    @property
    def role(self) -> str:
        if self.hgmma:
            return "mma"
        if self.utmaldg:
            return "load"
        return "idle"


@dataclass
class Facts:
    kernel: str
    triton: str
    num_warps: int  # every warp of the CTA, workers included (as launched)
    registers: int  # per thread at launch
    spill_bytes: int  # local memory + stack
    shared_bytes: int
    ldl_stl: int
    partitions: list[Partition] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)

    def by_role(self, role: str) -> list[Partition]:
        return [p for p in self.partitions if p.role == role]

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for p, src in zip(d["partitions"], self.partitions):
            p["role"] = src.role
        return d

    def summary(self) -> str:
        parts = "; ".join(
            f"{p.kind}@{p.entry:#x} {p.role}: HGMMA {p.hgmma}, UTMALDG {p.utmaldg}, UTMASTG {p.utmastg}, LDG {p.ldg}, "
            f"atomics {p.atomics}, regs {p.budget} (names up to R{p.max_register - 1})"
            for p in self.partitions if p.role != "idle")
        return (f"{self.kernel} [Triton {self.triton}]: {self.num_warps} warps, {self.registers} regs at launch, "
                f"{self.shared_bytes} B shared, spills {self.spill_bytes} B, LDL/STL {self.ldl_stl}; {parts}")


def _partition(instrs: list[Instruction], members: set[int], entry: int, kind: str) -> Partition:
    chosen = [instrs[i] for i in sorted(members)]
    ops = collections.Counter(ins.base for ins in chosen)
    setmax = []
    budget, last = None, None
    for ins in chosen:
        if ins.base == "USETMAXREG":
            value = _HEX.findall(ins.operands)
            last = ("DEALLOC" if "DEALLOC" in ins.opcode else "TRY_ALLOC", int(value[-1], 16))
            setmax.append(last)
        elif ins.base in _WORK and budget is None and last is not None:
            budget = last[1]
    return Partition(
        entry=entry,
        kind=kind,
        instructions=len(chosen),
        hgmma=ops["HGMMA"],
        hgmma_shapes=dict(collections.Counter(ins.opcode for ins in chosen if ins.base == "HGMMA")),
        utmaldg=ops["UTMALDG"],
        utmastg=ops["UTMASTG"],
        ldg=ops["LDG"],
        atomics=ops["RED"] + ops["ATOM"] + ops["ATOMG"] + ops["REDG"] + ops["UTMAREDG"],
        ldl_stl=ops["LDL"] + ops["STL"],
        setmaxnreg=setmax,
        budget=budget,
        max_register=max((_highest_register(ins) for ins in chosen), default=-1) + 1,
    )


def partitions(sass_text: str, table: list[int]) -> list[Partition]:
    """The default partition and the workers (see the module doc).

    The kernel's first conditional branch splits its warps: the kernel's own warps go to the
    default partition, the others into the dispatch loop. With two or more worker partitions
    the loop jumps through ``table`` (``BRX``) and each target is a worker's entry; with one,
    the loop branches straight to it and the loop's side of the split is that worker."""
    instrs = parse_sass(sass_text)
    if not instrs:
        raise ValueError("sass: no instructions found")
    index = {ins.address: i for i, ins in enumerate(instrs)}
    split = next((i for i, ins in enumerate(instrs) if ins.base == "BRA" and ins.predicated), None)
    if split is None:  # not warp-specialized: one partition
        return [_partition(instrs, set(range(len(instrs))), instrs[0].address, "default")]
    # The branch's two sides: the workers' side is the one holding the dispatch (the BRX, or the
    # load of a warp's partition index from shared memory); Triton 3.6 branches the default
    # warps away, 3.9 the workers.
    target = index[int(_HEX.search(instrs[split].operands).group(0), 16)]
    sides = [target, split + 1]

    def dispatches(start: int) -> bool:
        return any(instrs[i].base == "BRX" or instrs[i].opcode == "LDS.U8" for i in _reach(instrs, start, index))

    workers_side = [i for i in sides if dispatches(i)]
    if len(workers_side) != 1:
        raise ValueError("sass: cannot tell the default partition from the dispatch loop at the warp split")
    default_side = next(i for i in sides if i not in workers_side)
    entries = [(instrs[default_side].address, "default")]
    brx = [ins for ins in instrs if ins.base == "BRX"]
    if len(brx) > 1:
        raise ValueError(f"sass: {len(brx)} indirect branches; expected the one warp-specialize dispatch")
    if brx:
        offset = _HEX.findall(brx[0].operands)
        delta = brx[0].address + 16 + (int(offset[-1], 16) if offset else 0)
        entries += [(w + delta, "worker") for w in table if w + delta in index]
    else:
        entries.append((instrs[workers_side[0]].address, "worker"))
    reach = {addr: _reach(instrs, index[addr], index) for addr, _ in entries}
    counts = collections.Counter(i for r in reach.values() for i in r)
    shared = {i for i, n in counts.items() if n > 1}
    return [_partition(instrs, reach[addr] - shared, addr, kind) for addr, kind in entries]


def _nvidia_tool(name: str) -> str:
    import triton

    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
    return str(bundled) if bundled.exists() else name


def _cuobjdump(cubin: bytes, *flags: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        return subprocess.run([_nvidia_tool("cuobjdump"), *flags, str(path)], check=True, capture_output=True,
                              text=True).stdout


def facts(kernel, config: dict | None = None) -> Facts:
    """The facts of a compiled sm_90a kernel (the result of ``triton.compile``)."""
    import triton

    cubin = kernel.asm["cubin"]
    name = kernel.metadata.name
    usage = dict((k, int(v)) for k, v in re.findall(r"\b(REG|STACK|LOCAL):(\d+)", _cuobjdump(cubin, "-res-usage")))
    parts = partitions(_cuobjdump(cubin, "-sass"), jump_table(_cuobjdump(cubin, "-elf"), name))
    return Facts(
        kernel=name,
        triton=triton.__version__,
        num_warps=int(kernel.metadata.num_warps),
        registers=usage.get("REG", 0),
        spill_bytes=usage.get("LOCAL", 0) + usage.get("STACK", 0),
        shared_bytes=int(kernel.metadata.shared),
        ldl_stl=sum(p.ldl_stl for p in parts),
        partitions=parts,
        config=dict(config or {}),
    )


# ----------------------------------------------------------------------------------------------
# The design a kernel claims, and its check
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Design:
    """FlashAttention-3's partitioning, as SASS facts."""

    consumers: int = 2  # partitions issuing HGMMA, the default one among them
    producers: int = 1  # partitions issuing UTMALDG and no HGMMA
    num_warps: int = 12  # 2 consumer warpgroups + the producer's warpgroup
    min_consumer_registers: int = 232  # FA3 gives its consumers 240
    max_producer_registers: int = 56  # FA3 gives its producer 24-56
    max_shared_bytes: int = 227 * 1024  # Hopper's opt-in maximum per block
    pointer_loads: bool = False  # every tile comes in through TMA
    atomics: bool = False  # dQ accumulation (the backward) adds to global memory (RED/ATOM or TMA reductions)
    max_spill_bytes: int = 0  # a known, bounded spill (see its owner's note); 0: none at all


def violations(f: Facts, design: Design) -> list[str]:
    """What in ``f`` contradicts ``design``; empty when the kernel is what it claims."""
    bad = []
    mma, load = f.by_role("mma"), f.by_role("load")
    if len(mma) != design.consumers:
        bad.append(f"HGMMA in {len(mma)} partitions ({[f'{p.kind}@{p.entry:#x}' for p in mma]}), "
                   f"expected {design.consumers} consumer partitions")
    if design.consumers and not any(p.kind == "default" for p in mma):
        bad.append("the default partition issues no HGMMA (expected it to be a consumer)")
    if len(load) != design.producers:
        bad.append(f"{len(load)} partitions issue TMA loads without HGMMA, expected {design.producers} producer(s)")
    if design.producers and not any(p.utmaldg for p in load):
        bad.append("no UTMALDG in any producer partition")
    if any(p.utmaldg for p in mma):
        bad.append("a consumer partition issues TMA loads itself (UTMALDG next to its HGMMA)")
    for p in mma:
        if p.budget is None or p.budget < design.min_consumer_registers:
            bad.append(f"consumer {p.kind}@{p.entry:#x} runs with {p.budget} registers, "
                       f"expected >= {design.min_consumer_registers} (USETMAXREG)")
    for p in load:
        if p.budget is None or p.budget > design.max_producer_registers:
            bad.append(f"producer {p.kind}@{p.entry:#x} runs with {p.budget} registers, "
                       f"expected <= {design.max_producer_registers} (USETMAXREG.DEALLOC)")
    if (f.ldl_stl or f.spill_bytes) and f.spill_bytes > design.max_spill_bytes:
        bad.append(f"spills: {f.ldl_stl} LDL/STL, {f.spill_bytes} B of local memory"
                   + (f" (more than the known {design.max_spill_bytes} B)" if design.max_spill_bytes else ""))
    if f.shared_bytes > design.max_shared_bytes:
        bad.append(f"{f.shared_bytes} B of shared memory > {design.max_shared_bytes}")
    if f.num_warps != design.num_warps:
        bad.append(f"{f.num_warps} warps, expected {design.num_warps}")
    ldg = sum(p.ldg for p in f.partitions)
    if ldg and not design.pointer_loads:
        bad.append(f"{ldg} pointer loads (LDG): expected every tile through TMA")
    atomics = sum(p.atomics for p in f.partitions)
    if design.atomics and not any(p.atomics for p in mma):
        bad.append("no additions to global memory (RED/ATOM/UTMAREDG) in the consumers: expected dQ accumulated there")
    if atomics and not design.atomics:
        bad.append(f"{atomics} global atomics, expected none")
    return bad
