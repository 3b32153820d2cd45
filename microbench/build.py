"""Compile the microbenchmark sources: at run time for the device, ahead of time for inspection.

The CUDA sources (``microbench/sources/*.cu``) use no standard headers, so one
text compiles with NVRTC (through ``cuda.bindings``), with nvcc, or with CuPy's
own NVRTC path. The HIP sources (``*.hip``) compile with a stock clang for
gfx942, against the small builtin header next to them when no ROCm headers are
installed. ``sass``/``opcodes`` disassemble a cubin with cuobjdump so tests can
check that the instruction a benchmark means to time is really there.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections import Counter
from importlib import resources
from pathlib import Path

SOURCES = Path(str(resources.files("ceiling.microbench") / "sources"))


class ToolMissing(RuntimeError):
    """A compiler or disassembler this step needs is not installed here."""


def source_path(name: str) -> Path:
    path = SOURCES / name
    if not path.is_file():
        raise FileNotFoundError(f"no microbenchmark source {name!r} in {SOURCES}")
    return path


def cuda_sources() -> list[Path]:
    return sorted(SOURCES.glob("*.cu"))


def hip_sources() -> list[Path]:
    return sorted(SOURCES.glob("*.hip"))


def _defines(defines: dict[str, object] | None) -> list[str]:
    return [f"-D{k}={v}" for k, v in (defines or {}).items()]


# ---------------------------------------------------------------- CUDA


def nvrtc_cubin(name: str, arch: str = "sm_90a", defines: dict[str, object] | None = None, extra: tuple[str, ...] = ()) -> bytes:
    """Compile a CUDA source to a cubin with NVRTC (``cuda.bindings``); no driver needed."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ToolMissing("cuda.bindings (pip install cuda-bindings) is not installed") from exc

    def check(result, what):
        err = result[0]
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"{what}: {err}")
        return result[1:] if len(result) > 1 else None

    src = source_path(name).read_bytes()
    (prog,) = check(nvrtc.nvrtcCreateProgram(src, name.encode(), 0, [], []), "nvrtcCreateProgram")
    opts = [f"-arch={arch}", f"-I{SOURCES}", "-std=c++17", "-default-device", *_defines(defines), *extra]
    opts_b = [o.encode() for o in opts]
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts_b), opts_b)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            (size,) = check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
            log = b" " * size
            check(nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
            raise RuntimeError(f"NVRTC failed to compile {name} for {arch}:\n{log.decode(errors='replace')}")
        (size,) = check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def nvcc_path() -> str:
    for candidate in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if candidate and Path(candidate).exists():
            return candidate
    raise ToolMissing("nvcc is not on PATH")


def nvcc_cubin(name: str, arch: str = "sm_90a", defines: dict[str, object] | None = None, extra: tuple[str, ...] = ()) -> bytes:
    """Compile with nvcc: ``-gencode=arch=compute_XX,code=sm_XX -cubin``."""
    number = arch.removeprefix("sm_")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.cubin"
        cmd = [
            nvcc_path(), f"-gencode=arch=compute_{number},code=sm_{number}", "-cubin", "-O3",
            f"-I{SOURCES}", *_defines(defines), *extra, "-o", str(out), str(source_path(name)),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode:
            raise RuntimeError(f"nvcc failed on {name} for {arch}:\n{proc.stderr}")
        return out.read_bytes()


def cuobjdump_path() -> str:
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import triton

        bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    raise ToolMissing("cuobjdump is not on PATH and no Triton wheel bundles it")


def sass(cubin: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        proc = subprocess.run([cuobjdump_path(), "-sass", f.name], capture_output=True, text=True, timeout=120)
    if proc.returncode:
        raise RuntimeError(f"cuobjdump failed: {proc.stderr}")
    return proc.stdout


_FUNCTION = re.compile(r"Function : (\S+)")
_SASS_OP = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")


def opcodes(sass_text: str) -> dict[str, Counter]:
    """Per-function counts of SASS opcodes with their modifiers (``LDS.128``, ``LDSM.16.M88.4``)."""
    counts: dict[str, Counter] = {}
    current = None
    for line in sass_text.splitlines():
        m = _FUNCTION.search(line)
        if m:
            current = m.group(1)
            counts[current] = Counter()
            continue
        if current is None:
            continue
        m = _SASS_OP.search(line)
        if m:
            counts[current][m.group(1)] += 1
    return counts


# ---------------------------------------------------------------- HIP

CLANG_CANDIDATES = ("clang-19", "clang-20", "clang-18", "clang")


def clang_path() -> str:
    for name in CLANG_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    raise ToolMissing("no clang with the AMDGPU target (apt-get install clang-19)")


def hip_asm(name: str, arch: str = "gfx942", defines: dict[str, object] | None = None) -> str:
    """AMDGCN assembly of a HIP source, device side only, without ROCm installed."""
    cmd = [
        clang_path(), "-x", "hip", f"--offload-arch={arch}", "--cuda-device-only", "-nogpulib", "-nogpuinc",
        "-O3", "-S", "-o", "-", f"-I{SOURCES}", *_defines(defines), str(source_path(name)),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode:
        raise RuntimeError(f"clang failed on {name} for {arch}:\n{proc.stderr}")
    return proc.stdout


_AMD_FUNCTION = re.compile(r"^([A-Za-z_][\w.$]*):\s*(?:;.*)?$")
_AMD_OP = re.compile(r"^\s+([sv]_\w+|ds_\w+|global_\w+|buffer_\w+|flat_\w+|scratch_\w+)\b")


def amd_opcodes(asm: str) -> dict[str, Counter]:
    """Per-kernel counts of AMDGCN instructions (``ds_read_b128``, ``v_fma_f32``, ...)."""
    counts: dict[str, Counter] = {}
    current = None
    for line in asm.splitlines():
        m = _AMD_FUNCTION.match(line)
        if m and not m.group(1).startswith("."):
            current = m.group(1)
            counts.setdefault(current, Counter())
            continue
        if line.startswith("\t.end_amdgpu") or line.startswith(".Lfunc_end"):
            current = None
            continue
        m = _AMD_OP.match(line)
        if m and current is not None:
            counts[current][m.group(1)] += 1
    return counts


def amd_kernel_facts(asm: str) -> dict[str, dict[str, int]]:
    """VGPRs, AGPRs, SGPRs, LDS bytes and scratch per kernel, from the kernel descriptors."""
    facts: dict[str, dict[str, int]] = {}
    current = None
    keys = {
        ".amdhsa_next_free_vgpr": "vgprs_next_free",
        ".amdhsa_next_free_sgpr": "sgprs",
        ".amdhsa_group_segment_fixed_size": "lds_bytes",
        ".amdhsa_private_segment_fixed_size": "scratch_bytes",
        ".amdhsa_accum_offset": "accum_offset",
    }
    for line in asm.splitlines():
        s = line.strip()
        if s.startswith(".amdhsa_kernel "):
            current = s.split()[1]
            facts[current] = {}
        elif s.startswith(".end_amdhsa_kernel"):
            current = None
        elif current is not None:
            parts = s.split()
            if len(parts) == 2 and parts[0] in keys:
                facts[current][keys[parts[0]]] = int(parts[1])
    for f in facts.values():
        total = f.get("vgprs_next_free", 0)
        accum = f.get("accum_offset", total)
        f["vgprs"] = min(total, accum)
        f["agprs"] = max(0, total - accum)
    return facts


_RES = re.compile(r"Function (\S+):\s*\n\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


def resource_usage(cubin: bytes) -> dict[str, dict[str, int]]:
    """Registers, stack, shared and local (spill) bytes per kernel, from ``cuobjdump -res-usage``."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        proc = subprocess.run([cuobjdump_path(), "-res-usage", f.name], capture_output=True, text=True, timeout=120)
    if proc.returncode:
        raise RuntimeError(f"cuobjdump -res-usage failed: {proc.stderr}")
    return {
        m.group(1): {"registers": int(m.group(2)), "stack": int(m.group(3)), "shared": int(m.group(4)), "local": int(m.group(5))}
        for m in _RES.finditer(proc.stdout)
    }
