# The benchmark files' options (--benchmark, --benchmark-shapes) and parametrization.
pytest_plugins = ["microbench.benchmarks.pytest_plugin"]
