"""Float constants the kernels and their host code share, each written once here. A Triton or
Gluon kernel reads one as a compile-time constant made from it (``tl.constexpr(LOG2E)``)."""

LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * LOG2E), the softmax in base 2
LN2 = 0.6931471805599453  # ln(2): log(x) = log2(x) * LN2, a base-2 log-sum-exp back to natural log
SQRT1_2 = 0.7071067811865476  # 1/sqrt(2): the exact gelu, x * (1 + erf(x * SQRT1_2)) / 2
