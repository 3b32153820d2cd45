"""Numerical checks shared by the correctness tests.

The error-ratio rule (FlashAttention's tests): our result's error against a
float64 reference must be at most ``ratio`` times the error of the framework's
own computation at the same low precision, plus a small ``atol``. NaN never passes.
"""

from __future__ import annotations

import zlib

import torch


def stable_seed(*parts) -> int:
    """A seed from ``parts`` that every process agrees on: ``hash`` of a string is salted per
    process (PYTHONHASHSEED), so a seed taken from it gives each test run other inputs."""
    return zlib.crc32(repr(parts).encode())


def max_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    return (x.double() - ref.double()).abs().max().item() if x.numel() else 0.0


def assert_close_by_ratio(ours: torch.Tensor, framework: torch.Tensor, ref: torch.Tensor, *, ratio: float = 2.0,
                          atol: float = 1e-5, atol_scaled: bool = False, name: str = "output") -> None:
    """``atol_scaled`` measures ``atol`` in units of the reference's magnitude (max |ref|, at least 1),
    for results whose scale grows with the problem (gradients summed over long axes)."""
    if atol_scaled and ref.numel():
        atol *= max(1.0, ref.abs().max().item())
    assert ours.shape == ref.shape, f"{name}: shape {tuple(ours.shape)} != reference {tuple(ref.shape)}"
    assert not torch.isnan(ours).any(), f"{name}: NaN in result"
    assert torch.isfinite(ours).all(), f"{name}: non-finite values in result"
    ours_err = max_error(ours, ref)
    base_err = max_error(framework, ref)
    assert ours_err <= ratio * base_err + atol, (
        f"{name}: error {ours_err:.3g} exceeds {ratio} x framework error {base_err:.3g} + {atol:g}"
    )


def assert_close(ours: torch.Tensor, ref: torch.Tensor, *, rtol: float, atol: float, name: str = "output") -> None:
    assert ours.shape == ref.shape, f"{name}: shape {tuple(ours.shape)} != reference {tuple(ref.shape)}"
    assert not torch.isnan(ours).any(), f"{name}: NaN in result"
    torch.testing.assert_close(ours.double(), ref.double(), rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")
