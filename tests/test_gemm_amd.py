"""The AMD CDNA3 GEMM: its kernel under the Triton interpreter, its configs, and its
real compile for gfx942 (AMDGCN: MFMA instructions, no scratch, LDS within 64 KB)."""

from __future__ import annotations

import re

import pytest
import torch
import triton
import triton.language as tl

from kernels.amd import gemm as amd
from kernels.amd.gemm import _xcd_contiguous  # noqa: F401  (called by bare name in the probe kernel)
from kernels.backends import gpu_vendor
from kernels.errors import InputError
from kernels.isa import compile_for
from kernels.gemm import gemm
from kernels.gemm.reference import activate_torch as _torch_act
from kernels.gemm.reference import gemm as reference_gemm
from kernels.gemm.spec import check
from kernels.triton_runtime import launcher
from tests.numerics import assert_close_by_ratio

TINY = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _tf32(x):
    """x rounded to TF32 (10 mantissa bits, nearest), as the XF32 MFMA reads fp32 inputs."""
    bits = x.float().contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32).view(x.shape)


def _check_close(out, a, b, bias=None, activation=None, out_dtype=None, tf32=False):
    """Our error against float64 is at most twice torch's own at the input precision
    (for fp32 on a gfx942 device, torch's fp32 product of TF32-rounded inputs)."""
    out_dtype = out_dtype or a.dtype
    assert out.dtype == out_dtype
    exact = reference_gemm(a, b, bias, activation, torch.float64, compute_dtype=torch.float64)
    a_low, b_low = (_tf32(a), _tf32(b)) if tf32 and a.dtype == torch.float32 else (a, b)
    low = reference_gemm(a_low, b_low, bias, activation, out_dtype, compute_dtype=a.dtype)
    scale = exact.abs().max().item() if exact.numel() else 1.0
    assert_close_by_ratio(out, low, exact, atol=torch.finfo(out_dtype).eps * max(1.0, scale))


def _rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float32).to(dtype)


# ----------------------------------------------------------------------------- forward


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_layouts_and_dtypes(dtype, ta, tb):
    m, k, n = 37, 29, 53
    a = _rand(k, m, dtype=dtype).mT if ta else _rand(m, k, dtype=dtype)
    b = _rand(n, k, dtype=dtype).mT if tb else _rand(k, n, dtype=dtype)
    _check_close(gemm(a, b, backend="amd", config=TINY), a, b)


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_epilogue(dtype, activation):
    a, b = _rand(37, 29, dtype=dtype), _rand(29, 53, dtype=dtype)
    bias = _rand(53, 2, dtype=dtype)[:, 1]  # a strided view
    _check_close(gemm(a, b, bias=bias, activation=activation, backend="amd", config=TINY), a, b, bias, activation)


@pytest.mark.parametrize(
    "dtype,out_dtype,bias_dtype",
    [(torch.bfloat16, torch.float32, torch.float32), (torch.float32, torch.bfloat16, torch.float16), (torch.float16, torch.bfloat16, torch.bfloat16)],
    ids=str,
)
def test_out_dtype(dtype, out_dtype, bias_dtype):
    a, b, bias = _rand(21, 40, dtype=dtype), _rand(40, 19, dtype=dtype), _rand(19, dtype=bias_dtype)
    out = gemm(a, b, bias=bias, activation="silu", out_dtype=out_dtype, backend="amd", config=TINY)
    _check_close(out, a, b, bias, "silu", out_dtype)


def test_batched_3d_by_3d_transposed():
    a = _rand(3, 29, 37, dtype=torch.bfloat16).mT
    b = _rand(3, 53, 29, dtype=torch.bfloat16).mT
    bias = _rand(53, dtype=torch.bfloat16)
    _check_close(gemm(a, b, bias=bias, activation="gelu", backend="amd", config=TINY), a, b, bias, "gelu")


@pytest.mark.parametrize("a_transposed", [False, True], ids=["rows-stack", "transposed"])
def test_batched_a_with_shared_b(a_transposed):
    # Row-major a folds the batch into M; a transposed a keeps the batch with b's batch stride 0.
    a = _rand(4, 29, 11, dtype=torch.float16).mT if a_transposed else _rand(4, 11, 29, dtype=torch.float16)
    b = _rand(29, 45, dtype=torch.float16)
    _check_close(gemm(a, b, activation="relu", backend="amd", config=TINY), a, b, None, "relu")


