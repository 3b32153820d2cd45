"""Constraint expressions: a small, safe subset of Python over named numbers.

Templates state validity as plain expressions (``"(BLOCK_M*BLOCK_K +
BLOCK_K*BLOCK_N)*dtype_bytes*num_stages <= smem_per_block"``) so that any tool
can read them. Here they are parsed once, checked to use only arithmetic,
comparisons, boolean logic and a few functions, and evaluated; or partially
evaluated (shape and device names replaced by numbers) for tools such as Kernel
Tuner whose restrictions may only mention tunable parameters.
"""

from __future__ import annotations

import ast
import functools
import math
from typing import Any

FUNCTIONS = {"min": min, "max": max, "ceil": math.ceil, "floor": math.floor, "abs": abs}
_ALLOWED = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Name, ast.Load,
    ast.Constant, ast.Call, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
    ast.USub, ast.UAdd, ast.Not, ast.And, ast.Or, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE,
)


class ExpressionError(ValueError):
    pass


@functools.lru_cache(maxsize=None)
def parse(expr: str) -> ast.Expression:
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"not an expression: {expr!r} ({exc.msg})") from exc
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise ExpressionError(f"{type(node).__name__} is not allowed in {expr!r}")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS):
            raise ExpressionError(f"only {sorted(FUNCTIONS)} may be called in {expr!r}")
    return tree


@functools.lru_cache(maxsize=None)
def names(expr: str) -> frozenset[str]:
    return frozenset(n.id for n in ast.walk(parse(expr)) if isinstance(n, ast.Name) and n.id not in FUNCTIONS)


@functools.lru_cache(maxsize=None)
def _compiled(expr: str):
    return compile(parse(expr), f"<constraint {expr}>", "eval")


def evaluate(expr: str, values: dict[str, Any]) -> Any:
    missing = names(expr).difference(values)
    if missing:
        raise ExpressionError(f"{expr!r} needs values for {sorted(missing)}")
    return eval(_compiled(expr), {"__builtins__": {}, **FUNCTIONS}, dict(values))  # noqa: S307 - checked AST


def substitute(expr: str, values: dict[str, Any]) -> str:
    """The expression with the given names replaced by their values (as literals)."""

    class _Replace(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            if node.id in values:
                return ast.copy_location(ast.Constant(values[node.id]), node)
            return node

    tree = _Replace().visit(ast.parse(expr, mode="eval"))
    return ast.unparse(ast.fix_missing_locations(tree))
