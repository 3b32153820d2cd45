"""Port of openfold/utils/precision_utils.py."""

import torch


def is_fp16_enabled():
    """True under CUDA autocast to float16."""
    return torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") == torch.float16
