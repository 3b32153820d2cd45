"""TPU kernels in JAX Pallas (Mosaic TPU)."""
