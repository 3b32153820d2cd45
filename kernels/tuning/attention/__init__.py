"""The tuning sweeps behind ``kernels/nvidia/tables/sm_90a/attention.json`` (Hopper) and
``kernels/nvidia/tables/H200/triangle_attention.json``: time every statically checked candidate
(``ceiling.tuning.space``) of each kernel on this GPU, next to the baseline, and pick the fastest.

One run fits a lease of minutes:

1. **Compile and check in parallel.** A pool of worker processes (``spawn``) launches each
   candidate once on a small problem with the same Triton specialization as the timed one (same
   heads and head dim, lengths multiples of 16), so Triton's on-disk cache then holds every
   binary the timing needs, and compares its output with a float32 reference: a candidate whose
   error exceeds twice the error of the framework's own bf16 computation (plus a small floor) is
   dropped before it is timed.
2. **Time in one process.** CUDA-graph replay (``triton.testing.do_bench_cudagraph``, median and
   p20/p80) of the forward and of each backward kernel alone (the preprocess included, as it
   runs before either), per group in priority order, until ``budget_s`` is spent. The causal
   groups (and triangle N = 768) time only the fastest few of their base group plus the shipped
   config, since the ranking carries over and their compiles already ran in step 1.
3. **Baselines.** SDPA (forward by graph replay, backward by ``triton.testing.do_bench`` through
   autograd, which graph capture does not take), the eager triangle attention likewise, and our
   whole backward at the winners by the same method as the baseline's, so the speedup column
   compares like with like.

Rows are plain dicts (JSON). The modules, one job each:

* ``problems``: the groups (problem shapes), the shipped config and candidate list of each kernel,
  inputs, one candidate's launch, FLOP counts;
* ``checks``: float32 and framework references, the error check, the worker-side candidate check;
* ``sweep``: the loop of steps 1-3 (:class:`~ceiling.tuning.attention.sweep.Sweep`);
* ``results``: winners per group and kernel, speedups, and ``apply_*``, which write the winners
  into the tables with the provenance the caller measured.

``gluon`` is the device sweep of the Gluon Hopper attention (``kernels/nvidia/gluon/``): its
candidates held to the Gluon design by SASS, each checked against float64 and timed next to the
Triton kernels, applied (to the GPU model's ``attention_gluon`` table) only where it wins.
"""
