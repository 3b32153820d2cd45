"""Static proofs about Triton kernels on a CPU: the compiler's IR for a GPU target, encoded symbolically
over a contract's whole domain of shapes and checked with z3 for bounds, integer overflow, races between
programs, output coverage and exact-once accumulation. Each answer is a :class:`Result`: proved, a
counterexample concrete enough to replay under the interpreter, or unknown with its reason."""

from ceiling.verify.result import Result, Status

__all__ = ["Result", "Status"]
