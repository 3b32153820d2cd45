"""The tuning sweeps behind ``kernels/nvidia/tables/sm_90a/attention.json`` (Hopper) and
``kernels/nvidia/tables/H200/triangle_attention.json``: every statically checked candidate of each
kernel checked against float32 in parallel workers, then timed on this GPU by CUDA-graph replay next
to the baseline, and the fastest kept (``problems``, ``checks``, ``sweep``, ``results``; ``gluon`` is
the Gluon attention's sweep). The steps and what each module holds are in ``docs/tuning.md``.
"""
