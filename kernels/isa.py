"""Compile Triton kernels for real targets on a CPU machine and read their ISA: ``compile_for(spec,
"sm_90a")`` (Hopper), ``"sm_100a"`` (B200, GB200) or ``"sm_103a"`` (B300) gives a cubin (SASS read
with the ``cuobjdump`` the Triton wheel ships), ``"gfx942"`` (CDNA3) or ``"gfx950"`` (CDNA4) an hsaco
with its AMDGCN text; :func:`profile` turns either into a :class:`StaticProfile` (registers, spills,
shared memory or LDS, tensor-core instruction counts including Blackwell's UTC*MMA with its
tensor-memory columns, LDTM/STTM and MMA shapes, the instruction mix) and :func:`problems` says what
a profile shows wrong. Compiles that can abort the process (an LLVM error is a C-level abort) run in
a forked child (:mod:`ceiling.isolated`).
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TARGETS = {
    "sm_90a": ("cuda", 90, 32),
    "sm_100a": ("cuda", 100, 32),
    "sm_103a": ("cuda", 103, 32),
    "gfx942": ("hip", "gfx942", 64),
    "gfx950": ("hip", "gfx950", 64),
}
GENERATIONS = {"sm_90a": "hopper", "sm_100a": "blackwell", "sm_103a": "blackwell", "gfx942": "cdna3",
               "gfx950": "cdna4"}
# Compiled in a forked child: a kernel written for Hopper (wgmma) ends in "LLVM ERROR: Cannot
# select" on Blackwell, and a newer backend's code generation is the least tried.
ISOLATED_TARGETS = ("sm_100a", "sm_103a", "gfx950")


@dataclass(frozen=True)
class CompileSpec:
    """One kernel specialization: the JIT function, its signature and constants, and launch options."""

    name: str
    fn: Any  # a triton.JITFunction
    signature: dict[str, str]
    constexprs: dict[str, Any]
    options: dict[str, Any]  # num_warps, num_stages (+ waves_per_eu, matrix_instr_nonkdim, kpack on AMD)
    config: dict[str, Any] = field(default_factory=dict)  # the user-facing config it came from
    # Argument names known to be multiples of 16 (pointers: 16-byte aligned), as a real
    # launch specializes them; without this the compiler cannot vectorize pointer loads.
    divisible_by_16: tuple[str, ...] = ()


def as_launched(spec: CompileSpec, values: dict[str, int]) -> CompileSpec:
    """``spec`` specialized the way a real launch with these integer arguments is.

    Triton's launcher turns an integer argument equal to 1 into a constant and marks
    integers that are multiples of 16, and 16-byte-aligned pointers, as divisible by 16;
    those facts decide whether loads are vectorized and pipelined (a unit stride known
    at compile time is what lets a tile be read with 16-byte loads and cp.async). A
    static profile that omits them describes a kernel no launch runs. ``values`` gives
    the integer arguments of a representative problem; every pointer is taken as aligned
    (PyTorch's allocations are).
    """
    import dataclasses

    signature, constexprs = dict(spec.signature), dict(spec.constexprs)
    aligned = set(spec.divisible_by_16)
    for name, kind in spec.signature.items():
        if kind.startswith("*"):
            aligned.add(name)
    for name, value in values.items():
        if name not in signature:
            raise KeyError(f"{spec.name}: no argument {name!r}")
        if value == 1:
            signature[name], constexprs[name] = "constexpr", 1
            aligned.discard(name)
        elif value % 16 == 0:
            aligned.add(name)
    return dataclasses.replace(spec, signature=signature, constexprs=constexprs,
                               divisible_by_16=tuple(n for n in spec.fn.arg_names if n in aligned))


@dataclass
class StaticProfile:
    name: str
    target: str
    registers: int  # per thread: SASS registers, or arch VGPRs on AMD
    spill_bytes: int  # local-memory stack / spill stores (NVIDIA) or scratch (AMD), bytes per thread
    shared_bytes: int  # static + dynamic shared memory (NVIDIA) or LDS (AMD), bytes per block
    tensor_core_instructions: int  # HGMMA + HMMA (NVIDIA) or v_mfma (AMD), static count
    instruction_mix: dict[str, int]  # opcode -> static count
    num_warps: int
    threads: int
    extra: dict[str, Any] = field(default_factory=dict)  # AGPRs, SGPRs, occupancy hints, ...
    config: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_target(target: str) -> None:
    """An unknown compile target: an ``InputError`` naming the known ones."""
    from ceiling.errors import InputError

    if target not in TARGETS:
        raise InputError("target", f"one of {list(TARGETS)}", repr(target))


@dataclass(frozen=True)
class Compiled:
    """What a compile gives that the static facts read: the ISA texts and binaries by kind
    (``ptx``, ``cubin``, ``amdgcn``) and the metadata fields (``shared``, ``tmem_size``)."""

    asm: dict[str, Any]
    metadata: Any  # a SimpleNamespace of the kernel metadata's plain fields


def _compile(spec: CompileSpec, target: str) -> Compiled:
    import types

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    backend, arch, warp = TARGETS[target]
    options = dict(spec.options)
    if backend == "cuda":  # options that only the AMD backend knows
        for key in ("waves_per_eu", "matrix_instr_nonkdim", "kpack"):
            options.pop(key, None)
    names = list(spec.fn.arg_names)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in spec.divisible_by_16}
    src = ASTSource(fn=spec.fn, signature=spec.signature, constexprs=spec.constexprs, attrs=attrs)
    kernel = triton.compile(src, target=GPUTarget(backend, arch, warp), options=options)
    asm = {k: v for k, v in kernel.asm.items() if k in ("ptx", "cubin", "amdgcn")}
    meta = {k: getattr(kernel.metadata, k) for k in ("shared", "tmem_size", "num_warps", "name")
            if hasattr(kernel.metadata, k)}
    return Compiled(asm, types.SimpleNamespace(**meta))


def compile_for(spec: CompileSpec, target: str) -> Compiled:
    """Compile ``spec`` for ``target`` (a key of :data:`TARGETS`); no GPU needed. On the targets
    of :data:`ISOLATED_TARGETS` the compile runs in a forked child: an abort there raises
    :class:`ceiling.isolated.Aborted` here instead of ending this process."""
    check_target(target)
    if target in ISOLATED_TARGETS:
        from ceiling import isolated

        return isolated.call(f"{spec.name} for {target}", _compile, spec, target)
    return _compile(spec, target)


def _nvidia_bin(tool: str) -> str:
    """The Triton wheel's copy of ``tool`` (its cuobjdump decodes sm_90a, sm_100a and sm_103a;
    a CUDA older than 12.9 cannot read sm_103a)."""
    import triton

    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / tool
    return str(bundled) if bundled.exists() else tool


def sass(cubin: bytes) -> str:
    """SASS text of a cubin (cuobjdump -sass)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        Path(path).write_bytes(cubin)
        return subprocess.run([_nvidia_bin("cuobjdump"), "-sass", path], check=True, capture_output=True, text=True).stdout


