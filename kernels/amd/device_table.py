"""AMD config tables keyed by device name.

Each AMD op keeps its tuned configs in one JSON file (``kernels/amd/configs/<op>.json``) with a
``devices`` map and a ``default_device`` (the compile target off-device). A device entry may name
another in ``inherits`` (MI325X is an MI300X with more memory), so only what differs is written.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

from kernels.errors import InputError


@functools.cache
def load(path: Path) -> dict:
    """The table at ``path``, read once."""
    return json.loads(path.read_text())


def device_entry(path: Path, device: str) -> dict:
    """The entry of ``device`` in the table at ``path``, with ``inherits`` resolved (child keys win)."""
    devices = load(path)["devices"]
    if device not in devices:
        raise InputError("device", f"one of {sorted(devices)}", repr(device))
    entry = dict(devices[device])
    parent = entry.pop("inherits", None)
    if parent is None:
        return entry
    merged = device_entry(path, parent)
    merged.update(entry)
    return merged


@functools.cache
def current_device(path: Path) -> str:
    """The table's key for the visible AMD GPU; its ``default_device`` off-device."""
    if torch.cuda.is_available() and getattr(torch.version, "hip", None):
        name = torch.cuda.get_device_name()
        for key in load(path)["devices"]:
            if key in name:
                return key
    return load(path)["default_device"]
