"""FP8 GEMM for AMD CDNA3 (MI300X / MI325X, gfx942) in Triton: FNUZ operands on the FP8 MFMA.

``out = activation((a * sa) @ (b * sb) + bias)``, the contract of ``kernels.scaled_gemm``.
What is particular to CDNA3:

* **FNUZ, not OCP.** gfx942's FP8 MFMA (``v_mfma_f32_32x32x16_fp8_fp8``, ``..._bf8_bf8`` for
  e5m2, and the 16x16x32 forms) multiplies ``float8_e4m3fnuz`` / ``float8_e5m2fnuz``: exponent
  bias one higher than OCP, no negative zero, no infinity, NaN at ``0x80``, e4m3fnuz's largest
  value 240. Given OCP operands, Triton 3.9 for gfx942 would upcast them to float16 and use
  the f16 MFMA at half the FP8 rate; instead :func:`scaled_gemm` maps them exactly to FNUZ
  (:func:`kernels.fp8.ocp_to_fnuz`: the same bits are worth half, so the scales double; NaN
  and infinities become the FNUZ NaN), one elementwise pass over a and b. Quantize straight
  to the FNUZ dtypes (``kernels.fp8.quantize(..., dtype=torch.float8_e4m3fnuz)``) to skip it.
* **float32 accumulation in the MFMA.** Per-tensor and per-row scales therefore need no
  promotion: the K loop accumulates in the MFMA accumulator and the scales multiply the
  result once, in the epilogue. 1x128 and 128x128 scales change every 128 of K, so those
  configs compute each 128-deep block as a fresh partial and add it scaled
  (``PROMOTE_STEPS``, as on Hopper).
* **The CDNA3 GEMM's shape otherwise** (``kernels.amd.gemm``): one tile per program, pointer
  loads (any strides, so transposed views are read in place), edge rows wrapped rather than
  masked, XCD-contiguous tile numbering, LDS-budgeted tiles, the epilogue fused before the
  one store.

Tile configs per device and shape class live in ``configs/gemm_fp8.json``; a ``config=`` is
checked against the search space (``kernels/spaces/gemm_fp8.json``, target gfx942) before
anything launches.
"""

from __future__ import annotations

from pathlib import Path

import torch
import triton
import triton.language as tl

from kernels import spaces
from kernels.amd.gemm import ACTIVATION_CODES, COMPILE_KEYS, _epilogue, _grouped_tile, _xcd_contiguous
from kernels.amd import device_table
from kernels.fp8.formats import FORMATS, TO_FNUZ, format_of, ocp_to_fnuz
from kernels.triton.fp8_scales import K_VARYING, output_scales, promote
from kernels.scaled_gemm.spec import config_context, kinds
from kernels.triton_runtime import launcher

CONFIG_PATH = Path(__file__).parent / "configs" / "gemm_fp8.json"
TILE_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "PROMOTE_STEPS")
CONFIG_KEYS = TILE_KEYS + COMPILE_KEYS
TARGET_ARCH = "gfx942"
FAMILY = "gemm_fp8"