def _resource_usage(cubin: bytes) -> dict[str, int]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        Path(path).write_bytes(cubin)
        text = subprocess.run(
            [_nvidia_bin("cuobjdump"), "-res-usage", path], check=True, capture_output=True, text=True
        ).stdout
    usage = {}
    for key, value in re.findall(r"\b(REG|STACK|SHARED|LOCAL|CONSTANT\[\d+\]|TEXTURE|SURFACE|SAMPLER):(\d+)", text):
        usage[key] = int(value)
    return usage


_SASS_OP = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(?:\.[A-Z0-9_.]+)?")
_GCN_OP = re.compile(r"^\s+([sv]_[a-z0-9_]+|buffer_[a-z0-9_]+|global_[a-z0-9_]+|ds_[a-z0-9_]+|scratch_[a-z0-9_]+|flat_[a-z0-9_]+)\b", re.M)


def sass_mix(text: str) -> collections.Counter:
    return collections.Counter(m.group(1) for m in _SASS_OP.finditer(text))


def gcn_mix(text: str) -> collections.Counter:
    return collections.Counter(m.group(1) for m in _GCN_OP.finditer(text))


def _gcn_field(text: str, pattern: str) -> int:
    m = re.search(pattern, text)
    return int(m.group(1)) if m else 0


