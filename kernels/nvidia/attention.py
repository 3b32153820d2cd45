"""Flash attention on Hopper (sm_90a): the config table, the TMA decision and the entry points
over the shared Triton source (:mod:`kernels.triton.attention`).

Q, K and V tiles come in through TMA (2-D tensor descriptors over (batch * seq, heads *
head_dim)) and ``tl.dot`` lowers to wgmma. The source's pointer-load path keeps K/V tiles and
their 64-bit addresses in registers on Hopper and spills, so here other head dims (80, 96, ...)
and strided inputs are copied once, zero-padded, into the TMA layout instead; the interpreter
runs the pointer path unless a config asks for TMA.

Tiles per device key (``sm90``) and padded head dim are in ``configs/attention.json``, with
``"causal"``, ``"narrow"`` (a bias or mask tile live, or pointer loads) and ``"pointer_bias"``
overrides; :func:`heuristic` covers the rest.

The Gluon warp-specialized kernels (:mod:`kernels.nvidia.gluon.attention`) are this backend's
second implementation: :func:`implementation_for` says which of the two runs a problem and why
(the Gluon kernels only when ``config={"implementation": "gluon"}`` asks for them or a device
run proved them faster for the problem, and only on problems they take).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

from kernels import spaces
from kernels.triton import attention as flash

CONFIG_FILE = Path(__file__).parent / "configs" / "attention.json"
TARGET = "sm_90a"


@functools.cache
def _tuned() -> dict:
    return json.loads(CONFIG_FILE.read_text())


def device_key(device: torch.device | str) -> str:
    """The key of the tuned table for ``device``: 'sm90' on Hopper, 'interpreter' on the CPU;
    a string is already a key (JAX callers, see ``kernels.jax_bridge.device_key``)."""
    if isinstance(device, str):
        return device
    if device.type != "cuda":
        return "interpreter"
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm{major}{minor}"


def heuristic(head_dim_padded: int) -> dict:
    """Tiles for a device or head dim nobody tuned: 128-row query tiles while the accumulators
    fit in registers, narrower key tiles and fewer stages as the head dim grows."""
    big = head_dim_padded > 128
    return {
        "fwd": {"block_m": 64 if big else 128, "block_n": 64 if head_dim_padded >= 128 else 128,
                "num_warps": 8 if head_dim_padded >= 64 else 4, "num_stages": 2 if big else 3},
        "dkdv": {"block_m": 32 if big else 64, "block_n": 64 if big else 128, "num_warps": 8, "num_stages": 2},
        "dq": {"block_m": 64 if big else 128, "block_n": 32 if big else 64, "num_warps": 8, "num_stages": 2},
    }


def heuristic_narrow(head_dim_padded: int) -> dict:
    """Narrower tiles when a bias/mask tile is live next to the scores, or loads use pointers."""
    return {"fwd": {"block_n": 32}, "dkdv": {"block_m": 16}, "dq": {"block_n": 32}}


def select_config(head_dim: int, device: torch.device | str, config: dict | None = None, narrow: bool = False,
                  pointer_bias: bool = False, causal: bool = False) -> dict:
    """The tuned entry for (device, padded head dim) over the heuristic, then its ``"causal"``
    overrides for causal attention (the tuning sweep measures both), then its ``"narrow"``
    overrides when more registers are live per tile (a bias or mask tile next to the scores, or
    pointer loads instead of TMA), then its ``"pointer_bias"`` overrides when both hold, then
    ``config``, checked against the sm_90a space (``kernels/spaces/attention.json``): its keys
    and values, then the merged config's constraints at this head dim (16-bit inputs)."""
    if config is not None:
        spaces.check("attention", TARGET, config, partial=True)
    pad = flash.head_dim_pad(head_dim)
    base = heuristic(pad)
    tuned = dict(_tuned().get(device_key(device), {}).get(str(pad), {}))
    narrower = tuned.pop("narrow", None)
    narrowest = tuned.pop("pointer_bias", None)
    causal_only = tuned.pop("causal", None)
    if narrow:
        base = flash.merge_config(base, heuristic_narrow(pad))
    cfg = flash.merge_config(base, tuned, causal_only if causal else None, narrower if narrow else None,
                             narrowest if pointer_bias else None, config)
    spaces.check("attention", TARGET, cfg, {"head_dim": head_dim, "dtype_bytes": 2})
    return cfg


# ----------------------------------------------------------------------------------------------
# The backend entry points (torch tensors in and out; validated by kernels.attention.spec)
# ----------------------------------------------------------------------------------------------


def _wants_tma(cfg: dict, q: torch.Tensor) -> bool:
    wanted = cfg.get("use_tma")
    if wanted is None:  # TMA on Hopper; the interpreter runs the pointer path unless asked
        wanted = flash.on_vendor_gpu(q, "nvidia") and torch.cuda.get_device_capability(q.device)[0] >= 9
    return bool(wanted)


