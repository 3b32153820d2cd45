"""The CDNA3 GEMM's own pieces: split-K, reading transposed views in place, the shape classes of its
table and the split-K decision per device, the XCD renumbering, its real compile for gfx942
(AMDGCN: MFMA instructions, no scratch, LDS within 64 KB), and the compiled kernel on a ROCm GPU.
The cases every implementation runs are ``tests/test_gemm.py``'s ``TestAmd``."""

from __future__ import annotations

import re

import pytest
import torch
import triton
import triton.language as tl

from ceiling import tables
from ceiling.amd import devices
from ceiling.amd import gemm as amd
from ceiling.amd import gemm_specs
from ceiling.amd.gemm import _xcd_contiguous  # noqa: F401  (called by bare name in the probe kernel)
from ceiling.backends import gpu_vendor
from ceiling.errors import InputError
from ceiling.gemm import gemm
from ceiling.gemm.op import GEMM
from ceiling.gemm.spec import shipped_problem
from ceiling.isa import compile_for
from ceiling.op import resolve_config
from ceiling.triton_runtime import launcher
from tests.test_gemm import expect

TINY = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
MI300X = "AMD Instinct MI300X"


def _rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float32).to(dtype)


def _resolved(m, n, k, dtype="bfloat16", gpu=MI300X, config=None, batch=None, shared=False):
    problem = shipped_problem(m, n, k, dtype, batch=batch, b_shared=shared, gpu=gpu, arch="gfx942" if gpu else None)
    return resolve_config(problem, GEMM.implementation("amd"), config)


def _class(m, n, k, **kw):
    return amd.shape_class(shipped_problem(m, n, k, **kw))


# ----------------------------------------------------------------------------- forward


@pytest.mark.parametrize("k", [100, 64])  # uneven and even K splits
def test_split_k(k):
    a, b, bias = _rand(2, 19, k), _rand(2, k, 33), _rand(33)
    out = gemm(a, b, bias=bias, activation="gelu", backend="amd", config={**TINY, "SPLIT_K": 3})
    expect(out, a, b, bias, "gelu")


def test_default_config_path():
    # No config: the shape class and split-K heuristic pick it (skinny_m32 here).
    a, b = _rand(20, 40, dtype=torch.bfloat16), _rand(40, 24, dtype=torch.bfloat16)
    assert _class(20, 24, 40) == "skinny_m32"
    expect(gemm(a, b, backend="amd"), a, b)


def test_transposed_views_are_not_copied():
    x = _rand(16, 24)
    assert amd._operand(x.mT) is not None and amd._operand(x.mT).data_ptr() == x.data_ptr()
    assert amd._operand(x.mT).stride() == x.mT.stride()


# ----------------------------------------------------------------------------- configs


@pytest.mark.parametrize(
    "m,n,k,cls",
    [(1, 4096, 8192, "skinny_m16"), (32, 4096, 4096, "skinny_m32"), (64, 14336, 4096, "skinny_m64"),
     (512, 1024, 1024, "small"), (4096, 4096, 4096, "medium"), (4096, 14336, 4096, "wide"), (8192, 8192, 8192, "large")],
)
def test_shape_classes(m, n, k, cls):
    assert _class(m, n, k) == cls
    assert dict(_resolved(m, n, k)) == {**gemm_specs.shape_classes()[cls], "SPLIT_K": _resolved(m, n, k)["SPLIT_K"]}


def test_every_problem_is_in_exactly_one_shape_class():
    """The classes' conditions exclude each other and cover every problem (the rules they replace
    were tried in order, the last one matching everything)."""
    entries = tables.read(tables.path("amd", "gfx942", "gemm"))["entries"]
    classes = [e for e in entries if "label" in e]
    for m in (1, 16, 17, 32, 33, 64, 65, 128, 1000, 4096, 8192, 16384):
        for n in (1, 64, 1024, 2048, 4096, 14336, 65536):
            held = [e["label"] for e in classes if tables.matches(e, {"M": m, "N": n})]
            assert len(held) == 1, (m, n, held)


