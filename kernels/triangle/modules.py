"""``torch.nn.Module`` drop-ins for the pair-stack layers, loading OpenFold/Boltz weights.

* :class:`TriangleMultiplication` has Boltz's parameter names (``norm_in``, ``p_in``,
  ``g_in``, ``norm_out``, ``p_out``, ``g_out``, as in Boltz's
  ``TriangleMultiplicationOutgoing``/``Incoming``), so a Boltz state dict loads as
  is. An OpenFold ``TriangleMultiplicationOutgoing``/``Incoming`` state dict
  (``layer_norm_in``, ``linear_a_p``, ``linear_a_g``, ``linear_b_p``, ``linear_b_g``,
  ``linear_g``, ``linear_z``, ``layer_norm_out``, all linears with biases) is
  rewritten on load: a and b projections are stacked into ``p_in``/``g_in``
  (a = first half), ``linear_z`` becomes ``p_out`` and ``linear_g`` ``g_out``.
* :class:`TriangleAttention` has OpenFold's (and Boltz's) names: ``layer_norm``,
  ``linear`` (the pair bias, no bias term), ``mha.linear_q/k/v`` (no bias),
  ``mha.linear_g`` and ``mha.linear_o`` (with bias).

:meth:`TriangleMultiplication.from_state_dict` infers the widths and biases from
the weights. For AlphaFold 3's released incoming-layer weights pass
``alphafold3_incoming=True`` (see CONVENTIONS.md): it swaps the a and b halves.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from kernels.triangle import triangle_attention, triangle_multiplicative_update

_OPENFOLD_TRIMUL = {
    "layer_norm_in.": "norm_in.",
    "layer_norm_out.": "norm_out.",
    "linear_z.": "p_out.",
    "linear_g.": "g_out.",
}


def swap_ab_halves(t: torch.Tensor) -> torch.Tensor:
    """[a; b] -> [b; a] along dimension 0 (the 2c output rows of p_in / g_in)."""
    c = t.shape[0] // 2
    return torch.cat([t[c:], t[:c]], dim=0)


def openfold_to_boltz_trimul(state: dict, prefix: str = "") -> dict:
    """Rewrite OpenFold TriangleMultiplicativeUpdate keys (under ``prefix``) to Boltz's."""
    out = dict(state)
    if prefix + "linear_a_p.weight" not in out:
        return out
    for kind in ("p", "g"):
        for field in ("weight", "bias"):
            a_key, b_key = f"{prefix}linear_a_{kind}.{field}", f"{prefix}linear_b_{kind}.{field}"
            if a_key in out:
                out[f"{prefix}{kind}_in.{field}"] = torch.cat([out.pop(a_key), out.pop(b_key)], dim=0)
    for key in list(out):
        if key.startswith(prefix):
            rest = key[len(prefix):]
            for old, new in _OPENFOLD_TRIMUL.items():
                if rest.startswith(old):
                    out[prefix + new + rest[len(old):]] = out.pop(key)
    return out