@pytest.mark.parametrize("k", [100, 64])  # uneven and even K splits
def test_split_k(k):
    a, b, bias = _rand(2, 19, k), _rand(2, k, 33), _rand(33)
    out = gemm(a, b, bias=bias, activation="gelu", backend="amd", config={**TINY, "SPLIT_K": 3})
    _check_close(out, a, b, bias, "gelu")


@pytest.mark.parametrize("m,k,n", [(1, 7, 1), (33, 48, 31), (8, 0, 5), (0, 4, 3)])
def test_edges(m, k, n):
    # One element, exact multiples of the block in K, an empty K (bias only), no rows.
    a, b, bias = _rand(m, k), _rand(k, n), _rand(n)
    _check_close(gemm(a, b, bias=bias, activation="relu", backend="amd", config=TINY), a, b, bias, "relu")


def test_default_config_path():
    # No config: the shape class and split-K heuristic pick it (skinny_m32 here).
    a, b = _rand(20, 40, dtype=torch.bfloat16), _rand(40, 24, dtype=torch.bfloat16)
    assert amd.shape_class(check(a, b)) == "skinny_m32"
    _check_close(gemm(a, b, backend="amd"), a, b)


def test_transposed_views_are_not_copied():
    x = _rand(16, 24)
    assert amd._operand(x.mT) is not None and amd._operand(x.mT).data_ptr() == x.data_ptr()
    assert amd._operand(x.mT).stride() == x.mT.stride()


def test_jax_arrays_through_the_interpreter():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import numpy as np

    a, b, bias = _rand(21, 18, dtype=torch.bfloat16), _rand(18, 27, dtype=torch.bfloat16), _rand(27)
    ja, jb = (jnp.asarray(t.float().numpy()).astype(jnp.bfloat16) for t in (a, b))
    out = gemm(ja, jb, bias=jnp.asarray(bias.numpy()), activation="relu", backend="amd", config=TINY)
    assert isinstance(out, jax.Array) and out.dtype == jnp.bfloat16 and out.shape == (21, 27)
    _check_close(torch.from_numpy(np.asarray(out, np.float32)).to(torch.bfloat16), a, b, bias, "relu")
    # The backward runs the two GEMMs through the same kernel.
    cot = _rand(21, 27)
    grad = jax.grad(lambda x: jnp.sum(gemm(x, jb, backend="amd", config=TINY).astype(jnp.float32) * cot.numpy()))(ja)
    ours = torch.from_numpy(np.asarray(grad, np.float32)).to(torch.bfloat16)
    _check_close(ours, cot.to(torch.bfloat16), b.mT)


# ----------------------------------------------------------------------------- backward


@pytest.mark.parametrize(
    "dtype,activation,batched",
    [(torch.float32, "gelu", False), (torch.bfloat16, "relu", False), (torch.float32, "silu", "shared_b"), (torch.float32, None, "3d")],
    ids=str,
)
def test_backward(dtype, activation, batched):
    if batched == "shared_b":
        a0, b0 = _rand(2, 13, 24, dtype=dtype), _rand(24, 18, dtype=dtype)
    elif batched == "3d":
        a0, b0 = _rand(2, 13, 24, dtype=dtype), _rand(2, 24, 18, dtype=dtype)
    else:
        a0, b0 = _rand(13, 24, dtype=dtype), _rand(24, 18, dtype=dtype)
    bias0 = _rand(18, dtype=dtype)
    grad = _rand(*a0.shape[:-1], 18, dtype=dtype)

    def grads(precision, run):
        a, b, bias = (t.detach().to(precision).requires_grad_() for t in (a0, b0, bias0))
        run(a, b, bias).backward(grad.to(precision))
        return a.grad, b.grad, bias.grad

    ours = grads(dtype, lambda a, b, bias: gemm(a, b, bias=bias, activation=activation, backend="amd"))
    exact = grads(torch.float64, lambda a, b, bias: _torch_act(a @ b + bias, activation))
    low = grads(dtype, lambda a, b, bias: _torch_act(a @ b + bias, activation))
    for name, g, e, t in zip(("a", "b", "bias"), ours, exact, low):
        assert_close_by_ratio(g, t, e, atol=torch.finfo(dtype).eps * max(1.0, e.abs().max().item()), name=f"grad {name}")


# ----------------------------------------------------------------------------- configs


def _problem(m, n, k, dtype="bfloat16", batch=None, shared=False):
    a = torch.empty((batch, m, k) if batch else (m, k), dtype=getattr(torch, dtype), device="meta")
    b = torch.empty((k, n) if shared or not batch else (batch, k, n), dtype=getattr(torch, dtype), device="meta")
    return check(a, b)


