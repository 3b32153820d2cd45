"""What the tests, ``ceiling run``'s smoke checks and the benchmarks' correctness gate share: the
error-ratio rule with its one tolerance policy (:mod:`~ceiling.testing.numerics`)."""
