"""Triton kernels that NVIDIA and AMD both run, parametrized by the options that differ per
target (TMA or pointer loads, launch options); no vendor's config table lives here."""
