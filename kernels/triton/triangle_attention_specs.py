"""The compile specs of the triangle-attention kernels (:mod:`ceiling.triton.triangle_attention`)
and of their jax-triton wrappers (:mod:`ceiling.triton.triangle_attention_jax`) for
``ceiling.isa``: each kernel at the config a target's device resolves for AlphaFold 3's shape
(head dim 32), specialized as a launch at N = 384 or 768 (multiples of 16) specializes it."""

from __future__ import annotations

from typing import Mapping

from ceiling import spaces
from ceiling.amd import cdna4
from ceiling.triton import triangle_attention as T
from ceiling.triton import triangle_attention_jax as TJ

TRITON_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
PREFIXES = {"sm_90a": "triangle_attention", "sm_100a": "triangle_attention_sm100", "sm_103a": "triangle_attention_sm103",
            "gfx942": "triangle_attention_cdna3", "gfx950": "triangle_attention_cdna4"}
# every kernel of the forward and backward, the row-sharing forward and the dK/dV kernel with dQ in it
SPEC_KERNELS = (*T.KERNELS, "fwd_rows", "bwd_dkdv_dq")


def shipped_config(target: str, dtype: str = "bfloat16", head_dim: int = 32):
    """The config ``target``'s device (an H200, an MI300X) runs AlphaFold 3's triangle attention with."""
    from ceiling.op import resolve_config
    from ceiling.triangle.op import TRIANGLE_ATTENTION
    from ceiling.triangle.spec import shipped_attention_problem

    impl = next(i for i in TRIANGLE_ATTENTION.implementations if i.name == "triton" and i.backend == spaces.target_info(target)["backend"])
    return resolve_config(shipped_attention_problem(head_dim, dtype, target=target), impl, None)


def compile_specs(dtype: str = "bfloat16", target: str = "sm_90a", head_dim: int = 32) -> list:
    """A ``ceiling.isa.CompileSpec`` per kernel at the config ``target``'s device resolves."""
    cfgs = shipped_config(target, dtype, head_dim)
    return [kernel_spec(name, cfgs["bwd_dkdv" if name == "bwd_dkdv_dq" else name], dtype, head_dim, target=target,
                        prefix=PREFIXES[target], aligned=head_dim % 16 == 0)
            for name in SPEC_KERNELS]


def compile_specs_gfx942(dtype: str = "bfloat16") -> list:
    return compile_specs(dtype, "gfx942")