@triton.jit
def gemm_fp8_kernel(
    a_ptr, b_ptr, a_scale_ptr, b_scale_ptr, bias_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    stride_sam, stride_sak, stride_sbk, stride_sbn,
    A_SCALE: tl.constexpr, B_SCALE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_XCDS: tl.constexpr, PROMOTE_STEPS: tl.constexpr, EVEN_K: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
):
    """One (BLOCK_M, BLOCK_N) output tile over all of K."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid = _xcd_contiguous(tl.program_id(0), tl.num_programs(0), NUM_XCDS)
    pid_m, pid_n = _grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)
    # Rows and columns past the edge wrap around so the loads stay unmasked and wide; the
    # store drops them.
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    STEPS: tl.constexpr = PROMOTE_STEPS if PROMOTE_STEPS > 0 else 1
    for k0 in range(0, K, BLOCK_K * STEPS):
        part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for j in tl.static_range(STEPS):
            kj = k0 + j * BLOCK_K
            if EVEN_K:
                a = tl.load(a_ptrs + kj * stride_ak)
                b = tl.load(b_ptrs + kj * stride_bk)
            else:
                a = tl.load(a_ptrs + kj * stride_ak, mask=offs_k[None, :] < K - kj, other=0.0)
                b = tl.load(b_ptrs + kj * stride_bk, mask=offs_k[:, None] < K - kj, other=0.0)
            if PROMOTE_STEPS == 0:
                acc = tl.dot(a, b, acc)
            else:
                part = tl.dot(a, b, part)
        if PROMOTE_STEPS > 0:
            acc = promote(acc, part, a_scale_ptr, b_scale_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, k0, M, N,
                          stride_sam, stride_sak, stride_sbk, stride_sbn, BLOCK_M, BLOCK_N, A_SCALE, B_SCALE)

    rows = pid_m * BLOCK_M
    cols = pid_n * BLOCK_N
    acc = output_scales(acc, a_scale_ptr, b_scale_ptr, rows, cols, M, N, stride_sam, stride_sbn,
                        BLOCK_M, BLOCK_N, A_SCALE, B_SCALE)
    rm = rows + tl.arange(0, BLOCK_M)
    rn = cols + tl.arange(0, BLOCK_N)
    acc = _epilogue(acc, bias_ptr, rn, N, HAS_BIAS, ACTIVATION)
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


# ----------------------------------------------------------------------------- configs


def _table() -> dict:
    return device_table.load(CONFIG_PATH)


def device_entry(device: str) -> dict:
    """The JSON entry of ``device``, with ``inherits`` resolved (child keys win)."""
    return device_table.device_entry(CONFIG_PATH, device)


def current_device() -> str:
    """The table key for the visible AMD GPU; MI300X off-device (the compile target)."""
    return device_table.current_device(CONFIG_PATH)


def shape_class(m: int, a_kind: str, b_kind: str) -> str:
    if m <= 64:
        return "skinny"
    return "blockwise" if a_kind in K_VARYING or b_kind in K_VARYING else "large"


def select_config(m: int, n: int | None, k: int | None, a_kind: str, b_kind: str, device: str | None = None,
                  config: dict | None = None, out_dtype: str = "bfloat16") -> dict:
    """The shape class's config on ``device`` with the keys ``config`` names over it, checked against
    the gfx942 space (keys, domains, LDS, the promotion this scaling needs). Where the class's entry
    does not promote and the scales are blockwise, it promotes every 128 of K (unless ``config``
    names PROMOTE_STEPS)."""
    entry = device_entry(device or current_device())
    base = {key: v for key, v in entry["configs"][shape_class(m, a_kind, b_kind)].items() if key in CONFIG_KEYS}
    context = config_context(m, n, k, a_kind, b_kind, out_dtype, config)
    if config is not None:
        spaces.check(FAMILY, TARGET_ARCH, config, partial=True)
    if (a_kind in K_VARYING or b_kind in K_VARYING) and base["PROMOTE_STEPS"] == 0 and "PROMOTE_STEPS" not in (config or {}):
        base["PROMOTE_STEPS"] = max(1, 128 // (config or {}).get("BLOCK_K", base["BLOCK_K"]))
    merged = spaces.resolve(FAMILY, TARGET_ARCH, base, config, context)
    return {key: v for key, v in merged.items() if key != "SCALES"}


# ----------------------------------------------------------------------------- launch


def to_fnuz(x: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An OCP operand and its scale as the FNUZ operand of the same value (exact)."""
    if format_of(x.dtype).fnuz:
        return x, scale
    return ocp_to_fnuz(x), scale * 2.0


def scaled_gemm(a, b, a_scale, b_scale, bias, activation, out_dtype, config=None) -> torch.Tensor:
    """``activation(deq(a) @ deq(b) + bias)`` on the CDNA3 kernel (interpreted on CPU tensors);
    arguments validated by ``kernels.scaled_gemm.spec``."""
    if isinstance(out_dtype, str):
        out_dtype = getattr(torch, out_dtype)
    m, k = a.shape
    n = b.shape[1]
    a_kind, b_kind = kinds(a.shape, b.shape, a_scale.shape, b_scale.shape)
    cfg = select_config(m, n, k, a_kind, b_kind, config=config, out_dtype=str(out_dtype).removeprefix("torch."))
    out = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if out.numel() == 0:
        return out
    a, a_scale = to_fnuz(a, a_scale.float())
    b, b_scale = to_fnuz(b, b_scale.float())
    a_scale = a_scale.reshape(()) if a_kind == "tensor" else a_scale
    b_scale = b_scale.reshape(()) if b_kind == "tensor" else b_scale
    sam, sak = (0, 0) if a_kind == "tensor" else a_scale.stride()
    sbk, sbn = (0, 0) if b_kind == "tensor" else b_scale.stride()
    bk = cfg["BLOCK_K"]
    step = bk * max(1, cfg["PROMOTE_STEPS"])
    grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
    launcher(gemm_fp8_kernel, on_gpu=a.is_cuda)[grid](
        a, b, a_scale, b_scale, bias if bias is not None else out, out,
        m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        sam, sak, sbk, sbn,
        A_SCALE=a_kind, B_SCALE=b_kind, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=bk,
        GROUP_M=cfg["GROUP_M"], NUM_XCDS=device_entry(current_device())["num_xcds"],
        PROMOTE_STEPS=cfg["PROMOTE_STEPS"], EVEN_K=k % step == 0,
        HAS_BIAS=bias is not None, ACTIVATION=ACTIVATION_CODES[activation],
        **{key: cfg[key] for key in COMPILE_KEYS},
    )
    return out


