"""``ceiling::gemm``: the PyTorch custom op, with fake and autograd registrations.

The op takes a resolved backend name, so dispatch happens once, in
``kernels.gemm``, and ``torch.compile`` sees a single opaque node. The backward
is two GEMMs through the same backend (plus, for gelu and silu, one recompute of
the pre-activation, which is cheaper in memory than saving it).
"""

from __future__ import annotations

import json
from typing import Optional

import torch

from kernels import backends
from kernels.gemm import reference


def _run(a, b, bias, activation, out_dtype, backend, config):
    impl = backends.implementation("gemm", backend)
    cfg = decode_config(config) if config else None
    if cfg == "autotune" and backend == "nvidia":
        cfg = _autotuned(a, b, bias, activation, out_dtype)
    return impl.gemm(a, b, bias, activation, out_dtype, config=cfg)


def _autotuned(a, b, bias, activation, out_dtype) -> dict | None:
    """``config="autotune"`` on the Hopper GEMM: the fastest candidate for this problem on this GPU,
    from the tuning layer's cache (which times the candidates the first time). An empty problem
    has nothing to tune: the kernel returns before it reads a config."""
    if a.numel() == 0 or b.shape[-1] == 0:
        return None
    from kernels.tuning import autotune

    return autotune.best_config(a, b, bias, activation, out_dtype).as_dict()


@torch.library.custom_op("ceiling::gemm", mutates_args=())
def gemm_op(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: Optional[torch.Tensor],
    activation: Optional[str],
    out_dtype: torch.dtype,
    backend: str,
    config: Optional[str],
) -> torch.Tensor:
    return _run(a, b, bias, activation, out_dtype, backend, config)


@gemm_op.register_fake
def _(a, b, bias, activation, out_dtype, backend, config):
    shape = (*a.shape[:-1], b.shape[-1])
    return a.new_empty(shape, dtype=out_dtype)


def _setup_context(ctx, inputs, output):
    a, b, bias, activation, out_dtype, backend, config = inputs
    ctx.save_for_backward(a, b, bias, output if activation == "relu" else None)
    ctx.activation, ctx.backend = activation, backend


def _backward(ctx, grad):
    a, b, bias, out = ctx.saved_tensors
    act, backend = ctx.activation, ctx.backend
    if act is None:
        dz = grad
    elif act == "relu":
        dz = grad * (out > 0)
    else:
        z = gemm_op(a, b, bias, None, torch.float32, backend, None)
        dz = (grad.float() * reference.activation_grad_torch(z, act)).to(grad.dtype)
    dz = dz.to(a.dtype)
    da = db = dbias = None
    if ctx.needs_input_grad[0]:
        da = gemm_op(dz, b.mT, None, None, a.dtype, backend, None)
    if ctx.needs_input_grad[1]:
        if b.dim() == 2 and a.dim() == 3:  # one weight for the batch: fold the batch into M
            db = gemm_op(a.reshape(-1, a.shape[-1]).mT, dz.reshape(-1, dz.shape[-1]), None, None, b.dtype, backend, None)
        else:
            db = gemm_op(a.mT, dz, None, None, b.dtype, backend, None)
    if bias is not None and ctx.needs_input_grad[2]:
        dbias = dz.float().sum(dim=tuple(range(dz.dim() - 1))).to(bias.dtype)
    return da, db, dbias, None, None, None, None


gemm_op.register_autograd(_backward, setup_context=_setup_context)


def encode_config(config: dict | str | None) -> str | None:
    """A config dict as the op's string argument ("KEY=value;..."); plain string
    operations, so torch.compile folds it into a constant."""
    if config is None or isinstance(config, str):
        return config
    return ";".join(f"{key}={config[key]}" for key in sorted(config))


def decode_config(text: str) -> dict | str:
    if "=" not in text:
        return text  # a mode such as "autotune"
    out = {}
    for item in text.split(";"):
        key, value = item.split("=", 1)
        out[key] = _parse_value(value)
    return out


def _parse_value(value: str):
    if value == "None":
        return None
    try:
        return json.loads(value.lower() if value in ("True", "False") else value)
    except json.JSONDecodeError:
        return value


def gemm(a, b, bias, activation, out_dtype, backend, config):
    dtype = getattr(torch, out_dtype)
    return gemm_op(a, b, bias, activation, dtype, backend, encode_config(config))