# Blackwell's tensor-core instructions as cuobjdump names them, by the tcgen05.mma kind they run:
# UTCHMMA f16/bf16/tf32 (kind::f16, kind::tf32), UTCQMMA FP8/FP6/FP4 (kind::f8f6f4), UTCOMMA
# block-scaled FP4 (kind::mxf4, kind::mxf4nvf4), UTCIMMA int8 (kind::i8).
UTC_MMA = ("UTCHMMA", "UTCQMMA", "UTCOMMA", "UTCIMMA")
# K of one tcgen05.mma per kind (32 bytes of A per row; 64 elements for the 4-bit kinds)
_MMA_K = {"f16": 16, "tf32": 8, "f8f6f4": 32, "i8": 32, "mxf8f6f4": 32, "mxf4": 64, "mxf4nvf4": 64}
_PTX_MMA = re.compile(r"tcgen05\.mma(?:\.sp)?\.cta_group::(\d)\.kind::(\w+)[^;]*?,\s*(%r\d+|\d+),\s*%p\d+;")


def tcgen05_shapes(ptx: str) -> dict[str, int]:
    """``"kind m x n x k (cta_group::g)"`` -> static count of the tcgen05.mma instructions in
    ``ptx``. The shape is in the instruction descriptor (an immediate the PTX moves into a
    register; SASS only names the register): M/16 in bits 24-28, N/8 in bits 17-22; K follows
    from the kind. A descriptor the PTX computes at run time reads as ``?``."""
    movs = dict(re.findall(r"mov\.[bu]32\s+(%r\d+),\s*(\d+);", ptx))
    shapes: collections.Counter = collections.Counter()
    for group, kind, desc in _PTX_MMA.findall(ptx):
        value = movs.get(desc, desc if desc.isdigit() else None)
        if value is None:
            m = n = "?"
        else:
            bits = int(value)
            m, n = ((bits >> 24) & 0x1F) * 16, ((bits >> 17) & 0x3F) * 8
        shapes[f"{kind} {m}x{n}x{_MMA_K.get(kind, '?')} (cta_group::{group})"] += 1
    return dict(shapes)


def _profile_nvidia(spec: CompileSpec, target: str, kernel: Compiled) -> StaticProfile:
    cubin = kernel.asm["cubin"]
    usage = _resource_usage(cubin)
    mix = sass_mix(sass(cubin))
    num_warps = int(spec.options.get("num_warps", 4))
    extra: dict[str, Any] = {"generation": GENERATIONS[target], "ldl_stl": mix.get("LDL", 0) + mix.get("STL", 0),
                             "hmma": mix.get("HMMA", 0)}
    if GENERATIONS[target] == "hopper":
        # HGMMA: 16-bit and TF32 wgmma; QGMMA: FP8 wgmma (cuobjdump's name for it); HMMA: mma.sync
        extra.update(hgmma=mix.get("HGMMA", 0), qgmma=mix.get("QGMMA", 0))
        tc = mix.get("HGMMA", 0) + mix.get("QGMMA", 0) + mix.get("HMMA", 0)
    else:
        from ceiling import spaces

        columns = int(getattr(kernel.metadata, "tmem_size", 0) or 0)
        per_sm = int(spaces.target_limits(target)["tmem_columns_per_unit"])
        extra.update({op.lower(): mix.get(op, 0) for op in UTC_MMA})
        extra.update(ldtm=mix.get("LDTM", 0), sttm=mix.get("STTM", 0), utcbar=mix.get("UTCBAR", 0),
                     tmem_columns=columns, tmem_ctas_per_sm=per_sm // columns if columns else None,
                     mma_shapes=tcgen05_shapes(kernel.asm.get("ptx", "")))
        tc = sum(mix.get(op, 0) for op in UTC_MMA) + mix.get("HMMA", 0)
    return StaticProfile(
        name=spec.name,
        target=target,
        registers=usage.get("REG", 0),
        spill_bytes=usage.get("LOCAL", 0) + usage.get("STACK", 0),
        shared_bytes=int(kernel.metadata.shared),
        tensor_core_instructions=tc,
        instruction_mix=dict(mix.most_common()),
        num_warps=num_warps,
        threads=num_warps * 32,
        extra=extra,
        config=dict(spec.config),
    )


