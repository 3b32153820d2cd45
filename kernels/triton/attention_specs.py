"""Compile specs of the flash attention kernels (:mod:`ceiling.triton.attention`) and of their
jax-triton wrappers (:mod:`ceiling.triton.attention_jax`) for ``ceiling.isa``: each kernel's
Triton signature, constants and launch options as a real launch specializes them, so the
static facts (tensor-core instructions, spills, shared memory) are those of the binaries run."""

from __future__ import annotations

from ceiling.triton.attention import (
    _attn_bwd_dkdv,
    _attn_bwd_dq,
    _attn_fwd,
    fwd_knobs,
    head_dim_pad,
    launch_options,
)

def tuned_head_dims(backend: str, target: str) -> list[int]:
    """The padded head dims ``target``'s attention table has entries for, in table order (each
    entry's condition starts ``head_dim_pad == N``)."""
    from ceiling import tables

    entries = tables.read(tables.path(backend, target, "attention"))["entries"]
    return list(dict.fromkeys(int(e["when"].split(" and ")[0].split("==")[1]) for e in entries))


_TRITON_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
_FP32_POINTERS = ("LSE", "Delta", "Bias", "DQ32")


def signature(kernel, dtype: str, constexprs: dict, dbias_dtype: str = "fp32") -> dict:
    """Triton signature of one of the attention kernels by its argument names: tensors of the
    input dtype, float32 statistics and bias, an int32 mask, 2-D TMA descriptors when ``USE_TMA``."""
    ty = _TRITON_DTYPE[dtype]
    sig = {}
    for name in kernel.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name.startswith("desc_"):
            if constexprs.get("USE_TMA"):
                rows = constexprs["BLOCK_N"] if name in ("desc_k", "desc_v") else constexprs["BLOCK_M"]
                sig[name] = f"tensordesc<{ty}[{rows}, {constexprs['HEAD_DIM']}]>"
            else:
                sig[name] = f"*{ty}"
        elif name == "Mask":
            sig[name] = "*i32"
        elif name == "DBias":
            sig[name] = f"*{dbias_dtype}"
        elif name in _FP32_POINTERS:
            sig[name] = "*fp32"
        elif name[0].isupper():
            sig[name] = f"*{ty}"
        elif name == "sm_scale":
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


# Arguments a real launch sees as multiples of 16 (Triton specializes on that): the q/k/v/o-shaped
# tensors (freshly allocated or TMA-ready, so 16-byte aligned) and their row/batch strides
# (multiples of heads * head_dim). Bias and mask strides follow the user's shapes: no promise.
_ALIGNED = ("Q", "K", "V", "O", "DO", "DQ", "DK", "DV", "LSE", "Delta", "DQ32")


def _divisible(kernel, head_dim: int) -> tuple:
    names = [n for n in kernel.arg_names if n in _ALIGNED]
    if head_dim % 16 == 0:
        names += [n for n in kernel.arg_names if n.startswith("stride_") and n[-1] in "bsh"
                  and not n.startswith(("stride_b", "stride_m", "stride_db"))]
    return tuple(names)


def kernel_specs(head_dim: int, cfg: dict, *, dtype: str = "bfloat16", causal: bool = True, bias: bool = False,
                 mask: bool = False, use_tma: bool = True, pre_load_v: bool = False, prefix: str = "") -> list:
    """``ceiling.isa.CompileSpec``s of the forward, dK/dV and dQ kernels for one head dim and config."""
    from ceiling.isa import CompileSpec

    pad = head_dim_pad(head_dim)
    use_tma = use_tma and head_dim == pad
    common = dict(HEAD_DIM=head_dim, HEAD_DIM_PAD=pad, CAUSAL=causal, HAS_BIAS=bias, HAS_MASK=mask, USE_TMA=use_tma)
    specs = []
    for section, kernel, extra in (
        ("fwd", _attn_fwd, {**fwd_knobs(cfg), **({"PRE_LOAD_V": True} if pre_load_v else {})}),
        # dQ accumulated by the dK/dV kernel: never with a bias, whose gradient needs the dq kernel
        ("dkdv", _attn_bwd_dkdv, {"DQ_ATOMIC": bool(cfg["dkdv"].get("dq_atomic")) and not bias}),
        ("dq", _attn_bwd_dq, {"DBIAS": 2 if bias else 0}),
    ):
        c = cfg[section]
        constexprs = {**common, **extra, "BLOCK_M": c["block_m"], "BLOCK_N": c["block_n"]}
        tag = (f"{prefix}attn_{section}_d{head_dim}{'_causal' if causal else ''}{'_bias' if bias else ''}"
               f"{'_tma' if use_tma else ''}{'_dqatomic' if constexprs.get('DQ_ATOMIC') else ''}")
        specs.append(CompileSpec(tag, kernel, signature(kernel, dtype, constexprs), constexprs, launch_options(c),
                                 config={"head_dim": head_dim, "kernel": section, "causal": causal, "bias": bias,
                                         "mask": mask, "tma": use_tma, **c},
                                 divisible_by_16=_divisible(kernel, head_dim)))
    return specs


def jax_kernel_specs(head_dim: int, cfg: dict, *, dtype: str = "bfloat16", causal: bool = True, bias: bool = False,
                     mask: bool = False, ones: tuple[str, ...] = (), prefix: str = "jax_") -> list:
    """``ceiling.isa.CompileSpec``s of the forward, dK/dV and dQ jax-triton wrappers as jax-triton
    compiles them: every array 16-byte aligned, no integer argument known divisible by 16, and each
    integer argument named in ``ones`` (equal to 1 at launch, e.g. ``kv_heads`` for MQA or a
    bias's unit key stride) specialized to the constant 1."""
    from ceiling.isa import CompileSpec
    from ceiling.triton import attention_jax as wrappers

    pad = head_dim_pad(head_dim)
    specs = []
    for section, kernel, extra in (
        ("fwd", wrappers.attn_fwd_kernel_jax, {"PRE_LOAD_V": fwd_knobs(cfg)["PRE_LOAD_V"]}),
        ("dkdv", wrappers.attn_bwd_dkdv_kernel_jax, {}),
        ("dq", wrappers.attn_bwd_dq_kernel_jax, {"DBIAS": 2 if bias else 0}),
    ):
        c = cfg[section]
        constexprs = {"HEAD_DIM": head_dim, "HEAD_DIM_PAD": pad, "BLOCK_M": c["block_m"], "BLOCK_N": c["block_n"],
                      "CAUSAL": causal, "HAS_BIAS": bias, "HAS_MASK": mask, **extra}
        constexprs.update({name: 1 for name in ones if name in kernel.arg_names})
        sig = signature(kernel, dtype, constexprs)
        arrays = tuple(n for n in kernel.arg_names if sig[n].startswith("*"))
        tag = f"{prefix}attn_{section}_d{head_dim}{'_causal' if causal else ''}{'_bias' if bias else ''}"
        specs.append(CompileSpec(tag, kernel, sig, constexprs, wrappers.launch_options(c),
                                 config={"head_dim": head_dim, "kernel": section, "causal": causal, "bias": bias,
                                         "mask": mask, **c},
                                 divisible_by_16=arrays))
    return specs
