"""The Hopper GEMM on JAX arrays on a GPU, through jax-triton: the same persistent kernel with
pointer loads (``USE_TMA=False``: jax-triton passes plain pointers and cannot build TMA
descriptors), pipelined by Triton with cp.async, in jax-triton's argument order (outputs after
inputs)."""

from __future__ import annotations

import triton
import triton.language as tl

from ceiling.nvidia.gemm_kernels import H100_H200_SMS, cdiv, gemm_kernel, splitk_reduce_kernel


@triton.jit
def gemm_kernel_jax(
    a, b, bias_ptr, M, N, K, BATCH, PLANE_ROWS,
    stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn, stride_cb, stride_cm,
    c,
    BATCHED: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, SPLIT_K: tl.constexpr,
):
    """gemm_kernel with jax-triton's argument order (outputs after inputs), on pointers."""
    gemm_kernel(a, b, c, bias_ptr, M, N, K, BATCH, PLANE_ROWS,
                stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn, stride_cb, stride_cm,
                False, False, BATCHED, HAS_BIAS, ACTIVATION, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_SMS,
                EPILOGUE_SUBTILE, WARP_SPECIALIZE, SPLIT_K, False)


@triton.jit
def splitk_reduce_kernel_jax(ws_ptr, bias_ptr, M, N, PLANE_ROWS, stride_ws, stride_cm, c_ptr,
                             SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    splitk_reduce_kernel(ws_ptr, c_ptr, bias_ptr, M, N, PLANE_ROWS, stride_ws, stride_cm,
                         SPLIT_K, HAS_BIAS, ACTIVATION, BLOCK_M, BLOCK_N)



def forward(problem, config, a, b, bias):
    """``activation(a @ b + bias)`` with the resolved ``config``, split-K as a second launch."""
    import jax
    import jax.numpy as jnp

    from ceiling.jax_bridge import import_jax_triton

    jt = import_jax_triton()
    cfg = config
    out_dtype = jnp.dtype(problem.out_dtype)
    out_shape = problem.out_shape
    if problem.b_shared:  # one weight for the batch: fold the batch into M
        a = a.reshape(-1, a.shape[-1])
    batched = a.ndim == 3
    nbatch = a.shape[0] if batched else 1
    m, k = a.shape[-2:]
    n = b.shape[-1]
    device = jax.devices()[0]
    split_k = cfg["SPLIT_K"] if not batched else 1
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    items = cdiv(m, bm) * cdiv(n, bn) * nbatch * split_k
    num_sms = max(1, min(getattr(device, "core_count", H100_H200_SMS), items))
    bias_arg = bias if bias is not None else b  # never read when HAS_BIAS is False
    common = dict(HAS_BIAS=bias is not None, ACTIVATION=problem.activation or "none")
    strides = (m * k, k, 1, k * n, n, 1)
    if split_k > 1:
        ws = jt.triton_call(
            a, b, bias_arg, m, n, k, nbatch, m, *strides, m * n, n,
            kernel=gemm_kernel_jax, out_shape=jax.ShapeDtypeStruct((split_k * m, n), jnp.float32),
            grid=(num_sms,), num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
            BATCHED=False, HAS_BIAS=False, ACTIVATION="none", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
            GROUP_M=cfg["GROUP_M"], NUM_SMS=num_sms, EPILOGUE_SUBTILE=False,
            WARP_SPECIALIZE=cfg["WARP_SPECIALIZE"], SPLIT_K=split_k,
        )
        out = jt.triton_call(
            ws, bias_arg, m, n, m, n, n,
            kernel=splitk_reduce_kernel_jax, out_shape=jax.ShapeDtypeStruct((m, n), out_dtype),
            grid=(cdiv(m, 32), cdiv(n, 128)), num_warps=4,
            SPLIT_K=split_k, BLOCK_M=32, BLOCK_N=128, **common,
        )
        return out.reshape(out_shape)
    out = jt.triton_call(
        a, b, bias_arg, m, n, k, nbatch, m, *strides, m * n, n,
        kernel=gemm_kernel_jax, out_shape=jax.ShapeDtypeStruct((nbatch, m, n) if batched else (m, n), out_dtype),
        grid=(num_sms,), num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        BATCHED=batched, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"],
        NUM_SMS=num_sms, EPILOGUE_SUBTILE=cfg["EPILOGUE_SUBTILE"], WARP_SPECIALIZE=cfg["WARP_SPECIALIZE"], SPLIT_K=1,
        **common,
    )
    return out.reshape(out_shape)
