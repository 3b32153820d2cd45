"""AMD kernels in Triton, tuned for CDNA3 (MI300X, gfx942)."""
