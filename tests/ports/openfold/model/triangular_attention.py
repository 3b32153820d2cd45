"""Port of openfold/model/triangular_attention.py (Algorithms 13 and 14)."""

from functools import partialmethod
from typing import Optional

import torch
from torch import nn

from openfold.model.primitives import Attention, LayerNorm, Linear
from openfold.utils.tensor_utils import permute_final_dims


class TriangleAttention(nn.Module):
    def __init__(self, c_in, c_hidden, no_heads, starting=True, inf=1e9):
        super().__init__()
        self.c_in, self.c_hidden, self.no_heads, self.starting, self.inf = c_in, c_hidden, no_heads, starting, inf
        self.layer_norm = LayerNorm(c_in)
        self.linear = Linear(c_in, no_heads, bias=False, init="normal")
        self.mha = Attention(c_in, c_in, c_in, c_hidden, no_heads)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, chunk_size: Optional[int] = None,
                use_memory_efficient_kernel: bool = False, use_deepspeed_evo_attention: bool = False,
                use_lma: bool = False, inplace_safe: bool = False) -> torch.Tensor:
        if chunk_size is not None:
            raise NotImplementedError("the port has no chunked path")
        if mask is None:
            mask = x.new_ones(x.shape[:-1])
        if not self.starting:
            x = x.transpose(-2, -3)
            mask = mask.transpose(-1, -2)
        x = self.layer_norm(x)
        mask_bias = (self.inf * (mask - 1))[..., :, None, None, :]  # [*, I, 1, 1, J]
        triangle_bias = permute_final_dims(self.linear(x), (2, 0, 1)).unsqueeze(-4)  # [*, 1, H, I, J]
        x = self.mha(q_x=x, kv_x=x, biases=[mask_bias, triangle_bias],
                     use_memory_efficient_kernel=use_memory_efficient_kernel,
                     use_deepspeed_evo_attention=use_deepspeed_evo_attention, use_lma=use_lma)
        if not self.starting:
            x = x.transpose(-2, -3)
        return x


TriangleAttentionStartingNode = TriangleAttention


class TriangleAttentionEndingNode(TriangleAttention):
    __init__ = partialmethod(TriangleAttention.__init__, starting=False)
