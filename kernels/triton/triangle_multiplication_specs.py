"""The compile specs of the triangle-multiplicative-update kernels
(:mod:`ceiling.triton.triangle_multiplication`) and of their jax-triton wrappers
(:mod:`ceiling.triton.triangle_multiplication_jax`) for ``ceiling.isa``: each kernel at the config
a target's device resolves for AlphaFold 3's widths (c_z = c = 128, or a whole config given),
specialized as a launch on a (1, n, n, c_z) input specializes it (unit strides constant,
multiples of 16 marked), so that the profile describes the kernel that runs."""

from __future__ import annotations

from typing import Mapping

import triton

from ceiling import spaces
from ceiling.amd import cdna4
from ceiling.triton import triangle_multiplication as M
from ceiling.triton import triangle_multiplication_jax as MJ

TRITON_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
PREFIXES = {"sm_90a": "trimul", "sm_100a": "trimul_sm100", "sm_103a": "trimul_sm103", "gfx942": "trimul_cdna3",
            "gfx950": "trimul_cdna4"}


def shipped_config(target: str, dtype: str = "bfloat16", c_z: int = 128, c: int = 128):
    """The config ``target``'s device (an H200, an MI300X) runs AlphaFold 3's update with."""
    from ceiling.op import resolve_config
    from ceiling.triangle.op import TRIANGLE_MULTIPLICATIVE_UPDATE
    from ceiling.triangle.spec import shipped_trimul_problem

    impl = next(i for i in TRIANGLE_MULTIPLICATIVE_UPDATE.implementations if i.name == "triton" and i.backend == spaces.target_info(target)["backend"])
    return resolve_config(shipped_trimul_problem(dtype, c_z, c, target=target), impl, None)


def compile_specs(dtype: str = "bfloat16", c_z: int = 128, c: int = 128, target: str = "sm_90a", *,
                  cfgs: Mapping | None = None, prefix: str | None = None, n: int = 768,
                  direction: str = "outgoing") -> list:
    """A ``ceiling.isa.CompileSpec`` per kernel at the config ``target``'s device resolves, or at
    ``cfgs`` (a whole per-stage config, as a sweep compiles a candidate)."""
    from ceiling.isa import CompileSpec, as_launched

    cfgs = cfgs or shipped_config(target, dtype, c_z, c)
    prefix = prefix or PREFIXES[target]
    options = spaces.get("triangle_multiplication", target).launch_options
    t = TRITON_DTYPES[dtype]
    prec = cdna4.input_precision(dtype == "float32", target)
    czb, cb = triton.next_power_of_2(c_z), triton.next_power_of_2(c)
    kinds = {
        "ln_gate_proj": (M.ln_gate_proj_kernel, {
            "X": f"*{t}", "Mask": "*fp32", "Lw": f"*{t}", "Lb": f"*{t}", "Wp": f"*{t}", "Bp": f"*{t}",
            "Wg": f"*{t}", "Bg": f"*{t}", "AB": f"*{t}", "M": "i32", "NN": "i32", "CZ": "i32", "C2": "i32",
            "eps": "fp32"}, {"HAS_MASK": True, "CZ_BLOCK": czb}),
        "contract": (M.channel_gemm_kernel, {
            "A": f"*{t}", "B": f"*{t}", "Y": f"*{t}", "N": "i32", "C": "i32",
            **{k: "i64" for k in ("a_batch", "a_chan", "s_am", "s_ak", "b_batch", "b_chan", "s_bk", "s_bn",
                                  "y_batch", "y_chan", "s_ym", "s_yn")}}, {}),
        "ln_out_gate": (M.ln_out_gate_kernel, {
            "X": f"*{t}", "Yc": f"*{t}", "Lw_in": f"*{t}", "Lb_in": f"*{t}", "Lw_out": f"*{t}", "Lb_out": f"*{t}",
            "Wpo": f"*{t}", "Bpo": f"*{t}", "Wgo": f"*{t}", "Bgo": f"*{t}", "Out": f"*{t}", "M": "i32", "NN": "i32",
            "CZ": "i32", "C": "i32", "eps": "fp32"}, {"CZ_BLOCK": czb, "C_BLOCK": cb}),
        "out_gate_bwd": (M.out_gate_bwd_kernel, {
            "X": f"*{t}", "Yc": f"*{t}", "DOut": f"*{t}", "Lw_in": f"*{t}", "Lb_in": f"*{t}", "Lw_out": f"*{t}",
            "Lb_out": f"*{t}", "Wpo": f"*{t}", "Bpo": f"*{t}", "Wgo": f"*{t}", "Bgo": f"*{t}",
            "DU": f"*{t}", "DGz": f"*{t}", "Yn": f"*{t}", "Xn": f"*{t}",
            "row0": "i32", "M_rows": "i32", "NN": "i32", "CZ": "i32", "C": "i32", "eps": "fp32"},
            {"CZ_BLOCK": czb, "C_BLOCK": cb}),
        "ln_out_bwd": (M.ln_out_bwd_kernel, {
            "Yc": f"*{t}", "DU": f"*{t}", "Lw_out": f"*{t}", "Lb_out": f"*{t}", "Wpo": f"*{t}", "DYc": f"*{t}",
            "Part": "*fp32", "row0": "i32", "M_rows": "i32", "NN": "i32", "CZ": "i32", "C": "i32", "eps": "fp32"},
            {"C_BLOCK": cb}),
        "ln_gate_proj_bwd": (M.ln_gate_proj_bwd_kernel, {
            "X": f"*{t}", "Mask": "*fp32", "DABc": f"*{t}", "DGz": f"*{t}", "Lw": f"*{t}", "Lb": f"*{t}",
            "Wp": f"*{t}", "Bp": f"*{t}", "Wg": f"*{t}", "Bg": f"*{t}", "Wgo": f"*{t}", "DX": f"*{t}", "DP": f"*{t}", "DG": f"*{t}",
            "Xn": f"*{t}", "Part": "*fp32", "row0": "i32", "M_rows": "i32", "NN": "i32", "CZ": "i32", "C2": "i32",
            "eps": "fp32"}, {"HAS_MASK": True, "CZ_BLOCK": czb}),
    }
    nn_ = n * n
    rows = cfgs["bwd_rows"]
    a_s, b_s = M.forward_products(direction, n, c)
    launched = {
        "ln_gate_proj": dict(M=nn_, NN=nn_, CZ=c_z, C2=2 * c),
        "contract": dict(N=n, C=c, **dict(zip(("a_batch", "a_chan", "s_am", "s_ak"), a_s)),
                         **dict(zip(("b_batch", "b_chan", "s_bk", "s_bn"), b_s)),
                         y_batch=c * nn_, y_chan=nn_, s_ym=n, s_yn=1),
        "ln_out_gate": dict(M=nn_, NN=nn_, CZ=c_z, C=c),
        "out_gate_bwd": dict(row0=rows, M_rows=rows, NN=nn_, CZ=c_z, C=c),
        "ln_out_bwd": dict(row0=rows, M_rows=rows, NN=nn_, CZ=c_z, C=c),
        "ln_gate_proj_bwd": dict(row0=rows, M_rows=rows, NN=nn_, CZ=c_z, C2=2 * c),
    }
    specs = []
    for name, (fn, signature, extra_const) in kinds.items():
        cfg = dict(cfgs[name])
        constexprs = {"PRECISION": prec, "BLOCK_M": cfg["BLOCK_M"], **extra_const}
        if "BLOCK_N" in cfg:
            constexprs["BLOCK_N"] = cfg["BLOCK_N"]
        if "BLOCK_K" in cfg:
            constexprs["BLOCK_K"] = cfg["BLOCK_K"]
        signature = {**signature, **{key: "constexpr" for key in constexprs}}
        opts = {k: cfg[k] for k in options if k in cfg}
        spec = CompileSpec(f"{prefix}_{name}_{dtype}_cz{c_z}_c{c}", fn, signature, constexprs, opts, cfg)
        specs.append(as_launched(spec, launched[name]))
    return specs


