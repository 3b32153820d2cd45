"""What the tests, ``ceiling run``'s smoke checks and the benchmarks' correctness gate share: the
error-ratio rule with its one tolerance policy (:mod:`~ceiling.testing.numerics`), and the NaN and
Inf contract every op holds on every backend, with each op's float32 math
(:mod:`~ceiling.testing.propagation`)."""
