"""Compile the Gluon attention kernels for sm_90a on a CPU and check their SASS is the design:
``python -m ceiling.nvidia.gluon.static_check`` under this Triton, ``python -m
ceiling.nvidia.gluon.pinned_triton check`` under Triton 3.6 whatever this one is. Every shipped
config of the Gluon table is compiled and its :func:`~ceiling.nvidia.gluon.sass_facts.facts` held to
:data:`FWD_DESIGN` or :data:`BWD_DESIGN` (the README's Gluon section lists what they require).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ceiling.nvidia.gluon import triton_release
from ceiling.nvidia.gluon.attention import (
    BWD_BLOCK_N,
    DQ_PIECE,
    bwd_constexprs,
    fwd_constexprs,
    shipped as shipped_tiles,
    smem_layout,
)
from ceiling.nvidia.gluon.sass_facts import Design, facts, violations

FWD_DESIGN = Design()
BWD_DESIGN = Design(atomics=True)
# Spills: none, under Triton 3.6 (the device's), for every config. The operands that stay put
# across a loop are viewed anew each step (attention_fwd.step_zero), so their wgmma descriptors
# are not held in registers for the whole loop. Under Triton 3.9 the backward at head dim 128
# still keeps one value in local memory: the thread index, stored once at entry and reloaded
# at each of its three loops' entries (8 bytes, 9 LDL/STL), beside dK and dV (2 x 64 x 128
# float32), S^T and dP^T in 240 registers. The bound is what it spills now: more is a regression.
KNOWN_SPILL_BYTES = {
    ("3.9", "gluon_attn_bwd_d128"): 8,
    ("3.9", "gluon_attn_bwd_d128_causal"): 8,
}


def known_spill_bytes(name: str) -> int:
    """The spill the static check allows ``name`` under the running Triton (0 unless listed)."""
    import triton

    return KNOWN_SPILL_BYTES.get((triton_release(triton.__version__), name), 0)


_TRITON_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def _desc(dtype: str, block: list[int]) -> str:
    return f"tensordesc<{_TRITON_DTYPES[dtype]}[{', '.join(map(str, block))}],{smem_layout(block, dtype)!r}>"


@dataclass(frozen=True)
class Spec:
    """One Gluon kernel specialization: what is compiled and what its SASS must show."""

    name: str
    kernel: str  # "fwd" | "bwd"
    head_dim: int
    causal: bool
    dtype: str
    knobs: dict[str, Any]
    design: Design
    constexprs: dict[str, Any] = field(default_factory=dict)
    signature: dict[str, str] = field(default_factory=dict)

    @property
    def fn(self):
        if self.kernel == "fwd":
            from ceiling.nvidia.gluon.attention_fwd import attention_fwd_kernel

            return attention_fwd_kernel
        from ceiling.nvidia.gluon.attention_bwd import attention_bwd_kernel

        return attention_bwd_kernel

    @property
    def config(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "head_dim": self.head_dim, "causal": self.causal, "dtype": self.dtype,
                **self.knobs}


def spec(kernel: str, head_dim: int, causal: bool, knobs: dict, dtype: str = "bfloat16") -> Spec:
    """The spec of one kernel at one config (``knobs``: a table section, e.g. {"block_n": 128, ...})."""
    d = head_dim
    if kernel == "fwd":
        c = fwd_constexprs(head_dim, causal, knobs)
        bn = c["BLOCK_N"]
        sig = {"desc_q": _desc(dtype, [1, 64, d]), "desc_k": _desc(dtype, [1, bn, d]),
               "desc_v": _desc(dtype, [1, bn, d]), "desc_o": _desc(dtype, [1, 64, d]), "LSE": "*fp32",
               "seqlen_q": "i32", "seqlen_k": "i32", "n_heads": "i32", "group": "i32", "n_mblocks": "i32",
               "n_bh": "i32", "qk_scale": "fp32"}
        design = FWD_DESIGN
    else:
        c = bwd_constexprs(head_dim, causal, knobs)
        bm = c["BLOCK_M"]
        sig = {"desc_q": _desc(dtype, [1, bm, d]), "desc_k": _desc(dtype, [1, BWD_BLOCK_N, d]),
               "desc_v": _desc(dtype, [1, BWD_BLOCK_N, d]), "desc_do": _desc(dtype, [1, bm, d]),
               "desc_lse": _desc("float32", [bm]), "desc_delta": _desc("float32", [bm]),
               "desc_dq": _desc("float32", [1, bm, DQ_PIECE]), "DK": f"*{_TRITON_DTYPES[dtype]}",
               "DV": f"*{_TRITON_DTYPES[dtype]}", "seqlen_q": "i32", "seqlen_k": "i32", "n_heads": "i32",
               "group": "i32", "qk_scale": "fp32", "sm_scale": "fp32"}
        design = BWD_DESIGN
    name = spec_name(kernel, head_dim, causal)
    design = dataclasses.replace(design, max_spill_bytes=known_spill_bytes(name))
    sig.update({k: "constexpr" for k in c})
    return Spec(name, kernel, head_dim, bool(causal), dtype, dict(knobs), design, c, sig)


def spec_name(kernel: str, head_dim: int, causal: bool) -> str:
    return f"gluon_attn_{kernel}_d{head_dim}{'_causal' if causal else ''}"


def _shipped_configs() -> list[tuple[str, int, bool, dict]]:
    """(kernel, head dim, causal, knobs) of every shipped config: per head dim of the table, its
    forward and backward, causal and not."""
    return [(kernel, head_dim, causal, entry[kernel]) for head_dim, entry in shipped_tiles().items()
            for kernel in ("fwd", "bwd") if kernel in entry for causal in (False, True)]


def shipped_names() -> list[str]:
    return [spec_name(kernel, d, causal) for kernel, d, causal, _ in _shipped_configs()]


def shipped(dtype: str = "bfloat16") -> list[Spec]:
    return [spec(kernel, d, causal, knobs, dtype) for kernel, d, causal, knobs in _shipped_configs()]


def compile_spec(s: Spec, target: str = "sm_90a"):
    """``s`` compiled for ``target``: sm_90a only. The kernels are wgmma code, and a compile for
    Blackwell ends the process in an LLVM error, so any other target is refused first."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from ceiling.errors import InputError

    if target != "sm_90a":
        raise InputError("target", "sm_90a (the Gluon attention kernels are Hopper wgmma code)", repr(target))

    # As launched: every pointer is 16-byte aligned (fresh allocations), which Triton marks;
    # the integer arguments are not specialized (the kernels' do_not_specialize).
    names = list(s.fn.arg_names)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n, kind in s.signature.items() if kind.startswith("*")}
    src = GluonASTSource(s.fn, s.signature, s.constexprs, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})