def compile_specs_gfx942(dtype: str = "bfloat16") -> list:
    return compile_specs(dtype, target="gfx942")


JAX_KERNELS = {"ln_gate_proj": MJ.ln_gate_proj_kernel_jax, "contract": MJ.channel_gemm_kernel_jax,
               "ln_out_gate": MJ.ln_out_gate_kernel_jax, "out_gate_bwd": MJ.out_gate_bwd_kernel_jax,
               "ln_out_bwd": MJ.ln_out_bwd_kernel_jax, "ln_gate_proj_bwd": MJ.ln_gate_proj_bwd_kernel_jax}


def jax_compile_specs(dtype: str = "bfloat16", c_z: int = 128, c: int = 128, n: int = 384,
                      target: str = "sm_90a") -> list:
    """The wrappers as jax-triton compiles them at the config ``target``'s device resolves
    (outgoing contraction)."""
    from ceiling.isa import CompileSpec

    cfgs = shipped_config(target, dtype, c_z, c)
    t = TRITON_DTYPES[dtype]
    shared = {"CZ": c_z, "C": c, "C2": 2 * c, "NN_16": (n * n) % 16 == 0, "N_16": n % 16 == 0, "HAS_MASK": True,
              "PRECISION": cdna4.input_precision(dtype == "float32", target), "CZ_BLOCK": triton.next_power_of_2(c_z),
              "C_BLOCK": triton.next_power_of_2(c), "A_CHANNELS": 2 * c, "A_FIRST": 0, "A_T": False,
              "B_CHANNELS": 2 * c, "B_FIRST": c, "B_T": True}
    specs = []
    for name, fn in JAX_KERNELS.items():
        cfg = dict(cfgs[name])
        constexprs = {k: v for k, v in shared.items() if k in fn.arg_names}
        constexprs.update({k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K") if k in fn.arg_names})
        sig = {}
        for arg in fn.arg_names:
            if arg in constexprs:
                sig[arg] = "constexpr"
            elif arg in ("M", "NN", "N"):
                sig[arg] = "i32"
            elif arg in ("Mask", "Part"):
                sig[arg] = "*fp32"
            elif arg[0].isupper():
                sig[arg] = f"*{t}"
            elif arg == "eps":
                sig[arg] = "fp32"
            else:
                sig[arg] = "i32"
        arrays = tuple(a for a in fn.arg_names if sig[a].startswith("*"))
        specs.append(CompileSpec(f"jax_trimul_{name}_{dtype}_cz{c_z}_c{c}_n{n}", fn, sig, constexprs,
                                 {k: v for k, v in cfg.items() if k in MJ.LAUNCH_OPTIONS}, cfg, divisible_by_16=arrays))
    return specs