def scaled_gemm_jax(a, b, a_scale, b_scale, bias, activation, out_dtype, config=None):
    """The same kernel on JAX arrays on the CPU, interpreted through a host callback; refused, with
    the reason, on a GPU, by :mod:`kernels.scaled_gemm.jax_op`."""
    import jax

    from kernels.arrays import torch_dtype
    from kernels.jax_bridge import call_on_cpu

    (m, k), n = a.shape, b.shape[1]
    a_kind, b_kind = kinds(a.shape, b.shape, a_scale.shape, b_scale.shape)
    cfg = select_config(m, n, k, a_kind, b_kind, config=config, out_dtype=str(jax.numpy.dtype(out_dtype)))
    result = jax.ShapeDtypeStruct((m, n), out_dtype)
    args = (a, b, a_scale, b_scale) if bias is None else (a, b, a_scale, b_scale, bias)

    def run(x, y, sx, sy, z=None):
        return scaled_gemm(x, y, sx, sy, z, activation, torch_dtype(str(out_dtype)), cfg)

    return call_on_cpu(run, result, *args, backend="amd")


# ----------------------------------------------------------------------------- compile specs

_TRITON_FNUZ = {"float8_e4m3fnuz": "fp8e4b8", "float8_e5m2fnuz": "fp8e5b16"}


def compile_spec(config: dict, a_kind: str = "1x128", b_kind: str = "128x128", dtype: str = "float8_e4m3fnuz",
                 out_dtype: str = "bfloat16"):
    """The ``kernels.isa.CompileSpec`` of one config (a whole point of the gfx942 space, checked
    against it for these scale kinds): a row-major A, B as ``w.mT`` (K unit-stride, as the
    quantizers lay out both), bias + gelu, as a launch specializes the unit strides."""
    from kernels.isa import CompileSpec

    spaces.check(FAMILY, TARGET_ARCH, config, config_context(None, None, None, a_kind, b_kind, out_dtype, config))
    config = {key: v for key, v in config.items() if key != "SCALES"}
    t = _TRITON_FNUZ[TO_FNUZ.get(dtype, dtype)]
    out = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[out_dtype]
    signature = {"a_ptr": f"*{t}", "b_ptr": f"*{t}", "a_scale_ptr": "*fp32", "b_scale_ptr": "*fp32",
                 "bias_ptr": f"*{out}", "c_ptr": f"*{out}", "M": "i32", "N": "i32", "K": "i32"}
    unit = {"stride_ak", "stride_bk", "stride_cn"}
    unit |= {"1x128": {"stride_sam"}, "128x128": {"stride_sam"}, "row": {"stride_sam"}}.get(a_kind, set())
    unit |= {"128x128": {"stride_sbk"}, "row": {"stride_sbn"}, "1x128": {"stride_sbn"}}.get(b_kind, set())
    for name in ("stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn",
                 "stride_sam", "stride_sak", "stride_sbk", "stride_sbn"):
        signature[name] = "constexpr" if name in unit else "i32"
    constexprs = {name: 1 for name in unit}
    constexprs.update(A_SCALE=a_kind, B_SCALE=b_kind, BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"],
                      BLOCK_K=config["BLOCK_K"], GROUP_M=config["GROUP_M"], NUM_XCDS=8,
                      PROMOTE_STEPS=config["PROMOTE_STEPS"], EVEN_K=True, HAS_BIAS=True,
                      ACTIVATION=ACTIVATION_CODES["gelu"])
    for name in constexprs:
        signature[name] = "constexpr"
    aligned = tuple(n for n, ty in signature.items() if ty.startswith("*") or (ty == "i32" and n != "M"))
    name = "amd_gemm_fp8_{}x{}x{}_g{}_s{}_w{}_wpe{}_mi{}_kp{}_p{}_{}".format(
        config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], config["GROUP_M"], config["num_stages"],
        config["num_warps"], config["waves_per_eu"], config["matrix_instr_nonkdim"], config["kpack"],
        config["PROMOTE_STEPS"], f"{a_kind}/{b_kind}")
    return CompileSpec(name, gemm_fp8_kernel, signature, constexprs, {key: config[key] for key in COMPILE_KEYS},
                       config={**config, "scales": f"{a_kind}/{b_kind}"}, divisible_by_16=aligned)


def compile_specs(dtype: str = "float8_e4m3fnuz") -> list:
    """A spec per shipped config class of the default device, with the scale kinds it serves."""
    fp8, out = (dtype, "bfloat16") if format_of(dtype) is not None else ("float8_e4m3fnuz", dtype)
    configs = {cls: {k: v for k, v in c.items() if k in CONFIG_KEYS}
               for cls, c in device_entry(_table()["default_device"])["configs"].items()}
    specs = []
    for cls, scales in (("skinny", ("tensor", "tensor")), ("skinny", ("1x128", "128x128")),
                        ("blockwise", ("1x128", "128x128")), ("large", ("tensor", "tensor")), ("large", ("row", "row"))):
        specs.append(compile_spec(configs[cls], *scales, dtype=fp8, out_dtype=out))
    return specs


__all__ = ["scaled_gemm", "scaled_gemm_jax", "select_config", "compile_specs", "compile_spec", "FORMATS"]
