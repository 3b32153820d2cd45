"""Port of openfold/model/primitives.py: ``Linear``, ``LayerNorm`` and the gated ``Attention``.

Only the default (stock PyTorch) attention path is ported; the kernel flags raise.
"""

import math
from typing import List, Optional

import torch
from torch import nn

from openfold.utils.tensor_utils import flatten_final_dims, permute_final_dims


def _trunc_normal_(weights, scale):
    fan_in = weights.shape[1]
    # std of a unit normal truncated to [-2, 2]
    std = math.sqrt(scale / max(1, fan_in)) / 0.87962566103423978
    nn.init.trunc_normal_(weights, std=std, a=-2 * std, b=2 * std)


class Linear(nn.Linear):
    """nn.Linear with OpenFold's initialisers; bf16 inputs run with the weights cast to bf16."""

    def __init__(self, in_dim, out_dim, bias=True, init="default", init_fn=None, precision=None):
        super().__init__(in_dim, out_dim, bias=bias)
        with torch.no_grad():
            if bias:
                self.bias.fill_(0)
            if init_fn is not None:
                init_fn(self.weight, self.bias)
            elif init == "default":
                _trunc_normal_(self.weight, 1.0)
            elif init == "relu":
                _trunc_normal_(self.weight, 2.0)
            elif init == "glorot":
                nn.init.xavier_uniform_(self.weight, gain=1)
            elif init == "gating":
                self.weight.fill_(0.0)
                if bias:
                    self.bias.fill_(1.0)
            elif init == "normal":
                nn.init.kaiming_normal_(self.weight, nonlinearity="linear")
            elif init == "final":
                self.weight.fill_(0.0)
            else:
                raise ValueError("Invalid init string.")
        self.precision = precision

    def forward(self, input):
        d = input.dtype
        if self.precision is not None:
            with torch.autocast("cuda", enabled=False):
                bias = self.bias.to(self.precision) if self.bias is not None else None
                return nn.functional.linear(input.to(self.precision), self.weight.to(self.precision), bias).to(d)
        if d is torch.bfloat16:
            with torch.autocast("cuda", enabled=False):
                bias = self.bias.to(d) if self.bias is not None else None
                return nn.functional.linear(input, self.weight.to(d), bias)
        return nn.functional.linear(input, self.weight, self.bias)


class LayerNorm(nn.Module):
    def __init__(self, c_in, eps=1e-5):
        super().__init__()
        self.c_in = (c_in,)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(c_in))
        self.bias = nn.Parameter(torch.zeros(c_in))

    def forward(self, x):
        d = x.dtype
        if d is torch.bfloat16:
            with torch.autocast("cuda", enabled=False):
                return nn.functional.layer_norm(x, self.c_in, self.weight.to(d), self.bias.to(d), self.eps)
        return nn.functional.layer_norm(x, self.c_in, self.weight, self.bias, self.eps)


def softmax_no_cast(t, dim=-1):
    """Softmax that keeps bf16 in bf16 (no autocast upcast)."""
    if t.dtype is torch.bfloat16:
        with torch.autocast("cuda", enabled=False):
            return torch.nn.functional.softmax(t, dim=dim)
    return torch.nn.functional.softmax(t, dim=dim)


def _attention(query, key, value, biases: List[torch.Tensor]):
    a = torch.matmul(query, permute_final_dims(key, (1, 0)))  # [*, H, Q, K]
    for b in biases:
        a += b
    a = softmax_no_cast(a, -1)
    return torch.matmul(a, value)  # [*, H, Q, C_hidden]


class Attention(nn.Module):
    """Multi-head attention with AlphaFold's initialisers, several additive biases and a sigmoid gate."""

    def __init__(self, c_q, c_k, c_v, c_hidden, no_heads, gating=True):
        super().__init__()
        self.c_q, self.c_k, self.c_v = c_q, c_k, c_v
        self.c_hidden, self.no_heads, self.gating = c_hidden, no_heads, gating
        width = c_hidden * no_heads
        self.linear_q = Linear(c_q, width, bias=False, init="glorot")
        self.linear_k = Linear(c_k, width, bias=False, init="glorot")
        self.linear_v = Linear(c_v, width, bias=False, init="glorot")
        self.linear_o = Linear(width, c_q, init="final")
        self.linear_g = Linear(c_q, width, init="gating") if gating else None
        self.sigmoid = nn.Sigmoid()

    def _prep_qkv(self, q_x, kv_x, apply_scale=True):
        def heads(t):  # [*, Q/K, H * C] -> [*, H, Q/K, C]
            return t.view(t.shape[:-1] + (self.no_heads, -1)).transpose(-2, -3)

        q, k, v = heads(self.linear_q(q_x)), heads(self.linear_k(kv_x)), heads(self.linear_v(kv_x))
        if apply_scale:
            q /= math.sqrt(self.c_hidden)
        return q, k, v

    def _wrap_up(self, o, q_x):
        if self.linear_g is not None:
            g = self.sigmoid(self.linear_g(q_x))
            o = o * g.view(g.shape[:-1] + (self.no_heads, -1))  # [*, Q, H, C]
        return self.linear_o(flatten_final_dims(o, 2))

    def forward(self, q_x, kv_x, biases: Optional[List[torch.Tensor]] = None, use_memory_efficient_kernel=False,
                use_deepspeed_evo_attention=False, use_lma=False, lma_q_chunk_size=1024, lma_kv_chunk_size=4096,
                use_flash=False, flash_mask=None):
        if use_memory_efficient_kernel or use_deepspeed_evo_attention or use_lma or use_flash:
            raise NotImplementedError("the port has OpenFold's stock PyTorch attention path only")
        q, k, v = self._prep_qkv(q_x, kv_x)
        o = _attention(q, k, v, biases or []).transpose(-2, -3)
        return self._wrap_up(o, q_x)