def test_split_k_heuristic():
    decode = _resolved(1, 4096, 8192)  # 64 tiles on 304 CUs, long K
    assert decode["SPLIT_K"] == 4
    assert _resolved(8192, 8192, 8192)["SPLIT_K"] == 1
    assert _resolved(1, 4096, 256)["SPLIT_K"] == 1  # K too short to split
    # Batch folded into M when b is shared: 8 x 4 rows is one 32-row problem.
    assert _class(4, 4096, 4096, batch=8, b_shared=True) == "skinny_m32"
    # The split fills the device's CUs: the MI300A has 228, the MI300X 304.
    assert _resolved(1, 4096, 8192, gpu="AMD Instinct MI300A")["SPLIT_K"] == 2
    assert _resolved(1, 4096, 8192, gpu=None)["SPLIT_K"] == 4  # the CPU compiles for the MI300X


def test_overrides_and_bad_config():
    cfg = _resolved(4096, 4096, 4096, config={"BLOCK_K": 32, "waves_per_eu": 1})
    assert cfg["BLOCK_K"] == 32 and cfg["waves_per_eu"] == 1 and cfg["BLOCK_M"] == 128
    assert _resolved(1, 4096, 8192, config={"SPLIT_K": 1})["SPLIT_K"] == 1  # a split asked for is kept
    with pytest.raises(InputError, match="config"):
        _resolved(64, 64, 64, config={"BLOCK_SIZE_M": 64})
    with pytest.raises(InputError, match="BLOCK_N"):
        _resolved(64, 64, 64, config={"BLOCK_N": 48})
    with pytest.raises(InputError, match="matrix_instr_nonkdim"):
        _resolved(64, 64, 64, config={"matrix_instr_nonkdim": 8})


def test_fp32_halves_block_k_to_fit_lds():
    bf16 = _resolved(8192, 8192, 8192)
    fp32 = _resolved(8192, 8192, 8192, "float32")
    assert fp32["BLOCK_K"] == bf16["BLOCK_K"] // 2 and fp32["kpack"] == 1
    assert amd.lds_bytes(fp32, 4) == amd.lds_bytes(bf16, 2)


def test_every_class_fits_lds_at_its_occupancy_and_the_float32_entries_are_its_fit():
    entries = tables.read(tables.path("amd", "gfx942", "gemm"))["entries"]
    for name, cfg in gemm_specs.shape_classes().items():
        for dtype in ("bfloat16", "float32"):
            fitted = amd.fit_to_dtype(cfg, dtype)
            elem = 4 if dtype == "float32" else 2
            assert amd.lds_bytes(fitted, elem) <= amd.lds_budget(fitted) <= amd.LDS_BYTES, (name, dtype)
        when = next(e["when"] for e in entries if e.get("label") == name)
        (fp32,) = [e for e in entries if e.get("when") == f"dtype_bytes == 4 and {when}"]
        assert {**cfg, **fp32["config"]} == amd.fit_to_dtype(cfg, "float32"), name
    assert devices.num_xcds("AMD Instinct MI300A") == 6 and devices.num_xcds("AMD Instinct MI325X") == 8
    assert devices.num_cus("AMD Instinct MI300A") == 228 and devices.num_cus("AMD Instinct MI325X") == 304
    assert devices.model(None) == devices.model("AMD Instinct MI300X") == devices.DEFAULT


@triton.jit
def _xcd_probe(out_ptr, NUM_XCDS: tl.constexpr):
    pid = tl.program_id(0)
    tl.store(out_ptr + pid, _xcd_contiguous(pid, tl.num_programs(0), NUM_XCDS))


@pytest.mark.parametrize("num_pids", [1, 5, 8, 10, 37, 64])
def test_xcd_renumbering_gives_each_xcd_a_contiguous_run(num_pids):
    out = torch.full((num_pids,), -1, dtype=torch.int32)
    launcher(_xcd_probe, on_gpu=False)[(num_pids,)](out, NUM_XCDS=8)
    assert sorted(out.tolist()) == list(range(num_pids))  # a permutation
    for xcd in range(8):
        mine = out[xcd::8].tolist()  # the programs the dispatcher sends to this XCD
        assert mine == list(range(mine[0], mine[0] + len(mine))) if mine else True


