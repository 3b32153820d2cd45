"""``torch.nn.Module`` drop-ins for Boltz's and OpenFold's pair-stack layers
(:class:`TriangleMultiplication`, :class:`TriangleAttention`): each loads either family's state dict
strictly and takes the forward arguments of the layer it replaces. The parameter names, which
projections have biases and which arguments are honoured are in ``docs/triangle.md``; what padded
positions get is in ``CONVENTIONS.md``.
"""

from __future__ import annotations

import math
from collections.abc import Collection

import torch
import torch.nn.functional as F
from torch import nn

from ceiling.triangle.ops import triangle_attention, triangle_multiplicative_update

TRIMUL_PROJECTIONS = ("p_in", "g_in", "p_out", "g_out")
ATTENTION_PROJECTIONS = ("linear", "mha.linear_q", "mha.linear_k", "mha.linear_v", "mha.linear_o", "mha.linear_g")
# The projections OpenFold gives a bias (bias=True); Boltz gives none (bias=False).
OPENFOLD_BIASES = {"trimul": TRIMUL_PROJECTIONS, "attention": ("mha.linear_o", "mha.linear_g")}

# OpenFold TriangleMultiplicativeUpdate names -> Boltz's (prefixes of the state-dict keys).
_OPENFOLD_TRIMUL = {
    "layer_norm_in.": "norm_in.",
    "layer_norm_out.": "norm_out.",
    "linear_z.": "p_out.",
    "linear_g.": "g_out.",
    "linear_ab_p.": "p_in.",  # FusedTriangleMultiplicativeUpdate: a and b already stacked
    "linear_ab_g.": "g_in.",
}


