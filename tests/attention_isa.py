"""Cross-compile attention kernels for sm_90a and gfx942 and read the facts the static tests
check: tensor-core instructions, spills, scratch. (A stand-in until ``kernels.isa`` is used.)"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

TARGETS = {"sm_90a": GPUTarget("cuda", 90, 32), "gfx942": GPUTarget("hip", "gfx942", 64)}


@dataclass
class Facts:
    name: str
    tensor_core_ops: int  # HGMMA on sm_90a, v_mfma on gfx942
    spill_ops: int  # LDL/STL on sm_90a, scratch stores/loads on gfx942
    local_bytes: int  # STACK + LOCAL (sm_90a) or ScratchSize (gfx942)
    registers: int
    shared_bytes: int


def _cuobjdump() -> str:
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def compile_facts(spec, target: str) -> Facts:
    kernel = triton.compile(ASTSource(fn=spec.fn, signature=spec.signature, constexprs=spec.constexprs),
                            target=TARGETS[target], options=dict(spec.options))
    if target == "sm_90a":
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "k.cubin")
            with open(path, "wb") as f:
                f.write(kernel.asm["cubin"])
            sass = subprocess.run([_cuobjdump(), "-sass", path], capture_output=True, text=True, check=True).stdout
            res = subprocess.run([_cuobjdump(), "-res-usage", path], capture_output=True, text=True, check=True).stdout
        local = int(re.search(r"STACK:(\d+)", res).group(1)) + int(re.search(r"LOCAL:(\d+)", res).group(1))
        regs = int(re.search(r"REG:(\d+)", res).group(1))
        return Facts(spec.name, len(re.findall(r"\bHGMMA\.", sass)), len(re.findall(r"\b(?:LDL|STL)\b", sass)),
                     local, regs, kernel.metadata.shared)
    gcn = kernel.asm["amdgcn"]
    scratch = int(re.search(r"ScratchSize: (\d+)", gcn).group(1))
    vgprs = int(re.search(r"NumVgprs: (\d+)", gcn).group(1))
    return Facts(spec.name, len(re.findall(r"\bv_mfma", gcn)), len(re.findall(r"\bscratch_(?:load|store)", gcn)),
                 scratch, vgprs, kernel.metadata.shared)