def check(s: Spec) -> dict:
    """Compile ``s`` and compare its facts with its design: {"name", "facts", "violations", "summary"}."""
    f = facts(compile_spec(s), s.config)
    f.kernel = s.name
    return {"name": s.name, "config": s.config, "facts": f.as_dict(), "violations": violations(f, s.design),
            "summary": f.summary()}


def main(argv: list[str] | None = None) -> int:
    import triton

    parser = argparse.ArgumentParser(prog="python -m ceiling.nvidia.gluon.static_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="write the facts and violations of every config here")
    parser.add_argument("--only", action="append", default=[], help="check only the specs of this name")
    opts = parser.parse_args(argv)
    chosen = [s for s in shipped() if not opts.only or s.name in opts.only]
    results = []
    for s in chosen:
        try:
            results.append(check(s))
        except Exception as exc:  # noqa: BLE001 - a config that does not compile is a violation, reported with the rest
            results.append({"name": s.name, "config": s.config, "facts": None, "summary": f"{s.name}: no binary",
                            "violations": [f"does not compile under Triton {triton.__version__}: "
                                           f"{type(exc).__name__}: {str(exc)[-800:]}"]})
        print(results[-1]["summary"], flush=True)
        for v in results[-1]["violations"]:
            print(f"  VIOLATION: {v}", flush=True)
    report = {"triton": triton.__version__, "configs": results}
    if opts.json:
        opts.json.write_text(json.dumps(report, indent=1))
    return 1 if any(r["violations"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