def _biased(bias: bool | Collection[str], family: str, names: tuple[str, ...]) -> frozenset[str]:
    chosen = OPENFOLD_BIASES[family] if bias is True else () if bias is False else tuple(bias)
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        raise ValueError(f"bias: expected True, False or names among {names}, got {unknown}")
    return frozenset(chosen)


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The autocast dtype when autocast is on for x's device (float64 stays float64), else x's dtype."""
    kind = x.device.type
    if x.dtype != torch.float64 and torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return x.dtype


def _linear(t: torch.Tensor, layer: nn.Linear, dtype: torch.dtype) -> torch.Tensor:
    bias = None if layer.bias is None else layer.bias.to(dtype)
    return F.linear(t.to(dtype), layer.weight.to(dtype), bias)


def swap_ab_halves(t: torch.Tensor) -> torch.Tensor:
    """[a; b] -> [b; a] along dimension 0 (the 2c output rows of p_in / g_in)."""
    c = t.shape[0] // 2
    return torch.cat([t[c:], t[:c]], dim=0)


def openfold_to_boltz_trimul(state: dict, prefix: str = "") -> dict:
    """Rewrite OpenFold (fused or not) TriangleMultiplicativeUpdate keys under ``prefix`` to Boltz's.

    A dict that has no OpenFold keys comes back unchanged. The unfused a and b
    projections are stacked into new tensors; every other tensor is passed on as it is."""
    out = dict(state)
    for kind in ("p", "g"):
        for field in ("weight", "bias"):
            a_key, b_key = f"{prefix}linear_a_{kind}.{field}", f"{prefix}linear_b_{kind}.{field}"
            if a_key in out and b_key in out:
                with torch.no_grad():
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

    ``forward(x, mask=None)`` with x (*, N, N, c_z) and mask (*, N, N); Boltz's
    ``use_kernels`` and OpenFold's ``inplace_safe``, ``_add_with_inplace`` and
    ``_inplace_chunk_size`` are accepted as keywords (see ``docs/triangle.md``).
    """

    def __init__(self, c_z: int = 128, c_hidden: int | None = None, direction: str = "outgoing",
                 bias: bool | Collection[str] = False, eps: float = 1e-5, backend: str | None = None, *,
                 device=None, dtype=None):
        super().__init__()
        if direction not in ("outgoing", "incoming"):
            raise ValueError(f"direction: expected 'outgoing' or 'incoming', got {direction!r}")
        biased = _biased(bias, "trimul", TRIMUL_PROJECTIONS)
        c = c_hidden or c_z
        self.c_z, self.c_hidden, self.direction, self.eps, self.backend = c_z, c, direction, eps, backend
        f = {"device": device, "dtype": dtype}
        self.norm_in = nn.LayerNorm(c_z, eps=eps, **f)
        self.p_in = nn.Linear(c_z, 2 * c, bias="p_in" in biased, **f)
        self.g_in = nn.Linear(c_z, 2 * c, bias="g_in" in biased, **f)
        self.norm_out = nn.LayerNorm(c, eps=eps, **f)
        self.p_out = nn.Linear(c, c_z, bias="p_out" in biased, **f)
        self.g_out = nn.Linear(c_z, c_z, bias="g_out" in biased, **f)
        self._register_load_state_dict_pre_hook(self._accept_openfold)

    @staticmethod
    def _accept_openfold(state_dict, prefix, *args):
        converted = openfold_to_boltz_trimul(state_dict, prefix)
        state_dict.clear()
        state_dict.update(converted)

    @classmethod
    def from_state_dict(cls, state: dict, direction: str, *, alphafold3_incoming: bool = False, eps: float = 1e-5,
                        backend: str | None = None, assign: bool = False) -> "TriangleMultiplication":
        """A module with the widths and biases that ``state`` (Boltz or OpenFold keys) implies, loaded
        strictly, on the device and in the dtype of its ``p_in`` weight. ``assign=True`` makes the
        module hold ``state``'s tensors themselves (``load_state_dict(assign=True)``)."""
        state = openfold_to_boltz_trimul(state)
        weight = state["p_in.weight"]
        c2, c_z = weight.shape
        biased = [name for name in TRIMUL_PROJECTIONS if f"{name}.bias" in state]
        module = cls(c_z, c2 // 2, direction, bias=biased, eps=eps, backend=backend, device=weight.device,
                     dtype=weight.dtype)
        if alphafold3_incoming:
            state = {k: swap_ab_halves(v) if k.split(".")[0] in ("p_in", "g_in") else v for k, v in state.items()}
        module.load_state_dict(state, strict=True, assign=assign)
        return module

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, *, use_kernels: bool = False,
                inplace_safe: bool = False, _add_with_inplace: bool = False,
                _inplace_chunk_size: int | None = None) -> torch.Tensor:
        def bias(linear):
            return linear.bias

        update = triangle_multiplicative_update(
            x.to(compute_dtype(x)), self.direction, mask,
            norm_in_weight=self.norm_in.weight, norm_in_bias=self.norm_in.bias,
            p_in_weight=self.p_in.weight, p_in_bias=bias(self.p_in),
            g_in_weight=self.g_in.weight, g_in_bias=bias(self.g_in),
            norm_out_weight=self.norm_out.weight, norm_out_bias=self.norm_out.bias,
            p_out_weight=self.p_out.weight, p_out_bias=bias(self.p_out),
            g_out_weight=self.g_out.weight, g_out_bias=bias(self.g_out),
            eps=self.eps, backend=self.backend,
        )
        if inplace_safe and _add_with_inplace:  # OpenFold's contract: x is overwritten with x + update
            return x.add_(update.to(x.dtype))
        return update


class _GatedAttentionWeights(nn.Module):
    """The parameters of Boltz's and OpenFold's gated ``Attention``, under the names their state dicts use."""

    def __init__(self, c_in: int, c_hidden: int, heads: int, biased: frozenset[str], factory: dict):
        super().__init__()
        width = c_hidden * heads
        self.linear_q = nn.Linear(c_in, width, bias="mha.linear_q" in biased, **factory)
        self.linear_k = nn.Linear(c_in, width, bias="mha.linear_k" in biased, **factory)
        self.linear_v = nn.Linear(c_in, width, bias="mha.linear_v" in biased, **factory)
        self.linear_o = nn.Linear(width, c_in, bias="mha.linear_o" in biased, **factory)
        self.linear_g = nn.Linear(c_in, width, bias="mha.linear_g" in biased, **factory)


