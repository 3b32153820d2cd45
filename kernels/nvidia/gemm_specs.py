"""Compile specs of the Hopper GEMM for ``ceiling.isa`` (static facts: wgmma, spills, shared
memory): one per config the tables ship and the heuristic picks, for the 2-D row-major case with
the bias + gelu epilogue."""

from __future__ import annotations

from typing import Any

from ceiling import spaces, tables
from ceiling.gemm.spec import shipped_problem
from ceiling.nvidia.gemm import TARGET, heuristic
from ceiling.nvidia.gemm_kernels import H100_H200_SMS, gemm_kernel, gemm_streamk_kernel

_TRITON_DTYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
# shapes whose heuristic configs ship besides the tables' (one per branch of the heuristic)
HEURISTIC_SHAPES = ((16, 4096, 4096), (128, 4096, 4096), (512, 512, 512), (1024, 2048, 1024), (2048, 2048, 2048),
                    (4096, 4096, 4096))


def point(config: dict[str, Any], target: str = TARGET) -> dict[str, Any]:
    """A whole config (any point of ``target``'s space), checked, with its implied keys filled in."""
    space = spaces.get("gemm", target)
    space.check(config)
    flat = space.complete(config)
    return {key: flat[key] for key in space.parameters}


def shipped_configs(dtype: str = "bfloat16") -> list[dict[str, Any]]:
    """Every distinct config the NVIDIA tables ship for ``dtype`` (device by device, entry by
    entry), then the heuristic's at :data:`HEURISTIC_SHAPES`."""
    seen: dict[str, dict] = {}
    for device in tables.devices("nvidia"):
        path = tables.path("nvidia", device, "gemm")
        if path.exists():
            for entry in tables.read(path)["entries"]:
                if tables.pinned(entry).get("dtype") == dtype:
                    seen.setdefault(repr(sorted(entry["config"].items())), point(entry["config"]))
    for shape in HEURISTIC_SHAPES:
        config = heuristic(shipped_problem(*shape, dtype))
        seen.setdefault(repr(sorted(config.items())), config)
    return list(seen.values())


def compile_specs(dtype: str = "bfloat16", b_trans: bool = False, target: str = TARGET) -> list:
    """A ``ceiling.isa.CompileSpec`` per shipped config, for the 2-D row-major case; on a Blackwell
    target, per config its GPU resolves at :data:`HEURISTIC_SHAPES` (nothing is tuned there)."""
    if target == TARGET:
        return [compile_spec(cfg, dtype, b_trans) for cfg in shipped_configs(dtype)]
    return [compile_spec(cfg, dtype, b_trans, target) for cfg in resolved_configs(target, dtype)]


def resolved_configs(target: str, dtype: str = "bfloat16") -> list[dict[str, Any]]:
    """The distinct configs ``target``'s GPU (a B200 for sm_100a) resolves at :data:`HEURISTIC_SHAPES`."""
    import dataclasses

    from ceiling.gemm.op import GEMM
    from ceiling.op import resolve_config
    from ceiling.triangle.spec import SHIPPED_GPUS

    gpu, arch = SHIPPED_GPUS[target]
    seen: dict[str, dict] = {}
    for shape in HEURISTIC_SHAPES:
        problem = dataclasses.replace(shipped_problem(*shape, dtype), device="cuda:0", gpu=gpu, arch=arch)
        config = resolve_config(problem, GEMM.implementation("nvidia"), None).as_dict()
        seen.setdefault(repr(sorted(config.items())), config)
    return list(seen.values())


