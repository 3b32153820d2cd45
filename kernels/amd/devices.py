"""What an AMD kernel's launch needs to know of the device it runs on, beyond its compile target:
the number of XCDs (the dies a CDNA3 part's workgroups are dealt out over, round robin) and of
compute units (what split-K fills) per device model, matched by name ("AMD Instinct MI300A" ->
MI300A), MI300X's off a GPU (the compile target's default device)."""

from __future__ import annotations

DEFAULT = "MI300X"
XCDS = {
    "MI300X": 8,
    "MI325X": 8,  # the same CDNA3 die with more HBM
    "MI300A": 6,  # the APU: six XCDs beside the CPU dies
    "MI355X": 8,  # CDNA4: eight XCDs of 32 CUs (amd.com, AMD Instinct MI355X)
    "MI350X": 8,
}
CUS = {"MI300X": 304, "MI325X": 304, "MI300A": 228, "MI355X": 256, "MI350X": 256}


def model(gpu: str | None) -> str:
    """The device model a GPU name names, the default one off a GPU or for a model not listed."""
    return next((key for key in XCDS if gpu and key.lower() in gpu.lower()), DEFAULT)


def num_xcds(gpu: str | None) -> int:
    return XCDS[model(gpu)]


def num_cus(gpu: str | None) -> int:
    return CUS[model(gpu)]