class TriangleAttention(nn.Module):
    """AlphaFold 3 Algorithm 14 (``starting=True``) or 15 (``starting=False``).

    ``forward(x, mask=None, chunk_size=None)`` with x (*, N, N, c_in) and mask (*, N, N),
    bool or any real dtype (nonzero = valid); Boltz's ``use_kernels`` and OpenFold's
    ``use_memory_efficient_kernel``, ``use_deepspeed_evo_attention``, ``use_lma`` and
    ``inplace_safe`` are accepted as keywords and ignored. The ending node is the
    starting node on the transposed pair tensor (x and mask transposed before, the
    output transposed back), as in OpenFold and Boltz. ``inf`` is accepted for their
    constructor's signature; masked keys are left out of the softmax exactly instead.
    A row with no valid key gives ``mha.linear_o``'s bias (see ``CONVENTIONS.md``).
    """

    def __init__(self, c_in: int = 128, c_hidden: int = 32, no_heads: int = 4, starting: bool = True,
                 inf: float = 1e9, *, bias: bool | Collection[str] = True, eps: float = 1e-5,
                 backend: str | None = None, device=None, dtype=None):
        super().__init__()
        biased = _biased(bias, "attention", ATTENTION_PROJECTIONS)
        self.c_in, self.c_hidden, self.no_heads, self.starting, self.inf = c_in, c_hidden, no_heads, starting, inf
        self.backend = backend
        factory = {"device": device, "dtype": dtype}
        self.layer_norm = nn.LayerNorm(c_in, eps=eps, **factory)
        self.linear = nn.Linear(c_in, no_heads, bias="linear" in biased, **factory)
        self.mha = _GatedAttentionWeights(c_in, c_hidden, no_heads, biased, factory)

    @classmethod
    def from_state_dict(cls, state: dict, starting: bool = True, *, eps: float = 1e-5, backend: str | None = None,
                        assign: bool = False) -> "TriangleAttention":
        """A module with the width, heads and biases that ``state`` (Boltz or OpenFold) implies, loaded
        strictly, on the device and in the dtype of its ``layer_norm`` weight; ``assign`` as in
        :meth:`TriangleMultiplication.from_state_dict`."""
        weight = state["layer_norm.weight"]
        heads = state["linear.weight"].shape[0]
        width = state["mha.linear_q.weight"].shape[0]
        if width % heads:
            raise ValueError(f"state: mha.linear_q has {width} rows, not a multiple of the {heads} heads of 'linear'")
        biased = [name for name in ATTENTION_PROJECTIONS if f"{name}.bias" in state]
        module = cls(weight.shape[0], width // heads, heads, starting, bias=biased, eps=eps, backend=backend,
                     device=weight.device, dtype=weight.dtype)
        module.load_state_dict(state, strict=True, assign=assign)
        return module

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, chunk_size: int | None = None, *,
                use_kernels: bool = False, use_memory_efficient_kernel: bool = False,
                use_deepspeed_evo_attention: bool = False, use_lma: bool = False,
                inplace_safe: bool = False) -> torch.Tensor:
        if not self.starting:
            x = x.transpose(-2, -3)
            mask = None if mask is None else mask.transpose(-1, -2)
        *lead, N, _, C = x.shape
        B, H, c = math.prod(lead), self.no_heads, self.c_hidden
        dtype = compute_dtype(x)
        ln = self.layer_norm  # in x's own dtype: under autocast a float32 x is normalized in float32
        x = F.layer_norm(x.reshape(B, N, N, C), (C,), ln.weight.to(x.dtype), ln.bias.to(x.dtype), ln.eps)
        bias = _linear(x, self.linear, dtype).float().permute(0, 3, 1, 2).unsqueeze(1)  # (B, 1, H, N, N)

        def heads(t):  # (B, I, J, H*c) -> (B, I, H, J, c)
            return t.view(B, N, N, H, c).transpose(2, 3).contiguous()

        q, k, v = (heads(_linear(x, layer, dtype)) for layer in (self.mha.linear_q, self.mha.linear_k, self.mha.linear_v))
        key_mask = None if mask is None else mask.reshape(B, N, 1, 1, N)
        o = triangle_attention(q, k, v, bias, key_mask, scale=1.0 / math.sqrt(c), backend=self.backend)
        o = o.transpose(2, 3).reshape(B, N, N, H * c) * torch.sigmoid(_linear(x, self.mha.linear_g, dtype))
        out = _linear(o, self.mha.linear_o, dtype).reshape(*lead, N, N, C)
        return out.transpose(-2, -3) if not self.starting else out
