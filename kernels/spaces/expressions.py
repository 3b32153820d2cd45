"""Constraint expressions: a small, safe subset of Python over named numbers (arithmetic, comparisons,
boolean logic, a few functions), parsed once and evaluated, or partially evaluated (shape and device
names replaced by numbers) for tools such as Kernel Tuner whose restrictions may only name tunable
parameters; a dotted name (``fwd.block_m``) is a parameter of one section of a sectioned config.
Spaces and templates state validity this way so that any tool can read it.
"""

from __future__ import annotations

import ast
import functools
import math
from types import SimpleNamespace
from typing import Any

def next_pow2(x: int) -> int:
    """The smallest power of two >= x (1 for x <= 1)."""
    return 1 << max(0, int(math.ceil(x)) - 1).bit_length()


FUNCTIONS = {"min": min, "max": max, "ceil": math.ceil, "floor": math.floor, "abs": abs, "next_pow2": next_pow2}
_ALLOWED = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Name, ast.Load,
    ast.Constant, ast.Call, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
    ast.USub, ast.UAdd, ast.Not, ast.And, ast.Or, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE,
    ast.Attribute,
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
        if isinstance(node, ast.Attribute) and not isinstance(node.value, ast.Name):
            raise ExpressionError(f"only one dot (section.parameter) is allowed in {expr!r}")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS):
            raise ExpressionError(f"only {sorted(FUNCTIONS)} may be called in {expr!r}")
    return tree


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


@functools.lru_cache(maxsize=None)
def names(expr: str) -> frozenset[str]:
    """Every name the expression reads (dotted ones whole), functions left out."""
    tree = parse(expr)
    inner = {id(n.value) for n in ast.walk(tree) if _dotted(n)}
    found = {_dotted(n) for n in ast.walk(tree) if _dotted(n)}
    found |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in inner and n.id not in FUNCTIONS}
    return frozenset(found)


@functools.lru_cache(maxsize=None)
def _compiled(expr: str):
    return compile(parse(expr), f"<constraint {expr}>", "eval")


def _scope(values: dict[str, Any]) -> dict[str, Any]:
    """Dotted names as attributes of one namespace per section."""
    scope: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        if "." in key:
            section, name = key.split(".", 1)
            sections.setdefault(section, {})[name] = value
        else:
            scope[key] = value
    scope.update({s: SimpleNamespace(**v) for s, v in sections.items()})
    return scope


def evaluate(expr: str, values: dict[str, Any]) -> Any:
    missing = names(expr).difference(values)
    if missing:
        raise ExpressionError(f"{expr!r} needs values for {sorted(missing)}")
    return eval(_compiled(expr), {"__builtins__": {}, **FUNCTIONS}, _scope(values))  # noqa: S307 - checked AST


class _Rewrite(ast.NodeTransformer):
    """Replace names (dotted or not) by constants or by other names."""

    def __init__(self, values: dict[str, Any], renames: dict[str, str]):
        self.values, self.renames = values, renames

    def _replace(self, name: str, node: ast.AST) -> ast.AST:
        if name in self.values:
            return ast.copy_location(ast.Constant(self.values[name]), node)
        if name in self.renames:
            return ast.copy_location(ast.parse(self.renames[name], mode="eval").body, node)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        name = _dotted(node)
        return self._replace(name, node) if name else self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return self._replace(node.id, node)


def _rewrite(expr: str, values: dict[str, Any], renames: dict[str, str]) -> str:
    tree = _Rewrite(values, renames).visit(ast.parse(expr, mode="eval"))
    return ast.unparse(ast.fix_missing_locations(tree))


def substitute(expr: str, values: dict[str, Any]) -> str:
    """The expression with the given names replaced by their values (as literals)."""
    return _rewrite(expr, values, {})


def rename(expr: str, renames: dict[str, str]) -> str:
    """The expression with names replaced by others: ``{"block_m": "fwd.block_m"}`` qualifies a
    section's names, ``{"fwd.block_m": "fwd__block_m"}`` makes them identifiers."""
    return _rewrite(expr, {}, renames)


def sides(expr: str, values: dict[str, Any]) -> tuple[str, Any, str, Any] | None:
    """(left text, its value, operator, right value) of a one-operator comparison, to say by how
    much it fails; None for any other expression."""
    body = parse(expr).body
    if not (isinstance(body, ast.Compare) and len(body.ops) == 1):
        return None
    symbols = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
    left, right = ast.unparse(body.left), ast.unparse(body.comparators[0])
    return left, evaluate(left, values), symbols[type(body.ops[0])], evaluate(right, values)
