"""The Hopper FP8 GEMM's compile specs (``ceiling inspect scaled_gemm --target sm_90a``, the static
tests, the search templates): a config of the sm_90a space as a launch on a 16-byte aligned problem
specializes :func:`ceiling.nvidia.gemm_fp8.gemm_fp8_kernel`, and every config the H200 ships."""

from __future__ import annotations

from typing import Any

from ceiling import spaces
from ceiling.nvidia.gemm import H100_H200_SMS
from ceiling.nvidia.gemm_fp8 import gemm_fp8_kernel, k_step
from ceiling.scaled_gemm.spec import RECIPES, ScaledGemmProblem, check_config_scales, scales_key

FAMILY, TARGET = "gemm_fp8", "sm_90a"
H200 = {"gpu": "NVIDIA H200", "arch": "sm_90"}
_TRITON_FP8 = {"float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5"}
_OUT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def problem(m: int, n: int, k: int, a_kind: str, b_kind: str, a_dtype: str = "float8_e4m3fn",
            b_dtype: str = "float8_e4m3fn", out_dtype: str = "bfloat16", gpu: dict | None = None) -> ScaledGemmProblem:
    """A PyTorch problem on the H200 (or the GPU ``gpu`` names), as the tables are written for: no
    arrays needed, so a CPU can ask what a device would run."""
    gpu = H200 if gpu is None else gpu
    return ScaledGemmProblem("torch", "cuda:0" if gpu.get("gpu") else "cpu", **gpu, m=m, n=n, k=k, a_dtype=a_dtype,
                             b_dtype=b_dtype, a_scale=a_kind, b_scale=b_kind, out_dtype=out_dtype)


def compile_spec(config: dict[str, Any], a_kind: str = "1x128", b_kind: str = "128x128",
                 a_dtype: str = "float8_e4m3fn", b_dtype: str = "float8_e4m3fn", out_dtype: str = "bfloat16",
                 target: str = TARGET):
    """The ``ceiling.isa.CompileSpec`` of one config (a whole point of the space, checked against it
    for these scale kinds and output dtype), bias + gelu epilogue."""
    from ceiling.isa import CompileSpec

    shape = problem(0, 0, 0, a_kind, b_kind, a_dtype, b_dtype, out_dtype)
    check_config_scales(shape, config)
    features = {k: v for k, v in shape.features().items() if k not in ("M", "N", "K")}
    spaces.check(FAMILY, target, config, features)
    cfg = {key: v for key, v in config.items() if key != "SCALES"}
    c_cols = cfg["BLOCK_N"] // 2 if cfg["EPILOGUE_SUBTILE"] else cfg["BLOCK_N"]
    signature = {
        "a": f"tensordesc<{_TRITON_FP8[a_dtype]}[{cfg['BLOCK_M']},{cfg['BLOCK_K']}]>",
        "b": f"tensordesc<{_TRITON_FP8[b_dtype]}[{cfg['BLOCK_N']},{cfg['BLOCK_K']}]>",
        "c": f"tensordesc<{_OUT[out_dtype]}[{cfg['BLOCK_M']},{c_cols}]>",
        "a_scale_ptr": "*fp32", "b_scale_ptr": "*fp32", "bias_ptr": f"*{_OUT[out_dtype]}", "ws_ptr": "*fp32",
        "sem_ptr": "*i32", "M": "i32", "N": "i32", "K": "i32",
        "stride_sam": "i32", "stride_sak": "i32", "stride_sbk": "i32", "stride_sbn": "i32",
    }
    constexprs = {
        "A_SCALE": a_kind, "B_SCALE": b_kind, "HAS_BIAS": True, "ACTIVATION": "gelu",
        "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"], "BLOCK_K": cfg["BLOCK_K"], "GROUP_M": cfg["GROUP_M"],
        "NUM_SMS": int(spaces.target_limits(target).get("units", H100_H200_SMS)), "PROMOTE_STEPS": cfg["PROMOTE_STEPS"],
        "K_STEP": k_step(cfg),
        "STREAM_K": cfg["STREAM_K"], "EPILOGUE_SUBTILE": cfg["EPILOGUE_SUBTILE"],
    }
    # Scale strides as a launch specializes them: a unit stride becomes the constant 1
    # (1x128 scales are column-major, rows adjacent; a weight's 128x128 scales are (Kb, Nb)
    # viewed from their (Nb, Kb) storage).
    unit = {"1x128": ("stride_sam",), "128x128": ("stride_sam",), "row": ("stride_sam",)}.get(a_kind, ())
    unit += {"128x128": ("stride_sbk",), "row": ("stride_sbn",), "1x128": ("stride_sbn",)}.get(b_kind, ())
    for name in unit:
        signature[name] = "constexpr"
        constexprs[name] = 1
    for key in constexprs:
        signature[key] = "constexpr"
    name = "gemm_fp8_{}x{}x{}_g{}_s{}_w{}_p{}{}{}_{}".format(
        cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["GROUP_M"], cfg["num_stages"], cfg["num_warps"],
        cfg["PROMOTE_STEPS"], "_streamk" if cfg["STREAM_K"] else "", "_sub" if cfg["EPILOGUE_SUBTILE"] else "",
        scales_key(a_kind, b_kind))
    aligned = tuple(n for n, t in signature.items() if t.startswith("*") or n in ("N", "K") or
                    (t == "i32" and n.startswith("stride")))
    return CompileSpec(name, gemm_fp8_kernel, signature, constexprs,
                       {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]},
                       {**cfg, "scales": scales_key(a_kind, b_kind)}, divisible_by_16=aligned)


