"""Port of openfold/model/triangular_multiplicative_update.py (Algorithms 11 and 12), training path."""

from functools import partialmethod
from typing import Optional

import torch
from torch import nn

from openfold.model.primitives import LayerNorm, Linear
from openfold.utils.precision_utils import is_fp16_enabled
from openfold.utils.tensor_utils import permute_final_dims


class BaseTriangleMultiplicativeUpdate(nn.Module):
    def __init__(self, c_z, c_hidden, _outgoing):
        super().__init__()
        self.c_z, self.c_hidden, self._outgoing = c_z, c_hidden, _outgoing
        self.linear_g = Linear(c_z, c_z, init="gating")
        self.linear_z = Linear(c_hidden, c_z, init="final")
        self.layer_norm_in = LayerNorm(c_z)
        self.layer_norm_out = LayerNorm(c_hidden)
        self.sigmoid = nn.Sigmoid()

    def _combine_projections(self, a, b):
        # outgoing: p[c, i, j] = sum_k a[i, k, c] b[j, k, c]; incoming: sum_k a[k, i, c] b[k, j, c]
        if self._outgoing:
            a, b = permute_final_dims(a, (2, 0, 1)), permute_final_dims(b, (2, 1, 0))
        else:
            a, b = permute_final_dims(a, (2, 1, 0)), permute_final_dims(b, (2, 0, 1))
        return permute_final_dims(torch.matmul(a, b), (1, 2, 0))

    def _finish(self, z, a, b):
        if is_fp16_enabled() and a.std() != 0.0 and b.std() != 0.0:  # against fp16 overflow in the product
            a, b = a / a.std(), b / b.std()
        if is_fp16_enabled():
            with torch.autocast("cuda", enabled=False):
                x = self._combine_projections(a.float(), b.float())
        else:
            x = self._combine_projections(a, b)
        x = self.linear_z(self.layer_norm_out(x))
        return x * self.sigmoid(self.linear_g(z))

    def forward(self, z: torch.Tensor, mask: Optional[torch.Tensor] = None, inplace_safe: bool = False,
                _add_with_inplace: bool = False, _inplace_chunk_size: Optional[int] = 256) -> torch.Tensor:
        if inplace_safe:
            raise NotImplementedError("the port has no in-place inference path")
        if mask is None:
            mask = z.new_ones(z.shape[:-1])
        z = self.layer_norm_in(z)
        a, b = self._projections(z, mask.unsqueeze(-1))
        return self._finish(z, a, b)


class TriangleMultiplicativeUpdate(BaseTriangleMultiplicativeUpdate):
    def __init__(self, c_z, c_hidden, _outgoing=True):
        super().__init__(c_z, c_hidden, _outgoing)
        self.linear_a_p = Linear(c_z, c_hidden)
        self.linear_a_g = Linear(c_z, c_hidden, init="gating")
        self.linear_b_p = Linear(c_z, c_hidden)
        self.linear_b_g = Linear(c_z, c_hidden, init="gating")

    def _projections(self, z, mask):
        a = mask * self.sigmoid(self.linear_a_g(z)) * self.linear_a_p(z)
        b = mask * self.sigmoid(self.linear_b_g(z)) * self.linear_b_p(z)
        return a, b


class TriangleMultiplicationOutgoing(TriangleMultiplicativeUpdate):
    __init__ = partialmethod(TriangleMultiplicativeUpdate.__init__, _outgoing=True)


class TriangleMultiplicationIncoming(TriangleMultiplicativeUpdate):
    __init__ = partialmethod(TriangleMultiplicativeUpdate.__init__, _outgoing=False)


class FusedTriangleMultiplicativeUpdate(BaseTriangleMultiplicativeUpdate):
    def __init__(self, c_z, c_hidden, _outgoing=True):
        super().__init__(c_z, c_hidden, _outgoing)
        self.linear_ab_p = Linear(c_z, c_hidden * 2)
        self.linear_ab_g = Linear(c_z, c_hidden * 2, init="gating")

    def _projections(self, z, mask):
        ab = mask * self.sigmoid(self.linear_ab_g(z)) * self.linear_ab_p(z)
        return ab[..., : self.c_hidden], ab[..., self.c_hidden:]


class FusedTriangleMultiplicationOutgoing(FusedTriangleMultiplicativeUpdate):
    __init__ = partialmethod(FusedTriangleMultiplicativeUpdate.__init__, _outgoing=True)


class FusedTriangleMultiplicationIncoming(FusedTriangleMultiplicativeUpdate):
    __init__ = partialmethod(FusedTriangleMultiplicativeUpdate.__init__, _outgoing=False)