def compile_spec(config: dict[str, Any], dtype: str = "bfloat16", b_trans: bool = False, target: str = TARGET):
    """The ``ceiling.isa.CompileSpec`` of one config (any point of ``target``'s search space)."""
    from ceiling.isa import CompileSpec

    cfg = point(config, target)
    sms = int(spaces.target_limits(target).get("units", H100_H200_SMS))
    t = _TRITON_DTYPE[dtype]
    if cfg["STREAM_K"]:
        return _streamk_spec(cfg, t, b_trans, sms)
    bm, bn, bk, split_k = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["SPLIT_K"]
    c_cols = bn // 2 if cfg["EPILOGUE_SUBTILE"] and split_k == 1 else bn
    b_block = [bn, bk] if b_trans else [bk, bn]
    signature = {
        "a": f"tensordesc<{t}[{bm},{bk}]>",
        "b": f"tensordesc<{t}[{b_block[0]},{b_block[1]}]>",
        # split-K stores fp32 partials into a 3-D (SPLIT_K, M, N) view of its workspace
        "c": f"tensordesc<fp32[1,{bm},{c_cols}]>" if split_k > 1 else f"tensordesc<{t}[{bm},{c_cols}]>",
        "bias_ptr": f"*{t}",
        "M": "i32", "N": "i32", "K": "i32", "BATCH": "i32", "PLANE_ROWS": "i32",
    }
    for stride in ("stride_ab", "stride_am", "stride_ak", "stride_bb", "stride_bk", "stride_bn", "stride_cb", "stride_cm"):
        signature[stride] = "i32"
    constexprs = {
        "A_TRANS": False, "B_TRANS": b_trans, "BATCHED": False, "HAS_BIAS": True, "ACTIVATION": "gelu",
        "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": cfg["GROUP_M"],
        "NUM_SMS": sms, "EPILOGUE_SUBTILE": cfg["EPILOGUE_SUBTILE"] and split_k == 1,
        "WARP_SPECIALIZE": cfg["WARP_SPECIALIZE"], "SPLIT_K": split_k, "USE_TMA": True,
    }
    for key in constexprs:
        signature[key] = "constexpr"
    name = "gemm_{}x{}x{}_g{}_s{}_w{}{}{}{}".format(
        bm, bn, bk, cfg["GROUP_M"], cfg["num_stages"], cfg["num_warps"],
        "_sub" if cfg["EPILOGUE_SUBTILE"] else "", "_ws" if cfg["WARP_SPECIALIZE"] else "",
        f"_splitk{split_k}" if split_k > 1 else "",
    )
    return CompileSpec(name, gemm_kernel, signature, constexprs,
                       {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}, cfg)


def _streamk_spec(cfg: dict[str, Any], t: str, b_trans: bool, sms: int = H100_H200_SMS):
    from ceiling.isa import CompileSpec

    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    c_cols = bn // 2 if cfg["EPILOGUE_SUBTILE"] else bn
    b_block = [bn, bk] if b_trans else [bk, bn]
    signature = {
        "a": f"tensordesc<{t}[{bm},{bk}]>", "b": f"tensordesc<{t}[{b_block[0]},{b_block[1]}]>",
        "c": f"tensordesc<{t}[{bm},{c_cols}]>", "bias_ptr": f"*{t}", "ws_ptr": "*fp32", "sem_ptr": "*i32",
        "M": "i32", "N": "i32", "K": "i32",
    }
    constexprs = {
        "A_TRANS": False, "B_TRANS": b_trans, "HAS_BIAS": True, "ACTIVATION": "gelu",
        "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": cfg["GROUP_M"],
        "NUM_SMS": sms, "EPILOGUE_SUBTILE": cfg["EPILOGUE_SUBTILE"],
    }
    for key in constexprs:
        signature[key] = "constexpr"
    name = "gemm_streamk_{}x{}x{}_g{}_s{}_w{}{}".format(bm, bn, bk, cfg["GROUP_M"], cfg["num_stages"],
                                                       cfg["num_warps"], "_sub" if cfg["EPILOGUE_SUBTILE"] else "")
    aligned = ("bias_ptr", "ws_ptr", "sem_ptr", "N", "K")
    return CompileSpec(name, gemm_streamk_kernel, signature, constexprs,
                       {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}, cfg, divisible_by_16=aligned)
