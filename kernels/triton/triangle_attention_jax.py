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
    KEY_PAD,
    fwd_kernel,
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
def fwd_kernel_jax(Q, K, V, Bias, KeyBias, N, H, kb_row_stride, qk_scale, O, LSE,
                   D: tl.constexpr, N_16: tl.constexpr, PRECISION: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, ROWS: tl.constexpr):
    fwd_kernel(Q, K, V, Bias, KeyBias, O, LSE, multiple_of_16(N, N_16), H, D, multiple_of_16(kb_row_stride, True),
               qk_scale, PRECISION, BLOCK_M, BLOCK_N, HEAD_DIM, False, ROWS)


@triton.jit
def bwd_preprocess_kernel_jax(O, DO, N, Delta, D: tl.constexpr, N_16: tl.constexpr,
                              BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    bwd_preprocess_kernel(O, DO, Delta, multiple_of_16(N, N_16), D, BLOCK_M, HEAD_DIM)


@triton.jit
def bwd_dkdv_kernel_jax(Q, K, V, Bias, KeyBias, DO, LSE, Delta, N, H, kb_row_stride, qk_scale, scale, DK, DV,
                        D: tl.constexpr, N_16: tl.constexpr, PRECISION: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    bwd_dkdv_kernel(Q, K, V, Bias, KeyBias, DO, LSE, Delta, DK, DV, multiple_of_16(N, N_16), H, D,
                    multiple_of_16(kb_row_stride, True), qk_scale, scale, PRECISION, BLOCK_M, BLOCK_N, HEAD_DIM)


@triton.jit
def bwd_dq_kernel_jax(Q, K, V, Bias, KeyBias, DO, LSE, Delta, N, H, kb_row_stride, qk_scale, scale, DQ,
                      D: tl.constexpr, N_16: tl.constexpr, PRECISION: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    bwd_dq_kernel(Q, K, V, Bias, KeyBias, DO, LSE, Delta, DQ, multiple_of_16(N, N_16), H, D,
                  multiple_of_16(kb_row_stride, True), qk_scale, scale, PRECISION, BLOCK_M, BLOCK_N, HEAD_DIM)


@triton.jit
def bwd_dbias_kernel_jax(Q, K, V, Bias, KeyBias, DO, LSE, Delta, N, H, kb_row_stride, qk_scale, DBias,
                         D: tl.constexpr, N_16: tl.constexpr, PRECISION: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    bwd_dbias_kernel(Q, K, V, Bias, KeyBias, DO, LSE, Delta, DBias, multiple_of_16(N, N_16), H, D,
                     multiple_of_16(kb_row_stride, True), qk_scale, PRECISION, BLOCK_M, BLOCK_N, HEAD_DIM)


# ----------------------------------------------------------------------------- launchers


def _options(cfg: dict) -> dict:
    return {k: v for k, v in cfg.items() if k in LAUNCH_OPTIONS}


def _key_bias(mask, B: int, N: int):
    """(key bias, row stride) as :func:`kernels.triton.triangle_attention.key_bias` builds them: 0 at
    a key that may be attended to, -inf at a masked key and in the padding to ``KEY_PAD`` keys."""
    import jax.numpy as jnp

    n_pad = triton.cdiv(N, KEY_PAD) * KEY_PAD
    pad = jnp.arange(n_pad) >= N
    if mask is None:
        return jnp.where(pad, -jnp.inf, 0.0).astype(jnp.float32)[None, :], 0
    keep = jnp.pad(mask.reshape(B * N, N).astype(bool), ((0, 0), (0, n_pad - N)))
    return jnp.where(keep, 0.0, -jnp.inf).astype(jnp.float32), n_pad


def _meta(q, D: int, N: int) -> dict:
    import jax.numpy as jnp

    return dict(D=D, N_16=N % 16 == 0, PRECISION="ieee" if q.dtype == jnp.float32 else "tf32",
                HEAD_DIM=head_dim_block(D))


def triangle_attention_fwd(q, k, v, bias, mask, scale, cfgs: dict):
    """(out like q, lse (B, N, H, N) float32) for q, k, v (B, N, H, N, D); ``cfgs`` holds each
    kernel's config (a table entry)."""
    import jax
    import jax.numpy as jnp

    B, N, H, _, D = q.shape
    cfg = cfgs["fwd"]
    rows = cfg.get("ROWS", 1)
    kb, kb_stride = _key_bias(mask, B, N)
    return jax_bridge.triton_call(
        q, k, v, bias, kb, N, H, kb_stride, np.float32(scale * LOG2E), kernel=fwd_kernel_jax,
        out_shape=(jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((B, N, H, N), jnp.float32)),
        grid=(triton.cdiv(N, cfg["BLOCK_M"]), B * triton.cdiv(N, rows) * H),
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], ROWS=rows, **_meta(q, D, N), **_options(cfg))


def triangle_attention_bwd(q, k, v, bias, mask, scale, out, lse, dout, cfgs: dict):
    """(dq, dk, dv, dbias); dbias reduced over the rows in float32, then cast to bias's dtype."""
    import jax
    import jax.numpy as jnp

    B, N, H, _, D = q.shape
    meta = _meta(q, D, N)
    kb, kb_stride = _key_bias(mask, B, N)
    dout = dout.astype(q.dtype)
    scales = (np.float32(scale * LOG2E), np.float32(scale))

    pre = cfgs["bwd_dq"]
    delta = jax_bridge.triton_call(
        out, dout, N, kernel=bwd_preprocess_kernel_jax, out_shape=jax.ShapeDtypeStruct((B, N, H, N), jnp.float32),
        grid=(triton.cdiv(N, pre["BLOCK_M"]), B * N * H),
        D=D, N_16=meta["N_16"], BLOCK_M=pre["BLOCK_M"], HEAD_DIM=meta["HEAD_DIM"])
    operands = (q, k, v, bias, kb, dout, lse, delta, N, H, kb_stride)
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

JAX_KERNELS = {"fwd": fwd_kernel_jax, "fwd_rows": fwd_kernel_jax, "bwd_dkdv": bwd_dkdv_kernel_jax,
               "bwd_dq": bwd_dq_kernel_jax, "bwd_dbias": bwd_dbias_kernel_jax}


def compile_specs(cfgs: dict, dtype: str = "bfloat16", head_dim: int = 32, n: int = 384) -> list:
    """The wrappers as jax-triton compiles them at ``cfgs`` (a table entry): arrays 16-byte aligned,
    integers unspecialized, ``D`` a constexpr and ``N`` marked a multiple of 16 when it is one."""
    from kernels.isa import CompileSpec

    t = _TRITON_DTYPE[dtype]
    specs = []
    for name, fn in JAX_KERNELS.items():
        cfg = cfgs[name]
        constexprs = {"D": head_dim, "N_16": n % 16 == 0, "PRECISION": "ieee" if dtype == "float32" else "tf32",
                      "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"], "HEAD_DIM": head_dim_block(head_dim)}
        if fn is fwd_kernel_jax:
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
                                 _options(cfg), cfg, divisible_by_16=arrays))
    return specs