def _profile_amd(spec: CompileSpec, target: str, kernel: Compiled) -> StaticProfile:
    text = kernel.asm["amdgcn"]
    mix = gcn_mix(text)
    num_warps = int(spec.options.get("num_warps", 4))
    return StaticProfile(
        name=spec.name,
        target=target,
        registers=_gcn_field(text, r"\.vgpr_count:\s+(\d+)"),
        spill_bytes=_gcn_field(text, r";\s+ScratchSize:\s+(\d+)"),
        shared_bytes=int(kernel.metadata.shared),
        tensor_core_instructions=sum(v for k, v in mix.items() if k.startswith("v_mfma")),
        instruction_mix=dict(mix.most_common()),
        num_warps=num_warps,
        threads=num_warps * 64,
        extra={
            "generation": GENERATIONS[target],
            "mfma": {k: v for k, v in mix.most_common() if k.startswith("v_mfma")},
            "agpr_count": _gcn_field(text, r"\.agpr_count:\s+(\d+)"),
            "sgpr_count": _gcn_field(text, r"\.sgpr_count:\s+(\d+)"),
            "vgpr_spill": _gcn_field(text, r"\.vgpr_spill_count:\s+(\d+)"),
            "sgpr_spill": _gcn_field(text, r"\.sgpr_spill_count:\s+(\d+)"),
            "occupancy": _gcn_field(text, r";\s+Occupancy:\s+(\d+)"),
            "lds_bytes": _gcn_field(text, r"\.group_segment_fixed_size:\s+(\d+)"),
        },
        config=dict(spec.config),
    )


def profile(spec: CompileSpec, target: str) -> StaticProfile:
    """Compile ``spec`` for ``target`` and read its static facts."""
    kernel = compile_for(spec, target)
    if TARGETS[target][0] == "cuda":
        return _profile_nvidia(spec, target, kernel)
    return _profile_amd(spec, target, kernel)


# FP8 matrix instructions by generation: Hopper's QGMMA, Blackwell's UTCQMMA, CDNA's v_mfma_*fp8*/bf8/f8f6f4
_FP8_MMA = {"hopper": ("QGMMA",), "blackwell": ("UTCQMMA", "UTCOMMA")}


def problems(facts: StaticProfile | dict[str, Any], tensor_cores: bool = True, fp8: bool = False) -> list[str]:
    """What ``facts`` (a profile, or its ``as_dict``) show wrong, in words; empty when nothing:
    spilled registers (local memory, LDL/STL, scratch, VGPRs), and, where the kernel is
    built on matrix instructions (``tensor_cores``), none of them, or on Blackwell a fall back from
    tcgen05 to the warp-level mma.sync; for an FP8 kernel (``fp8``), no FP8 matrix instruction
    (its operands widened to 16 bits)."""
    f = facts.as_dict() if isinstance(facts, StaticProfile) else facts
    extra = f.get("extra", {})
    out = []
    # an AMD kernel's SGPR spills go to VGPR lanes (no memory traffic): reported in extra, not flagged
    if f["spill_bytes"] or extra.get("ldl_stl") or extra.get("vgpr_spill"):
        out.append(f"{f['name']} on {f['target']}: spills ({f['spill_bytes']} B of local memory or scratch, "
                   f"{extra.get('ldl_stl', 0)} LDL/STL, {extra.get('vgpr_spill', 0)} VGPRs)")
    generation = extra.get("generation")
    if fp8 and f["tensor_core_instructions"]:
        mix = f.get("instruction_mix", {})
        if generation in _FP8_MMA:
            native = sum(mix.get(op, 0) for op in _FP8_MMA[generation])
        else:
            native = sum(v for k, v in (extra.get("mfma") or {}).items() if re.search(r"fp8|bf8|f8f6f4", k))
        if not native:
            out.append(f"{f['name']} on {f['target']}: no FP8 matrix instruction (the operands are widened: "
                       f"{', '.join(sorted(extra.get('mfma') or {})) or 'no FP8 MMA'})")
    if tensor_cores and not f["tensor_core_instructions"]:
        out.append(f"{f['name']} on {f['target']}: no tensor-core instruction")
    elif tensor_cores and extra.get("generation") == "blackwell" and not any(extra.get(op.lower()) for op in UTC_MMA):
        out.append(f"{f['name']} on {f['target']}: no tcgen05 instruction (UTC*MMA); "
                   f"{extra.get('hmma', 0)} warp-level HMMA instead")
    return out


