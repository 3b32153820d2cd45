"""Triton kernels that NVIDIA and AMD both run, parametrized by the options that differ per target (TMA
or pointer loads, launch options); no vendor's config table lives here. The modules: ``attention``,
``triangle_attention``, ``triangle_multiplication`` (and their ``*_jax`` wrappers); ``fp8_quantize``
(the FP8 quantizers behind ``ceiling.fp8.quantize``) and ``fp8_scales`` (the scale kinds of
``ceiling.scaled_gemm`` applied inside a GEMM kernel).
"""
