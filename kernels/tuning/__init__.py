"""Tuning, one layer above the kernels: the sweeps that produce the config tables (``gemm``,
``gemm_fp8``, ``attention``, the Gluon attention's ``attention.gluon``, ``trimul``), their timers
(``timers``), the static candidate filter (``space``) and the ``config="autotune"`` cache of the
Hopper GEMM (``autotune``).

The kernels (``kernels/{triton,nvidia,amd,tpu,trainium}``) never import this package; the op
front ends (``kernels.gemm.torch_op`` for ``config="autotune"``) and ``ceiling tune`` do.
"""