# --------------------------------------------------------------------------- per-op inspection

# (op, target) -> "module:function". Triton targets name a ``compile_specs(dtype)``
# function whose specs are compiled and profiled here; the other targets name a
# function that does its own lowering and returns one dict per shipped config.
INSPECTORS: dict[tuple[str, str], str] = {
    ("gemm", "sm_90a"): "ceiling.nvidia.gemm_specs:compile_specs",
    ("gemm", "gfx942"): "ceiling.amd.gemm_specs:compile_specs",
    ("scaled_gemm", "sm_90a"): "ceiling.nvidia.gemm_fp8_specs:compile_specs",
    ("scaled_gemm", "gfx942"): "ceiling.amd.gemm_fp8_specs:compile_specs",
    ("fp8_quantize", "sm_90a"): "ceiling.triton.fp8_quantize_specs:compile_specs",
    ("fp8_quantize", "gfx942"): "ceiling.triton.fp8_quantize_specs:compile_specs_fnuz",
    ("attention", "sm_90a"): "ceiling.nvidia.attention_specs:compile_specs",
    ("attention", "gfx942"): "ceiling.amd.attention_specs:compile_specs",
    ("gemm", "tpu-v5e"): "ceiling.tpu.gemm_export:inspect_tpu",
    ("gemm", "tpu-v5p"): "ceiling.tpu.gemm_export:inspect_tpu",
    ("gemm", "tpu-v6e"): "ceiling.tpu.gemm_export:inspect_tpu",
    ("attention", "tpu-v5e"): "ceiling.tpu.attention:inspect_tpu_attention",
    ("attention", "tpu-v5p"): "ceiling.tpu.attention:inspect_tpu_attention",
    ("attention", "tpu-v6e"): "ceiling.tpu.attention:inspect_tpu_attention",
    ("gemm", "trn1"): "ceiling.trainium.inspection:inspect_trainium",
    ("gemm", "trn2"): "ceiling.trainium.inspection:inspect_trainium",
    ("attention", "trn1"): "ceiling.trainium.inspection:inspect_trainium_attention",
    ("attention", "trn2"): "ceiling.trainium.inspection:inspect_trainium_attention",
    ("triangle_attention", "sm_90a"): "ceiling.triton.triangle_attention_specs:compile_specs",
    ("triangle_attention", "gfx942"): "ceiling.triton.triangle_attention_specs:compile_specs_gfx942",
    ("triangle_multiplicative_update", "sm_90a"): "ceiling.triton.triangle_multiplication_specs:compile_specs",
    ("triangle_multiplicative_update", "gfx942"): "ceiling.triton.triangle_multiplication_specs:compile_specs_gfx942",
    ("triangle_attention", "tpu-v5e"): "ceiling.tpu.triangle_attention:inspect_tpu_triangle_attention",
    ("triangle_attention", "tpu-v5p"): "ceiling.tpu.triangle_attention:inspect_tpu_triangle_attention",
    ("triangle_attention", "tpu-v6e"): "ceiling.tpu.triangle_attention:inspect_tpu_triangle_attention",
    ("triangle_multiplicative_update", "tpu-v5e"): "ceiling.tpu.triangle_multiplication:inspect_tpu_trimul",
    ("triangle_multiplicative_update", "tpu-v5p"): "ceiling.tpu.triangle_multiplication:inspect_tpu_trimul",
    ("triangle_multiplicative_update", "tpu-v6e"): "ceiling.tpu.triangle_multiplication:inspect_tpu_trimul",
    ("triangle_multiplicative_update", "trn1"): "ceiling.trainium.inspection:inspect_trainium_trimul",
    ("triangle_multiplicative_update", "trn2"): "ceiling.trainium.inspection:inspect_trainium_trimul",
}
# Blackwell and CDNA4: the Hopper and CDNA3 spec functions, given the target (those that take
# one resolve the configs the target's GPU runs; the others compile the shipped configs for it)
for _new, _base in (("sm_100a", "sm_90a"), ("sm_103a", "sm_90a"), ("gfx950", "gfx942")):
    for (_op, _t), _fn in list(INSPECTORS.items()):
        if _t == _base:
            INSPECTORS[(_op, _new)] = _fn
