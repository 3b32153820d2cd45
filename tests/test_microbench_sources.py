"""Every microbenchmark source compiles for its target, and the ISA holds the instructions it times.

CUDA: nvcc -gencode=arch=compute_90a,code=sm_90a -cubin, disassembled with
cuobjdump (on PATH or from the Triton wheel); the same sources through NVRTC
(the run-time path) when cuda.bindings is installed. HIP: clang for gfx942
without ROCm headers.
"""

import functools

import pytest

from ceiling.microbench import build, occupancy


def _tool(probe):
    try:
        probe()
        return None
    except build.ToolMissing as exc:
        return str(exc)


needs_nvcc = pytest.mark.skipif(bool(_tool(build.nvcc_path) or _tool(build.cuobjdump_path)),
                                reason=f"{_tool(build.nvcc_path) or _tool(build.cuobjdump_path)}")
needs_clang = pytest.mark.skipif(bool(_tool(build.clang_path)), reason=f"{_tool(build.clang_path)}")


@functools.cache
def _sass_ops(name):
    cubin = build.nvcc_cubin(name, "sm_90a", {"NACC": 64} if name == "occupancy.cu" else None)
    text = build.sass(cubin)
    return build.opcodes(text), text, build.resource_usage(cubin)


# kernel -> (opcode, at least this many) that the benchmark exists to time
EXPECTED_SASS = {
    "bank_conflicts.cu": {
        "lds_b32": ("LDS", 16), "lds_b64": ("LDS.64", 16), "lds_b128": ("LDS.128", 16),
        "sts_b32": ("STS", 16), "sts_b64": ("STS.64", 16), "sts_b128": ("STS.128", 16),
        "ldsm_x4": ("LDSM.16.M88.4", 16), "ldsm_x4_trans": ("LDSM.16.MT88.4", 16),
    },
    "ceilings.cu": {
        "read_f4": ("LDG.E.128.STRONG.GPU", 1),  # ld.global.cg: served by L2, not L1
        "write_f4": ("STG.E.128", 1),
        "copy_f4": ("STG.E.128", 1),
        "smem_read": ("LDS.128", 16),
        "fma_f32": ("FFMA", 512),
        "mma_bf16": ("HMMA.16816.F32.BF16", 64),
        "pointer_chase": ("LDG.E.64.STRONG.SM", 2),
    },
    "occupancy.cu": {"resident": ("FFMA", 64)},
    "wgmma.cu": {"wgmma_bf16": ("HGMMA.64x256x16.F32.BF16", 16)},
    "clocks.cu": {"sm_frequency": ("CS2R", 2)},
}


def test_every_cuda_source_is_covered():
    assert {p.name for p in build.cuda_sources()} == set(EXPECTED_SASS)


@needs_nvcc
@pytest.mark.parametrize("source", sorted(EXPECTED_SASS))
def test_cuda_source_compiles_for_sm90a_with_the_timed_instructions(source):
    ops, text, usage = _sass_ops(source)
    for kernel, (opcode, at_least) in EXPECTED_SASS[source].items():
        assert kernel in ops, f"{kernel} missing from {source}"
        assert ops[kernel][opcode] >= at_least, f"{kernel}: {opcode} x{ops[kernel][opcode]}, want >= {at_least}"
        assert usage[kernel]["local"] == 0, f"{kernel} spills"
    if source == "bank_conflicts.cu":  # each width kernel issues only its own width
        assert ops["lds_b32"]["LDS.128"] == ops["lds_b32"]["LDS.64"] == 0
        assert ops["lds_b128"]["LDS"] == 0
    if source in ("clocks.cu", "occupancy.cu"):
        assert "SR_GLOBALTIMERLO" in text and "SR_VIRTUALSMID" in text


@needs_nvcc
def test_occupancy_kernel_register_pressure_follows_nacc():
    regs = [build.resource_usage(build.nvcc_cubin("occupancy.cu", "sm_90a", {"NACC": n}))["resident"]["registers"]
            for n in (4, 200)]
    assert regs[0] < 40 and 128 < regs[1] <= 255
    # the static facts feed the calculator directly
    o = occupancy.from_static({"registers": regs[1]}, "sm_90a", threads=256)
    assert o.limiter == "registers" and o.blocks == 1


def test_cuda_sources_compile_with_nvrtc():
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings not installed (the run-time compile path)")
    try:
        cubin = build.nvrtc_cubin("bank_conflicts.cu", "sm_90a")
    except RuntimeError as exc:
        if "nvrtc" in str(exc).lower() and "load" in str(exc).lower():
            pytest.skip(f"libnvrtc not loadable: {exc}")
        raise
    if not _tool(build.cuobjdump_path):
        assert build.opcodes(build.sass(cubin))["ldsm_x4"]["LDSM.16.M88.4"] >= 16
    # every source the suites load at run time (wgmma.cu takes longest; nvcc covers it above)
    for src in build.cuda_sources():
        if src.name not in ("bank_conflicts.cu", "wgmma.cu"):
            assert build.nvrtc_cubin(src.name, "sm_90a")[:4] == b"\x7fELF"


EXPECTED_ISA = {
    "bank_conflicts.hip": {
        k: (k, 16) for k in ("ds_read_b32", "ds_read_b64", "ds_read_b128", "ds_write_b32", "ds_write_b64", "ds_write_b128")
    },
    "ceilings.hip": {
        "read_f4": ("global_load_dwordx4", 1), "write_f4": ("global_store_dwordx4", 1),
        "copy_f4": ("global_store_dwordx4", 1), "fma_f32": ("v_pk_fma_f32", 256),
        "mfma_bf16": ("v_mfma_f32_32x32x8_bf16", 64), "pointer_chase": ("flat_load_dwordx2", 2),
    },
    "clocks.hip": {"sm_frequency": ("s_memrealtime", 2)},
    "occupancy.hip": {"resident": ("s_getreg_b32", 2)},
}


def test_every_hip_source_is_covered():
    assert {p.name for p in build.hip_sources()} == set(EXPECTED_ISA)


@needs_clang
@pytest.mark.parametrize("source", sorted(EXPECTED_ISA))
def test_hip_source_compiles_for_gfx942_with_the_timed_instructions(source):
    asm = build.hip_asm(source, "gfx942")
    ops = build.amd_opcodes(asm)
    facts = build.amd_kernel_facts(asm)
    for kernel, (instruction, at_least) in EXPECTED_ISA[source].items():
        assert ops[kernel][instruction] >= at_least, f"{kernel}: {instruction} x{ops[kernel][instruction]}"
        assert facts[kernel]["scratch_bytes"] == 0, f"{kernel} spills"
    if source == "clocks.hip":
        assert ops["sm_frequency"]["s_memtime"] >= 2
    if source == "bank_conflicts.hip":
        for kernel, (instruction, _) in EXPECTED_ISA[source].items():
            others = [op for op in ops[kernel] if op.startswith(("ds_read", "ds_write")) and op != instruction]
            assert others in ([], ["ds_write_b32"]), others  # plus the buffer fill
            assert facts[kernel]["lds_bytes"] == 40960
            o = occupancy.from_static(facts[kernel], "gfx942", threads=256)
            assert (o.blocks, o.limiter) == (1, "lds")
