"""A drop-in for ``torch.nn.functional.scaled_dot_product_attention`` on ``ceiling.attention``:
the same arguments, layout and semantics (its differences: :func:`scaled_dot_product_attention`)."""

from __future__ import annotations

import torch

from ceiling.errors import InputError


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    backend: str | None = None,
    config: dict | None = None,
) -> torch.Tensor:
    """PyTorch's SDPA on the attention kernels. Same arguments and layout, (batch, heads, seq,
    head_dim) (or (heads, seq, head_dim) without a batch), same semantics:

    * ``attn_mask``: boolean (True = take part in attention) or a float mask added to the
      scores; broadcastable to (batch, heads, q_len, k_len). A float mask gets a gradient.
    * ``is_causal``: the lower-triangular mask aligned to the top left, as PyTorch does it
      (``ceiling.attention`` aligns it to the bottom right; the two agree when q_len == k_len,
      and otherwise the top-left mask is passed as a boolean mask).
    * ``enable_gqa``: lets key/value have fewer heads than query (dividing it).
    * ``dropout_p`` must be 0: the kernels have no dropout.

    One difference: a query row with nothing to attend to gives 0 here, where PyTorch gives NaN.
    The transposed views go to the kernels without a copy (they take strides).
    """
    from ceiling.attention import attention

    if dropout_p != 0.0:
        raise InputError("dropout_p", "0.0 (the attention kernels have no dropout)", repr(dropout_p))
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor) or t.dim() not in (3, 4):
            raise InputError(name, "a 3-D (heads, seq, head_dim) or 4-D (batch, heads, seq, head_dim) tensor",
                             f"{type(t).__name__} of shape {tuple(getattr(t, 'shape', ()))}")
    if not query.dim() == key.dim() == value.dim():
        raise InputError("key", f"{query.dim()} dimensions like query", f"{key.dim()}")
    if is_causal and attn_mask is not None:
        raise InputError("attn_mask", "None when is_causal=True (as in PyTorch)", "a mask")
    unbatched = query.dim() == 3
    if unbatched:
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
    if query.shape[1] != key.shape[1] and not enable_gqa:
        raise InputError("key", f"{query.shape[1]} heads like query (or enable_gqa=True)", f"{key.shape[1]} heads")

    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    q_len, k_len = q.shape[1], k.shape[1]
    bias = mask = None
    causal = False
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            mask = attn_mask
        else:
            bias = attn_mask
    if is_causal:
        if q_len == k_len:
            causal = True
        else:
            mask = torch.ones(q_len, k_len, dtype=torch.bool, device=query.device).tril()
    out = attention(q, k, v, causal=causal, scale=scale, bias=bias, mask=mask, backend=backend, config=config)
    out = out.transpose(1, 2)
    return out.squeeze(0) if unbatched else out
