"""One Boltz-2 PairformerLayer's pair stack, forward + backward, patched with ceiling.triangle against
Boltz eager, torch.compile and cuEquivariance (Boltz's use_kernels=True).

``pytest tests/bench --benchmark`` on a GPU; without ``--benchmark`` a smoke test on the tiny
suite on the CPU. The cases come from ``ceiling.microbench.benchmarks.pair_stack``; they need Boltz
(``pip install --no-deps boltz==2.2.1 einops``): without it the benchmark is skipped with that
command, and the test below fails where ``CEILING_REQUIRE_BOLTZ=1`` (CI).
"""

from tests.model_sources import require_boltz

OP = "pair_stack"


def test_pair_stack(benchmark, bench_case, bench_impl, bench_run):
    bench_run(benchmark, bench_case, bench_impl)


def test_boltz_is_installed_for_the_pair_stack_benchmark():
    require_boltz()
