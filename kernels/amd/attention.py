"""Flash attention, forward and backward, for AMD CDNA3 (MI300X, gfx942) in Triton.

The kernel source is the shared one in ``kernels.triton.attention`` (the online softmax in base 2,
the unmasked/masked split of the key loop, the dK/dV and dQ backward kernels, the dBias
reduction); what differs on CDNA3 is how it is launched, following aiter's Triton MHA:

* pointer loads only: no TMA on AMD, and the loads are not asynchronous, so the V tile of
  the forward is issued before the softmax math (``pre_load_v``) to overlap with it;
* 128 x 64 forward tiles with 4 waves of 64 lanes, ``num_stages`` 1 (software pipelining
  through LDS does not pay on CDNA3 for this loop);
* ``waves_per_eu``: 1 for most kernels, so the float32 accumulators may live in the AGPR half
  of the unified 512-entry register file (at 2 the compiler caps a wave at 256 registers and
  these tiles spill to scratch);
* ``matrix_instr_nonkdim`` 16 (the 16x16xK MFMA, better for the softmax layout than 32x32).

Configs per device and padded head dim are in ``configs/attention.json``; a heuristic covers
the rest. On the CPU the same kernels run under the Triton interpreter.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

from kernels import spaces
from kernels.triton import attention as flash

CONFIG_FILE = Path(__file__).parent / "configs" / "attention.json"
TARGET = "gfx942"
KERNELS = flash.KERNELS


@functools.cache
def _tuned() -> dict:
    return json.loads(CONFIG_FILE.read_text())


def device_key(device: torch.device | str) -> str:
    """'gfx942' etc. on a ROCm GPU, 'interpreter' on the CPU; a string is already a key."""
    if isinstance(device, str):
        return device
    if device.type != "cuda" or not getattr(torch.version, "hip", None):
        return "interpreter"
    return torch.cuda.get_device_properties(device).gcnArchName.split(":")[0]


def heuristic(head_dim_padded: int) -> dict:
    """aiter-style defaults: 128 x 64 forward tiles for head dims up to 128, 64 x 64 above;
    one stage; V pre-loaded; one wave per EU (the accumulators need the AGPRs); 16x16 MFMA."""
    big = head_dim_padded > 128
    amd = {"waves_per_eu": 1, "matrix_instr_nonkdim": 16, "num_stages": 1}
    return {
        "fwd": {"block_m": 64 if big else 128, "block_n": 64, "num_warps": 4, **amd},
        "dkdv": {"block_m": 32 if big else 64, "block_n": 64, "num_warps": 4, **amd},
        "dq": {"block_m": 64 if big else 128, "block_n": 32, "num_warps": 4 if big else 8, **amd},
        "pre_load_v": True,
        "use_tma": False,
    }


def select_config(head_dim: int, device: torch.device, config: dict | None = None, biased: bool = False) -> dict:
    """Tuned entry over the heuristic, its ``"narrow"`` overrides when a bias/mask tile is
    live, then ``config``, checked against the gfx942 space (``kernels/spaces/attention.json``):
    its keys and values, then the merged config at this head dim (16-bit inputs)."""
    if config is not None:
        spaces.check("attention", TARGET, config, partial=True)
    pad = flash.head_dim_pad(head_dim)
    tuned = dict(_tuned().get(device_key(device), {}).get(str(pad), {}))
    narrower = tuned.pop("narrow", None)
    cfg = flash.merge_config(heuristic(pad), tuned, narrower if biased else None, config)
    cfg["use_tma"] = False  # CDNA3 has no TMA
    spaces.check("attention", TARGET, cfg, {"head_dim": head_dim, "dtype_bytes": 2})
    return cfg


def attention_fwd(q, k, v, bias, mask, causal, scale, config=None):
    cfg = select_config(q.shape[-1], q.device, config, biased=bias is not None or mask is not None)
    return flash.forward(q, k, v, bias, mask, causal, scale, cfg, use_tma=False, vendor="amd")


def attention_bwd(do, q, k, v, o, lse, bias, mask, causal, scale, bias_grad, config=None):
    cfg = select_config(q.shape[-1], q.device, config, biased=bias is not None or mask is not None)
    return flash.backward(do, q, k, v, o, lse, bias, mask, causal, scale, bias_grad, cfg, use_tma=False, vendor="amd")


def jax_config(head_dim: int, config: dict | None, biased: bool) -> dict:
    """The config of the jax-triton launchers (:mod:`kernels.triton.attention_jax`) on JAX's GPU,
    as :func:`select_config` picks it for a torch launch (AMD's launch options are not ones
    jax-triton passes on)."""
    from kernels import jax_bridge

    return select_config(head_dim, jax_bridge.device_key("amd"), config, biased=biased)


def compile_specs(dtype: str = "bfloat16") -> list:
    """The shipped gfx942 configs: every tuned head dim, causal, pre-loaded V; the same with a
    bias and a mask (their ``"narrow"`` tiles); and the padded head dim 80."""
    table = _tuned()["gfx942"]
    specs = []
    for pad in table:
        entry = dict(table[pad])
        narrower = entry.pop("narrow", None)
        cfg = flash.merge_config(heuristic(int(pad)), entry)
        specs += flash.kernel_specs(int(pad), cfg, dtype=dtype, use_tma=False, pre_load_v=True, prefix="amd_")
        if pad == "128":
            specs += flash.kernel_specs(80, cfg, dtype=dtype, use_tma=False, pre_load_v=True, prefix="amd_")
        specs += flash.kernel_specs(int(pad), flash.merge_config(cfg, narrower), dtype=dtype, causal=False, bias=True,
                                    mask=True, use_tma=False, pre_load_v=True, prefix="amd_")
    return specs
