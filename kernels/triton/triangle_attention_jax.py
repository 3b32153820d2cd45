"""Triangle attention on JAX arrays on a GPU: the kernels of
:mod:`kernels.triton.triangle_attention` called through jax-triton.

Each kernel gets a ``@triton.jit`` wrapper in jax-triton's argument order (inputs, then
outputs, then constexprs). The head dim ``D`` becomes a constexpr (it is fixed per model,
and the compiler then knows the row strides' divisibility), and ``N`` is marked a multiple
of 16 when it is one: jax-triton does not specialize integer arguments on divisibility
as Triton's own launcher does. The launchers take a resolved config: the vendor's table entry
for JAX's device, which the JAX front end (``kernels.triangle.jax_op``) looks up through the
vendor module; AMD's extra compiler options are not options jax-triton passes on.
"""

from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from kernels import jax_bridge
from kernels.triton.triangle_attention import (
    _TRITON_DTYPE,
    LOG2E,
    bwd_dbias_kernel,
    bwd_dkdv_kernel,
    bwd_dq_kernel,
    bwd_preprocess_kernel,
    fwd_kernel,
    fwd_rows_kernel,
    head_dim_block,
)

LAUNCH_OPTIONS = ("num_warps", "num_stages")


@triton.jit
def multiple_of_16(x, IS_MULTIPLE: tl.constexpr):
    """``x``, known to the compiler as a multiple of 16 when the launcher says it is one.
    (``x // 16 * 16`` is ``x`` then; the multiply by 16 is what the divisibility analysis sees.)"""
    if IS_MULTIPLE:
        x = x // 16 * 16
    return x