@pytest.mark.parametrize(
    "m,n,k,cls",
    [(1, 4096, 8192, "skinny_m16"), (32, 4096, 4096, "skinny_m32"), (64, 14336, 4096, "skinny_m64"),
     (512, 1024, 1024, "small"), (4096, 4096, 4096, "medium"), (4096, 14336, 4096, "wide"), (8192, 8192, 8192, "large")],
)
def test_shape_classes(m, n, k, cls):
    assert amd.shape_class(_problem(m, n, k), "MI300X") == cls


def test_split_k_heuristic():
    decode = amd.select_config(_problem(1, 4096, 8192), "MI300X")  # 64 tiles on 304 CUs, long K
    assert decode["SPLIT_K"] == 4
    assert amd.select_config(_problem(8192, 8192, 8192), "MI300X")["SPLIT_K"] == 1
    assert amd.select_config(_problem(1, 4096, 256), "MI300X")["SPLIT_K"] == 1  # K too short to split
    # Batch folded into M when b is shared: 8 x 4 rows is one 32-row problem.
    assert amd.shape_class(_problem(4, 4096, 4096, batch=8, shared=True), "MI300X") == "skinny_m32"


def test_overrides_and_bad_config():
    cfg = amd.select_config(_problem(4096, 4096, 4096), "MI300X", {"BLOCK_K": 32, "waves_per_eu": 1})
    assert cfg["BLOCK_K"] == 32 and cfg["waves_per_eu"] == 1 and cfg["BLOCK_M"] == 128
    with pytest.raises(InputError, match="config"):
        amd.select_config(_problem(64, 64, 64), "MI300X", {"BLOCK_SIZE_M": 64})
    with pytest.raises(InputError, match="BLOCK_N"):
        amd.select_config(_problem(64, 64, 64), "MI300X", {"BLOCK_N": 48})
    with pytest.raises(InputError, match="matrix_instr_nonkdim"):
        amd.select_config(_problem(64, 64, 64), "MI300X", {"matrix_instr_nonkdim": 8})


def test_fp32_halves_block_k_to_fit_lds():
    bf16 = amd.select_config(_problem(8192, 8192, 8192), "MI300X")
    fp32 = amd.select_config(_problem(8192, 8192, 8192, "float32"), "MI300X")
    assert fp32["BLOCK_K"] == bf16["BLOCK_K"] // 2 and fp32["kpack"] == 1
    assert amd.lds_bytes(fp32, 4) == amd.lds_bytes(bf16, 2)


@pytest.mark.parametrize("device", ["MI300X", "MI325X", "MI300A"])
def test_every_config_fits_lds_at_its_occupancy(device):
    entry = amd.device_entry(device)
    assert entry["configs"] == amd.device_entry("MI300X")["configs"]
    assert entry["rules"][-1].keys() == {"config"}  # the catch-all
    for name, cfg in entry["configs"].items():
        for dtype in ("bfloat16", "float32"):
            fitted = amd.fit_to_dtype(cfg, dtype)
            elem = 4 if dtype == "float32" else 2
            assert amd.lds_bytes(fitted, elem) <= amd.lds_budget(fitted) <= amd.LDS_BYTES, (name, dtype)
    assert amd.device_entry("MI300A")["num_xcds"] == 6 and amd.device_entry("MI325X")["num_xcds"] == 8


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
    specs = amd.compile_specs(dtype)
    assert len(specs) == len(amd.device_entry("MI300X")["configs"]) + 2
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
    from kernels.isa import CompileSpec, profile

    cfg = amd.device_entry("MI300X")["configs"]["large"]
    flags = {"transposed_a": True, "transposed_b": True} if variant == "transposed" else {"even_k": False}
    signature, constexprs, aligned = amd.kernel_signature("bfloat16", cfg, **flags)
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
            _check_close(poisoned.cpu(), a.cpu(), b.cpu(), bias.cpu(), "gelu", tf32=True)
    a = _rand(4, 333, 257, dtype=dtype).to(dev).requires_grad_()
    w = _rand(190, 257, dtype=dtype).to(dev).requires_grad_()
    out = gemm(a, w.mT, activation="silu", backend="amd")
    _check_close(out.detach().cpu(), a.detach().cpu(), w.detach().cpu().mT, None, "silu", tf32=True)
    out.backward(torch.randn_like(out))
    assert not torch.isnan(a.grad).any() and not torch.isnan(w.grad).any()