INSPECTORS[("fp8_quantize", "gfx950")] = "ceiling.triton.fp8_quantize_specs:compile_specs"  # CDNA4 takes OCP FP8
INSPECTORS[("triangle_attention", "gfx950")] = "ceiling.triton.triangle_attention_specs:compile_specs"
INSPECTORS[("triangle_multiplicative_update", "gfx950")] = "ceiling.triton.triangle_multiplication_specs:compile_specs"


def inspect_targets(op: str) -> list[str]:
    return [t for (o, t) in INSPECTORS if o == op]


def inspect_ops() -> list[str]:
    return sorted({o for o, _ in INSPECTORS})


# The input dtypes a shipped specialization is compiled for; the FP8 GEMM also takes its operand formats
# (an output dtype stands for e4m3 operands with that output). CDNA4 takes OCP FP8, CDNA3 FNUZ.
INSPECT_DTYPES = ("bfloat16", "float16", "float32")
OCP_FP8 = ("float8_e4m3fn", "float8_e5m2")
FP8_DTYPES = {"sm_90a": OCP_FP8, "sm_100a": OCP_FP8, "sm_103a": OCP_FP8, "gfx950": OCP_FP8,
              "gfx942": ("float8_e4m3fnuz", "float8_e5m2fnuz")}


def inspect_dtypes(op: str, target: str) -> tuple[str, ...]:
    return INSPECT_DTYPES + (FP8_DTYPES.get(target, ()) if op == "scaled_gemm" else ())


def inspect_op(op: str, target: str, dtype: str = "bfloat16", config: dict | None = None) -> list[dict[str, Any]]:
    """Static facts of every shipped config of ``op`` for ``target`` (or of one ``config``). A bad op,
    target, dtype or config raises ``InputError`` naming it before anything compiles."""
    import importlib
    import inspect as _inspect

    from ceiling.errors import InputError

    if op not in inspect_ops():
        raise InputError("op", f"one of {inspect_ops()}", repr(op))
    if (op, target) not in INSPECTORS:
        raise InputError("target", f"one of {inspect_targets(op)} for {op}", repr(target))
    if dtype not in inspect_dtypes(op, target):
        raise InputError("dtype", f"one of {list(inspect_dtypes(op, target))} for {op} on {target}", repr(dtype))
    if config is not None and not isinstance(config, dict):
        raise InputError("config", "a dict of config keys", repr(config))
    module_name, func_name = INSPECTORS[(op, target)].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    if target not in TARGETS:
        if config and "config" not in _inspect.signature(func).parameters:
            raise InputError("config", f"no config for {op} on {target} (its inspection covers every shipped "
                             "config)", repr(config))
        return func(target, dtype=dtype, config=config) if config else func(target, dtype=dtype)
    takes_target = "target" in _inspect.signature(func).parameters
    specs = func(dtype=dtype, target=target) if takes_target else func(dtype=dtype)
    if config is not None:
        specs = [s for s in specs if all(s.config.get(k) == v for k, v in config.items())]
        if not specs:
            raise InputError("config", f"one of the shipped {op} configs for {target} (or a part of one; "
                             f"`ceiling inspect {op} --target {target} --json` lists them)", repr(config))
    return [profile(spec, target).as_dict() for spec in specs]