class TriangleMultiplication(nn.Module):
    """AlphaFold 3 Algorithm 12 (``direction="outgoing"``) or 13 (``"incoming"``).

    ``forward(x, mask=None)`` with x (B, N, N, c_z) and mask (B, N, N).
    """

    def __init__(self, c_z: int = 128, c_hidden: int | None = None, direction: str = "outgoing", bias: bool = False,
                 eps: float = 1e-5, backend: str | None = None):
        super().__init__()
        if direction not in ("outgoing", "incoming"):
            raise ValueError(f"direction: expected 'outgoing' or 'incoming', got {direction!r}")
        c = c_hidden or c_z
        self.direction, self.eps, self.backend = direction, eps, backend
        self.norm_in = nn.LayerNorm(c_z, eps=eps)
        self.p_in = nn.Linear(c_z, 2 * c, bias=bias)
        self.g_in = nn.Linear(c_z, 2 * c, bias=bias)
        self.norm_out = nn.LayerNorm(c, eps=eps)
        self.p_out = nn.Linear(c, c_z, bias=bias)
        self.g_out = nn.Linear(c_z, c_z, bias=bias)
        self._register_load_state_dict_pre_hook(self._accept_openfold)

    @staticmethod
    def _accept_openfold(state_dict, prefix, *args):
        converted = openfold_to_boltz_trimul(state_dict, prefix)
        state_dict.clear()
        state_dict.update(converted)

    @classmethod
    def from_state_dict(cls, state: dict, direction: str, *, alphafold3_incoming: bool = False, eps: float = 1e-5,
                        backend: str | None = None) -> "TriangleMultiplication":
        """A module with the widths and biases that ``state`` (Boltz or OpenFold keys) implies."""
        state = openfold_to_boltz_trimul(state)
        c2, c_z = state["p_in.weight"].shape
        module = cls(c_z, c2 // 2, direction, bias="p_in.bias" in state, eps=eps, backend=backend)
        if alphafold3_incoming:
            state = {k: swap_ab_halves(v) if k.split(".")[0] in ("p_in", "g_in") else v for k, v in state.items()}
        module.load_state_dict(state)
        return module.to(state["p_in.weight"].dtype)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        def b(linear):
            return linear.bias

        return triangle_multiplicative_update(
            x, self.direction, mask,
            norm_in_weight=self.norm_in.weight, norm_in_bias=self.norm_in.bias,
            p_in_weight=self.p_in.weight, p_in_bias=b(self.p_in), g_in_weight=self.g_in.weight, g_in_bias=b(self.g_in),
            norm_out_weight=self.norm_out.weight, norm_out_bias=self.norm_out.bias,
            p_out_weight=self.p_out.weight, p_out_bias=b(self.p_out),
            g_out_weight=self.g_out.weight, g_out_bias=b(self.g_out),
            eps=self.eps, backend=self.backend,
        )


class _GatedAttentionWeights(nn.Module):
    """OpenFold's ``Attention`` parameters (gating on): the names its state dict uses."""

    def __init__(self, c_in: int, c_hidden: int, heads: int):
        super().__init__()
        self.linear_q = nn.Linear(c_in, c_hidden * heads, bias=False)
        self.linear_k = nn.Linear(c_in, c_hidden * heads, bias=False)
        self.linear_v = nn.Linear(c_in, c_hidden * heads, bias=False)
        self.linear_o = nn.Linear(c_hidden * heads, c_in)
        self.linear_g = nn.Linear(c_in, c_hidden * heads)


class TriangleAttention(nn.Module):
    """AlphaFold 3 Algorithm 14 (``starting=True``) or 15 (``starting=False``).

    ``forward(x, mask=None)`` with x (B, N, N, c_in) and mask (B, N, N). The ending
    node is the starting node on the transposed pair tensor (x and mask transposed
    before, the output transposed back), as in OpenFold and Boltz. A row with no
    valid key gives zeros; OpenFold's additive -1e9 mask would give the mean of v
    there instead.
    """

    def __init__(self, c_in: int = 128, c_hidden: int = 32, no_heads: int = 4, starting: bool = True,
                 eps: float = 1e-5, backend: str | None = None):
        super().__init__()
        self.c_hidden, self.no_heads, self.starting, self.backend = c_hidden, no_heads, starting, backend
        self.layer_norm = nn.LayerNorm(c_in, eps=eps)
        self.linear = nn.Linear(c_in, no_heads, bias=False)
        self.mha = _GatedAttentionWeights(c_in, c_hidden, no_heads)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if not self.starting:
            x = x.transpose(-2, -3)
            mask = None if mask is None else mask.transpose(-1, -2)
        B, N, _, _ = x.shape
        H, c = self.no_heads, self.c_hidden
        x = self.layer_norm(x)
        bias = self.linear(x).float().permute(0, 3, 1, 2).unsqueeze(1)  # (B, 1, H, N, N)

        def heads(t):  # (B, I, J, H*c) -> (B, I, H, J, c)
            return t.view(B, N, N, H, c).transpose(2, 3).contiguous()

        q, k, v = heads(self.mha.linear_q(x)), heads(self.mha.linear_k(x)), heads(self.mha.linear_v(x))
        key_mask = None if mask is None else (mask > 0).view(B, N, 1, 1, N)
        o = triangle_attention(q, k, v, bias, key_mask, scale=1.0 / math.sqrt(c), backend=self.backend)
        o = o.transpose(2, 3).reshape(B, N, N, H * c) * torch.sigmoid(self.mha.linear_g(x))
        out = self.mha.linear_o(o)
        return out.transpose(-2, -3) if not self.starting else out
