"""Compile Triton kernels for real targets on a CPU machine and read their ISA: ``compile_for(spec,
"sm_90a")`` gives a cubin (SASS read with the ``cuobjdump`` the Triton wheel ships), ``"gfx942"`` an
hsaco with its AMDGCN text; :func:`profile` turns either into a :class:`StaticProfile` (registers,
spills, shared memory or LDS, tensor-core instruction counts, the instruction mix), facts that CI
checks and the performance model and search templates consume.
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
    "gfx942": ("hip", "gfx942", 64),
}


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


def compile_for(spec: CompileSpec, target: str):
    """Compile ``spec`` for ``target`` ("sm_90a" or "gfx942"); no GPU needed."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if target not in TARGETS:
        raise ValueError(f"target: expected one of {sorted(TARGETS)}, got {target!r}")
    backend, arch, warp = TARGETS[target]
    options = dict(spec.options)
    if backend == "cuda":  # options that only the AMD backend knows
        for key in ("waves_per_eu", "matrix_instr_nonkdim", "kpack"):
            options.pop(key, None)
    names = list(spec.fn.arg_names)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in spec.divisible_by_16}
    src = ASTSource(fn=spec.fn, signature=spec.signature, constexprs=spec.constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget(backend, arch, warp), options=options)


def _nvidia_bin(tool: str) -> str:
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


def profile(spec: CompileSpec, target: str) -> StaticProfile:
    """Compile ``spec`` for ``target`` and read its static facts."""
    kernel = compile_for(spec, target)
    num_warps = int(spec.options.get("num_warps", 4))
    if target == "sm_90a":
        cubin = kernel.asm["cubin"]
        usage = _resource_usage(cubin)
        mix = sass_mix(sass(cubin))
        spills = usage.get("LOCAL", 0) + usage.get("STACK", 0)
        # HGMMA: 16-bit and TF32 wgmma; QGMMA: FP8 wgmma (cuobjdump's name for it); HMMA: mma.sync
        tc = mix.get("HGMMA", 0) + mix.get("QGMMA", 0) + mix.get("HMMA", 0)
        return StaticProfile(
            name=spec.name,
            target=target,
            registers=usage.get("REG", 0),
            spill_bytes=spills,
            shared_bytes=int(kernel.metadata.shared),
            tensor_core_instructions=tc,
            instruction_mix=dict(mix.most_common()),
            num_warps=num_warps,
            threads=num_warps * 32,
            extra={"ldl_stl": mix.get("LDL", 0) + mix.get("STL", 0), "hgmma": mix.get("HGMMA", 0),
                   "qgmma": mix.get("QGMMA", 0)},
            config=dict(spec.config),
        )
    text = kernel.asm["amdgcn"]
    mix = gcn_mix(text)
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
            "agpr_count": _gcn_field(text, r"\.agpr_count:\s+(\d+)"),
            "sgpr_count": _gcn_field(text, r"\.sgpr_count:\s+(\d+)"),
            "vgpr_spill": _gcn_field(text, r"\.vgpr_spill_count:\s+(\d+)"),
            "sgpr_spill": _gcn_field(text, r"\.sgpr_spill_count:\s+(\d+)"),
            "occupancy": _gcn_field(text, r";\s+Occupancy:\s+(\d+)"),
            "lds_bytes": _gcn_field(text, r"\.group_segment_fixed_size:\s+(\d+)"),
        },
        config=dict(spec.config),
    )


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


def inspect_targets(op: str) -> list[str]:
    return [t for (o, t) in INSPECTORS if o == op]


def inspect_op(op: str, target: str, dtype: str = "bfloat16", config: dict | None = None) -> list[dict[str, Any]]:
    """Static facts of every shipped config of ``op`` for ``target`` (or of one ``config``)."""
    import importlib

    if (op, target) not in INSPECTORS:
        raise ValueError(f"target: expected one of {inspect_targets(op)} for {op}, got {target!r}")
    module_name, func_name = INSPECTORS[(op, target)].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    if target not in TARGETS:
        return func(target, dtype=dtype, config=config) if config else func(target, dtype=dtype)
    specs = func(dtype=dtype)
    if config is not None:
        specs = [s for s in specs if all(s.config.get(k) == v for k, v in config.items())]
        if not specs:
            raise ValueError(f"config: {config} is not among the shipped {op} configs for {target}")
    return [profile(spec, target).as_dict() for spec in specs]