# ----------------------------------------------------------------------------- gfx942 compile


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_shipped_configs_compile_for_gfx942(dtype):
    specs = gemm_specs.compile_specs(dtype)
    assert len(specs) == len(gemm_specs.shape_classes()) + 2
    mfma = "v_mfma_f32_\\d+x\\d+x\\d+_" + ("xf32" if dtype == "float32" else "bf16")
    for spec in specs:
        kernel = compile_for(spec, "gfx942")
        asm = kernel.asm["amdgcn"]
        assert re.search(r"; ScratchSize: 0\b", asm), spec.name
        assert re.search(r"\.private_segment_fixed_size:\s+0\b", asm), spec.name
        assert kernel.metadata.shared <= amd.LDS_BYTES, spec.name
        assert "global_load_dwordx4" in asm, spec.name  # the divisibility hints reach the compiler: wide loads
        if spec.fn is amd.gemm_kernel:
            assert re.search(mfma, asm), spec.name
            assert kernel.metadata.shared == amd.lds_bytes(spec.config, 4 if dtype == "float32" else 2), spec.name
            # Registers and LDS together admit the occupancy the config asks for.
            occupancy = int(re.search(r"; Occupancy: (\d+)", asm).group(1))
            assert occupancy >= spec.options["waves_per_eu"], (spec.name, occupancy)


@pytest.mark.parametrize("variant", ["transposed", "uneven_k"])
def test_other_specializations_compile_to_mfma(variant):
    # Transposed a and b (unit stride along M and K), and the masked-K main loop.
    from ceiling.isa import CompileSpec, profile

    cfg = gemm_specs.shape_classes()["large"]
    flags = {"transposed_a": True, "transposed_b": True} if variant == "transposed" else {"even_k": False}
    signature, constexprs, aligned = gemm_specs.kernel_signature("bfloat16", cfg, **flags)
    spec = CompileSpec(variant, amd.gemm_kernel, signature, constexprs, {k: cfg[k] for k in amd.COMPILE_KEYS},
                       divisible_by_16=aligned)
    facts = profile(spec, "gfx942")
    assert facts.tensor_core_instructions > 0 and facts.spill_bytes == 0
    assert facts.instruction_mix.get("v_mfma_f32_16x16x16_bf16", 0) == facts.tensor_core_instructions


# ----------------------------------------------------------------------------- on a ROCm GPU


@pytest.mark.gpu
@pytest.mark.skipif(gpu_vendor() != "amd", reason="needs an AMD GPU; the CPU tests above run the same kernel interpreted")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_on_rocm_gpu(dtype):
    """The compiled kernel with the shipped configs: every shape class, split-K, layouts, epilogues, backward."""
    dev = "cuda"
    for m, n, k in ((1, 4096, 8192), (29, 1000, 3000), (64, 4096, 1024), (1031, 777, 515), (2048, 2048, 2048), (4096, 8192, 1024)):
        for ta, tb in ((False, False), (True, True)):
            a = (_rand(k, m, dtype=dtype).mT if ta else _rand(m, k, dtype=dtype)).to(dev)
            b = (_rand(n, k, dtype=dtype).mT if tb else _rand(k, n, dtype=dtype)).to(dev)
            bias = _rand(n, dtype=dtype).to(dev)
            poisoned = torch.full((m, n), float("nan"), dtype=dtype, device=dev)
            poisoned.copy_(gemm(a, b, bias=bias, activation="gelu", backend="amd"))
            expect(poisoned.cpu(), a.cpu(), b.cpu(), bias.cpu(), "gelu", tf32=True)
    a = _rand(4, 333, 257, dtype=dtype).to(dev).requires_grad_()
    w = _rand(190, 257, dtype=dtype).to(dev).requires_grad_()
    out = gemm(a, w.mT, activation="silu", backend="amd")
    expect(out.detach().cpu(), a.detach().cpu(), w.detach().cpu().mT, None, "silu", tf32=True)
    out.backward(torch.randn_like(out))
    assert not torch.isnan(a.grad).any() and not torch.isnan(w.grad).any()