@triton.jit
def fwd_kernel_jax(Q, K, V, Bias, Mask, N, H, qk_scale, O, LSE,
                   D: tl.constexpr, N_16: tl.constexpr, HAS_MASK: tl.constexpr, PRECISION: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    fwd_kernel(Q, K, V, Bias, Mask, O, LSE, multiple_of_16(N, N_16), H, D, qk_scale,
               HAS_MASK, PRECISION, BLOCK_M, BLOCK_N, HEAD_DIM)


@triton.jit
def fwd_rows_kernel_jax(Q, K, V, Bias, Mask, N, H, qk_scale, O, LSE,
                        D: tl.constexpr, N_16: tl.constexpr, HAS_MASK: tl.constexpr, PRECISION: tl.constexpr,
                        ROWS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    fwd_rows_kernel(Q, K, V, Bias, Mask, O, LSE, multiple_of_16(N, N_16), H, D, qk_scale,
                    HAS_MASK, PRECISION, ROWS, BLOCK_M, BLOCK_N, HEAD_DIM)


@triton.jit
def bwd_preprocess_kernel_jax(O, DO, N, Delta, D: tl.constexpr, N_16: tl.constexpr,
                              BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    bwd_preprocess_kernel(O, DO, Delta, multiple_of_16(N, N_16), D, BLOCK_M, HEAD_DIM)


@triton.jit
def bwd_dkdv_kernel_jax(Q, K, V, Bias, Mask, DO, LSE, Delta, N, H, qk_scale, scale, DK, DV,
                        D: tl.constexpr, N_16: tl.constexpr, HAS_MASK: tl.constexpr, PRECISION: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    bwd_dkdv_kernel(Q, K, V, Bias, Mask, DO, LSE, Delta, DK, DV, multiple_of_16(N, N_16), H, D, qk_scale, scale,
                    HAS_MASK, PRECISION, BLOCK_M, BLOCK_N, HEAD_DIM)


@triton.jit
def bwd_dq_kernel_jax(Q, K, V, Bias, Mask, DO, LSE, Delta, N, H, qk_scale, scale, DQ,
                      D: tl.constexpr, N_16: tl.constexpr, HAS_MASK: tl.constexpr, PRECISION: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    bwd_dq_kernel(Q, K, V, Bias, Mask, DO, LSE, Delta, DQ, multiple_of_16(N, N_16), H, D, qk_scale, scale,
                  HAS_MASK, PRECISION, BLOCK_M, BLOCK_N, HEAD_DIM)


@triton.jit
def bwd_dbias_kernel_jax(Q, K, V, Bias, Mask, DO, LSE, Delta, N, H, qk_scale, DBias,
                         D: tl.constexpr, N_16: tl.constexpr, HAS_MASK: tl.constexpr, PRECISION: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    bwd_dbias_kernel(Q, K, V, Bias, Mask, DO, LSE, Delta, DBias, multiple_of_16(N, N_16), H, D, qk_scale,
                     HAS_MASK, PRECISION, BLOCK_M, BLOCK_N, HEAD_DIM)


# ----------------------------------------------------------------------------- launchers


def _options(cfg: dict) -> dict:
    return {k: v for k, v in cfg.items() if k in LAUNCH_OPTIONS}


def _mask_rows(mask, B: int, N: int):
    import jax.numpy as jnp

    if mask is None:
        return jnp.zeros((1,), jnp.int8)  # never read: HAS_MASK is False
    return mask.reshape(B, N, N).astype(jnp.int8)


def _meta(q, mask, D: int, N: int) -> dict:
    import jax.numpy as jnp

    return dict(D=D, N_16=N % 16 == 0, HAS_MASK=mask is not None,
                PRECISION="ieee" if q.dtype == jnp.float32 else "tf32", HEAD_DIM=head_dim_block(D))


def triangle_attention_fwd(q, k, v, bias, mask, scale, cfgs: dict):
    """(out like q, lse (B, N, H, N) float32) for q, k, v (B, N, H, N, D); ``cfgs`` holds each
    kernel's config (a table entry)."""
    import jax
    import jax.numpy as jnp

    B, N, H, _, D = q.shape
    cfg = cfgs["fwd"]
    rows = cfg.get("ROWS", 1)
    common = dict(kernel=fwd_rows_kernel_jax if rows > 1 else fwd_kernel_jax,
                  out_shape=(jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((B, N, H, N), jnp.float32)),
                  grid=(triton.cdiv(N, cfg["BLOCK_M"]), B * (triton.cdiv(N, rows) if rows > 1 else N) * H),
                  BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], **_meta(q, mask, D, N), **_options(cfg))
    if rows > 1:
        common["ROWS"] = rows
    return jax_bridge.triton_call(q, k, v, bias, _mask_rows(mask, B, N), N, H, np.float32(scale * LOG2E), **common)


def triangle_attention_bwd(q, k, v, bias, mask, scale, out, lse, dout, cfgs: dict):
    """(dq, dk, dv, dbias); dbias reduced over the rows in float32, then cast to bias's dtype."""
    import jax
    import jax.numpy as jnp

    B, N, H, _, D = q.shape
    meta = _meta(q, mask, D, N)
    mask_rows = _mask_rows(mask, B, N)
    dout = dout.astype(q.dtype)
    scales = (np.float32(scale * LOG2E), np.float32(scale))

    pre = cfgs["bwd_dq"]
    delta = jax_bridge.triton_call(
        out, dout, N, kernel=bwd_preprocess_kernel_jax, out_shape=jax.ShapeDtypeStruct((B, N, H, N), jnp.float32),
        grid=(triton.cdiv(N, pre["BLOCK_M"]), B * N * H),
        D=D, N_16=meta["N_16"], BLOCK_M=pre["BLOCK_M"], HEAD_DIM=meta["HEAD_DIM"])
    operands = (q, k, v, bias, mask_rows, dout, lse, delta, N, H)
    c = cfgs["bwd_dkdv"]
    dk, dv = jax_bridge.triton_call(
        *operands, *scales, kernel=bwd_dkdv_kernel_jax,
        out_shape=(jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)),
        grid=(triton.cdiv(N, c["BLOCK_N"]), B * N * H),
        BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], **meta, **_options(c))
    c = cfgs["bwd_dq"]
    dq = jax_bridge.triton_call(
        *operands, *scales, kernel=bwd_dq_kernel_jax, out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(triton.cdiv(N, c["BLOCK_M"]), B * N * H),
        BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], **meta, **_options(c))
    c = cfgs["bwd_dbias"]
    dbias = jax_bridge.triton_call(
        *operands, scales[0], kernel=bwd_dbias_kernel_jax, out_shape=jax.ShapeDtypeStruct((B, 1, H, N, N), jnp.float32),
        grid=(triton.cdiv(N, c["BLOCK_M"]), triton.cdiv(N, c["BLOCK_N"]), B * H),
        BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], **meta, **_options(c))
    return dq, dk, dv, dbias.astype(bias.dtype)


# ----------------------------------------------------------------------------- static compile

JAX_KERNELS = {"fwd": fwd_kernel_jax, "fwd_rows": fwd_rows_kernel_jax, "bwd_dkdv": bwd_dkdv_kernel_jax,
               "bwd_dq": bwd_dq_kernel_jax, "bwd_dbias": bwd_dbias_kernel_jax}


def compile_specs(cfgs: dict, dtype: str = "bfloat16", head_dim: int = 32, n: int = 384) -> list:
    """The wrappers as jax-triton compiles them at ``cfgs`` (a table entry): arrays 16-byte aligned,
    integers unspecialized, ``D`` a constexpr and ``N`` marked a multiple of 16 when it is one."""
    from kernels.isa import CompileSpec

    t = _TRITON_DTYPE[dtype]
    specs = []
    for name, fn in JAX_KERNELS.items():
        cfg = cfgs[name]
        constexprs = {"D": head_dim, "N_16": n % 16 == 0, "HAS_MASK": True,
                      "PRECISION": "ieee" if dtype == "float32" else "tf32",
                      "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"], "HEAD_DIM": head_dim_block(head_dim)}
        if name == "fwd_rows":
            constexprs["ROWS"] = cfg["ROWS"]
        sig = {}
        for arg in fn.arg_names:
            if arg in constexprs:
                sig[arg] = "constexpr"
            elif arg in ("N", "H"):
                sig[arg] = "i32"
            elif arg in ("Bias", "LSE", "Delta", "DBias"):
                sig[arg] = "*fp32"
            elif arg == "Mask":
                sig[arg] = "*i8"
            elif arg[0].isupper():
                sig[arg] = f"*{t}"
            elif arg in ("qk_scale", "scale"):
                sig[arg] = "fp32"
            else:
                sig[arg] = "i32"
        arrays = tuple(a for a in fn.arg_names if sig[a].startswith("*"))
        specs.append(CompileSpec(f"jax_triangle_attention_{name}_{dtype}_d{head_dim}_n{n}", fn, sig, constexprs,
                                 _options(cfg), cfg, divisible_by_16=arrays))
    return specs