def _for_tma(t: torch.Tensor, pad: int) -> torch.Tensor:
    """``t`` as a 16-byte-aligned contiguous (batch, seq, heads, pad) tensor. On Hopper the
    pointer path keeps K/V tiles (and their addresses) in registers and spills, so padded
    head dims and strided inputs are copied once into the TMA layout instead."""
    if t.shape[-1] != pad:
        t = torch.nn.functional.pad(t, (0, pad - t.shape[-1]))
    if not t.is_contiguous():
        t = t.contiguous()
    if t.data_ptr() % 16:
        t = t.clone()
    return t


def implementation_for(problem, config: dict | None = None, direction: str = "fwd") -> tuple[str, str]:
    """("triton" or "gluon", why): which of the two Hopper implementations runs ``problem`` (a
    :class:`kernels.attention.AttentionProblem`) in ``direction`` ("fwd" or "bwd"); see
    :mod:`kernels.nvidia.gluon.attention`."""
    from kernels.nvidia.gluon import attention as gluon

    return gluon.implementation_for(problem, config, direction)


def _runs_gluon(q, k, bias, mask, causal, scale, config, direction: str) -> bool:
    from kernels.nvidia.gluon import attention as gluon

    return gluon.implementation_for(gluon.problem_of(q, k, bias, mask, causal, scale), config, direction)[0] == "gluon"


def attention_fwd(q, k, v, bias, mask, causal, scale, config=None):
    if _runs_gluon(q, k, bias, mask, causal, scale, config, "fwd"):
        from kernels.nvidia.gluon import attention as gluon

        return gluon.forward(q, k, v, causal, scale, config)
    head_dim = q.shape[-1]
    biased = bias is not None or mask is not None
    use_tma = _wants_tma(select_config(head_dim, q.device, config), q)
    cfg = select_config(head_dim, q.device, config, narrow=biased or not use_tma, pointer_bias=biased and not use_tma,
                        causal=causal)
    if not use_tma:
        return flash.forward(q, k, v, bias, mask, causal, scale, cfg, False)
    pad = flash.head_dim_pad(head_dim)
    o, lse = flash.forward(_for_tma(q, pad), _for_tma(k, pad), _for_tma(v, pad), bias, mask, causal, scale, cfg,
                           True)
    return o[..., :head_dim], lse


def attention_bwd(do, q, k, v, o, lse, bias, mask, causal, scale, bias_grad, config=None):
    if _runs_gluon(q, k, bias, mask, causal, scale, config, "bwd"):
        from kernels.nvidia.gluon import attention as gluon

        return (*gluon.backward(do, q, k, v, o, lse, causal, scale, config), None)
    head_dim = q.shape[-1]
    biased = bias is not None or mask is not None
    use_tma = _wants_tma(select_config(head_dim, q.device, config), q)
    cfg = select_config(head_dim, q.device, config, narrow=biased or not use_tma, pointer_bias=biased and not use_tma,
                        causal=causal)
    if not use_tma:
        return flash.backward(do, q, k, v, o, lse, bias, mask, causal, scale, bias_grad, cfg, False)
    pad = flash.head_dim_pad(head_dim)
    padded = [_for_tma(t, pad) for t in (do, q, k, v, o)]
    dq, dk, dv, dbias = flash.backward(*padded, lse, bias, mask, causal, scale, bias_grad, cfg, True)
    return dq[..., :head_dim], dk[..., :head_dim], dv[..., :head_dim], dbias


def jax_config(head_dim: int, config: dict | None, biased: bool) -> dict:
    """The config of the jax-triton launchers (:mod:`kernels.triton.attention_jax`) on JAX's GPU:
    pointer loads, so the narrow tiles, and the narrowest when a bias or mask tile is live too."""
    from kernels import jax_bridge

    return select_config(head_dim, jax_bridge.device_key("nvidia"), config, narrow=True, pointer_bias=biased)


# ----------------------------------------------------------------------------------------------
# Cross-compilation specs (static checks: tensor-core instructions, spills, shared memory)
# ----------------------------------------------------------------------------------------------


def compile_specs(dtype: str = "bfloat16") -> list:
    """The shipped Hopper configs: every tuned head dim, causal, TMA; the same with a bias and
    a mask (their ``"narrow"`` tiles). Other head dims run zero-padded to these on Hopper."""
    table = _tuned()["sm90"]
    specs = []
    for pad in table:
        entry = {k: v for k, v in table[pad].items() if k not in ("narrow", "pointer_bias", "causal")}
        cfg = flash.merge_config(heuristic(int(pad)), entry, table[pad].get("causal"))
        specs += flash.kernel_specs(int(pad), cfg, dtype=dtype)
    for pad in table:
        entry = {k: v for k, v in table[pad].items() if k != "pointer_bias"}
        narrower = entry.pop("narrow", None)
        entry.pop("causal", None)
        cfg = flash.merge_config(heuristic(int(pad)), heuristic_narrow(int(pad)), entry, narrower)
        specs += flash.kernel_specs(int(pad), cfg, dtype=dtype, causal=False, bias=True, mask=True)
    return specs