def kernel_spec(name: str, cfg: Mapping, dtype: str = "bfloat16", head_dim: int = 32, *, target: str = "sm_90a",
                prefix: str = "triangle_attention", aligned: bool = False):
    """The ``ceiling.isa.CompileSpec`` of kernel ``name`` (a section of a config, or
    ``bwd_dkdv_dq``) at ``cfg`` on ``target``, with the compiler options its space names.
    ``aligned``: compile as a launch with N and D multiples of 16 sees them (Triton specializes
    on that; fresh tensors are 16-byte aligned), as for the tuning shapes."""
    from ceiling.isa import CompileSpec

    cfg = dict(cfg)
    t = TRITON_DTYPES[dtype]
    prec = cdna4.input_precision(dtype == "float32", target)
    inputs = {"Q": f"*{t}", "K": f"*{t}", "V": f"*{t}", "Bias": "*fp32", "KeyBias": "*fp32"}
    bwd_inputs = {**inputs, "DO": f"*{t}", "LSE": "*fp32", "Delta": "*fp32"}
    ints = {"N": "i32", "H": "i32", "D": "i32", "kb_row_stride": "i32"}
    kernels = {
        "fwd": (T.fwd_kernel, {**inputs, "O": f"*{t}", "LSE": "*fp32", **ints, "qk_scale": "fp32"}),
        "bwd_dkdv": (T.bwd_dkdv_kernel, {**bwd_inputs, "DK": f"*{t}", "DV": f"*{t}", **ints, "qk_scale": "fp32",
                                         "scale": "fp32"}),
        "bwd_dq": (T.bwd_dq_kernel, {**bwd_inputs, "DQ": f"*{t}", **ints, "qk_scale": "fp32", "scale": "fp32"}),
        "bwd_dbias": (T.bwd_dbias_kernel, {**bwd_inputs, "DBias": "*fp32", **ints, "qk_scale": "fp32"}),
    }
    kernels["fwd_rows"] = kernels["fwd"]
    kernels["bwd_dkdv_dq"] = (T.bwd_dkdv_kernel, {**kernels["bwd_dkdv"][1], "DQ32": "*fp32"})
    fn, signature = kernels[name]
    constexprs = {"PRECISION": prec, "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"],
                  "HEAD_DIM": T.head_dim_block(head_dim)}
    if fn is T.bwd_dkdv_kernel:  # "bwd_dkdv_dq", or DQ_ATOMIC: the dK/dV kernel with dQ added in it
        constexprs["DQ_ATOMIC"] = name == "bwd_dkdv_dq" or bool(cfg.get("DQ_ATOMIC", False))
        if constexprs["DQ_ATOMIC"]:
            signature = kernels["bwd_dkdv_dq"][1]
        else:
            constexprs["DQ32"] = None
    if fn is T.fwd_kernel:
        constexprs["ROWS"] = int(cfg.get("ROWS", 1))
        constexprs["EXP2_SPLIT"] = bool(cfg.get("EXP2_SPLIT", False))
    if fn is T.bwd_dbias_kernel:
        constexprs["ROW_SPLIT"] = int(cfg.get("ROW_SPLIT", 1))
    signature = {**signature, **{key: "constexpr" for key in constexprs}}
    opts = {k: cfg[k] for k in spaces.get("triangle_attention", target).launch_options if k in cfg}
    divisible = tuple(n for n in fn.arg_names if n not in constexprs
                      and (n[0].isupper() or n in ("N", "D", "kb_row_stride"))) if aligned else ()
    return CompileSpec(f"{prefix}_{name}_{dtype}_d{head_dim}", fn, signature, constexprs, opts, cfg,
                       divisible_by_16=divisible)


JAX_KERNELS = {"fwd": TJ.fwd_kernel_jax, "fwd_rows": TJ.fwd_kernel_jax, "bwd_dkdv": TJ.bwd_dkdv_kernel_jax,
               "bwd_dq": TJ.bwd_dq_kernel_jax, "bwd_dbias": TJ.bwd_dbias_kernel_jax}


def jax_compile_specs(dtype: str = "bfloat16", head_dim: int = 32, n: int = 384, target: str = "sm_90a") -> list:
    """The jax-triton wrappers as jax-triton compiles them at the config ``target``'s device
    resolves: arrays 16-byte aligned, integers unspecialized, ``D`` a constexpr and ``N`` marked a
    multiple of 16 when it is one."""
    from ceiling.isa import CompileSpec

    cfgs = shipped_config(target, dtype, head_dim)
    t = TRITON_DTYPES[dtype]
    specs = []
    for name, fn in JAX_KERNELS.items():
        cfg = dict(cfgs[name])
        constexprs = {"D": head_dim, "N_16": n % 16 == 0,
                      "PRECISION": cdna4.input_precision(dtype == "float32", target),
                      "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"], "HEAD_DIM": T.head_dim_block(head_dim)}
        if fn is TJ.fwd_kernel_jax:
            constexprs["ROWS"] = cfg.get("ROWS", 1)
        sig = {}
        for arg in fn.arg_names:
            if arg in constexprs:
                sig[arg] = "constexpr"
            elif arg in ("N", "H"):
                sig[arg] = "i32"
            elif arg in ("Bias", "KeyBias", "LSE", "Delta", "DBias"):
                sig[arg] = "*fp32"
            elif arg[0].isupper():
                sig[arg] = f"*{t}"
            elif arg in ("qk_scale", "scale"):
                sig[arg] = "fp32"
            else:
                sig[arg] = "i32"
        arrays = tuple(a for a in fn.arg_names if sig[a].startswith("*"))
        specs.append(CompileSpec(f"jax_triangle_attention_{name}_{dtype}_d{head_dim}_n{n}", fn, sig, constexprs,
                                 {k: cfg[k] for k in TJ.LAUNCH_OPTIONS if k in cfg}, cfg, divisible_by_16=arrays))
    return specs
