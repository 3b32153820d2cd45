# The benchmark files' options (--benchmark, --benchmark-shapes) and parametrization.
pytest_plugins = ["ceiling.microbench.benchmarks.pytest_plugin"]
