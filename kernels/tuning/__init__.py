"""Tuning, one layer above the kernels: the sweeps that produce the config tables (``gemm``,
``gemm_fp8``, ``attention``, the Gluon attention's ``attention.gluon``, ``trimul``) and the static
candidate filter (``space``). Their timers (``ceiling.timers``) and the ``config="autotune"``
cache (``ceiling.autotune``) are the kernels layer's, which never imports this package; ``ceiling
tune`` does.
"""
