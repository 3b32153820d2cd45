"""Port of openfold/utils/tensor_utils.py (the two helpers the pair-stack layers use)."""

import torch


def permute_final_dims(tensor: torch.Tensor, inds):
    """Permute the last ``len(inds)`` dimensions by ``inds``, keeping the leading ones in place."""
    lead = tensor.dim() - len(inds)
    return tensor.permute(*range(lead), *(lead + i for i in inds))


def flatten_final_dims(t: torch.Tensor, no_dims: int):
    return t.reshape(t.shape[:-no_dims] + (-1,))