def shipped_configs() -> list[tuple[dict[str, Any], str, str]]:
    """Every distinct (config, a kind, b kind) the H200 ships: each benchmark problem (the three
    recipes) an H200 table entry holds for, then the heuristic's picks on a decode, a few-tile and
    a large shape."""
    from ceiling import tables
    from ceiling.op import get, resolve_config
    from ceiling.scaled_gemm.shapes import SUITES

    impl = get("scaled_gemm").implementation("nvidia")
    seen: dict[tuple, tuple[dict[str, Any], str, str]] = {}

    def add(p: ScaledGemmProblem) -> None:
        config = resolve_config(p, impl, None).as_dict()
        seen.setdefault((tuple(sorted(config.items())), p.a_scale, p.b_scale), (config, p.a_scale, p.b_scale))

    for shape in dict.fromkeys(s for shapes in SUITES.values() for s in shapes):
        for kinds in RECIPES.values():
            p = problem(*shape, *kinds)
            if tables.lookup("nvidia", FAMILY, p.gpu, TARGET, p.features()).held:
                add(p)
    for kinds in (("tensor", "tensor"), ("1x128", "128x128")):
        for shape in ((16, 4096, 4096), (64, 8192, 8192), (1024, 1024, 4096), (8192, 8192, 8192)):
            add(problem(*shape, *kinds, gpu={}))
    return list(seen.values())


def resolved_configs(target: str) -> list[tuple[dict[str, Any], str, str]]:
    """The distinct (config, a kind, b kind) ``target``'s GPU (a B200 on sm_100a) resolves for the
    heuristic's shapes and scalings: nothing is tuned there, so these are all it runs."""
    from ceiling.op import get, resolve_config
    from ceiling.triangle.spec import SHIPPED_GPUS

    gpu = dict(zip(("gpu", "arch"), SHIPPED_GPUS[target]))
    impl = get("scaled_gemm").implementation("nvidia")
    seen: dict[tuple, tuple[dict[str, Any], str, str]] = {}
    for kinds in (("tensor", "tensor"), ("1x128", "128x128"), ("row", "row")):
        for shape in ((16, 4096, 4096), (64, 8192, 8192), (1024, 1024, 4096), (8192, 8192, 8192)):
            config = resolve_config(problem(*shape, *kinds, gpu=gpu), impl, None).as_dict()
            seen.setdefault((tuple(sorted(config.items())), *kinds), (config, *kinds))
    return list(seen.values())


def compile_specs(dtype: str = "float8_e4m3fn", target: str = TARGET) -> list:
    """A ``ceiling.isa.CompileSpec`` per shipped (config, scale kinds), for FP8 operands of ``dtype``
    (an output dtype such as "bfloat16", the CLI's default, means e4m3 operands with that output);
    on a Blackwell target, per config its GPU resolves."""
    fp8, out = (dtype, "bfloat16") if dtype in _TRITON_FP8 else ("float8_e4m3fn", dtype)
    configs = shipped_configs() if target == TARGET else resolved_configs(target)
    return [compile_spec(cfg, a_kind, b_kind, fp8, fp8, out, target) for cfg, a_kind, b_kind in configs]
