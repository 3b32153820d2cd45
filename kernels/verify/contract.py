"""A kernel's contract: which ``@triton.jit`` function, its grid, the domain of each integer argument, the
values of each constexpr, the assumptions, and each pointer argument's buffer (shape, strides, dtype,
whether it is an output). Read from TOML (``ceiling verify CONTRACT.toml``) or built in Python for the
project's kernels. Expressions are integers, names, ``+ - * // %``, parentheses, ``cdiv``, ``min``,
``max`` and, in conditions, comparisons with ``and``/``or``/``not``; they evaluate both to z3 terms and
to Python integers. A bad contract raises :class:`ceiling.InputError` naming the key."""

from __future__ import annotations

import ast
import importlib.util
import itertools
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import z3

from ceiling.verify.errors import ContractError
from ceiling.verify.ir import dtype_info

_FUNCS = ("cdiv", "min", "max")
_TOP_KEYS = {"kernel", "grid", "scalars", "sizes", "constexprs", "assume", "buffers", "contraction", "targets", "name"}


@dataclass(frozen=True)
class Expr:
    """A parsed expression and the key it came from (for errors)."""
    text: str
    tree: ast.AST
    key: str

    def names(self) -> set[str]:
        return {n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name) and n.id not in _FUNCS}

    def z3(self, env: dict):
        return _eval(self.tree, env, self.key, symbolic=True)

    def value(self, env: dict):
        return _eval(self.tree, env, self.key, symbolic=False)


def parse_expr(text, key: str, condition: bool = False) -> Expr:
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise ContractError(f"{key}: expected an integer or an expression, got {text!r}")
    try:
        tree = ast.parse(str(text), mode="eval").body
    except SyntaxError:
        raise ContractError(f"{key}: cannot parse {text!r}") from None
    allowed = (ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Call, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv,
               ast.Mod, ast.USub, ast.UAdd, ast.Load)
    if condition:
        allowed += (ast.Compare, ast.BoolOp, ast.And, ast.Or, ast.Not, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
    for node in ast.walk(tree):
        if not isinstance(node, allowed):
            raise ContractError(f"{key}: {type(node).__name__} is not allowed in {text!r}")
        if isinstance(node, ast.Constant) and (isinstance(node.value, bool) or not isinstance(node.value, int)):
            raise ContractError(f"{key}: only integers are allowed, got {node.value!r}")
        if isinstance(node, ast.Call) and (not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS
                                           or node.keywords or len(node.args) != 2):
            raise ContractError(f"{key}: calls are cdiv(a, b), min(a, b), max(a, b) in {text!r}")
    return Expr(str(text), tree, key)


def _eval(node, env, key, symbolic):
    def ev(n):
        return _eval(n, env, key, symbolic)

    if isinstance(node, ast.Constant):
        return z3.IntVal(node.value) if symbolic else node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise ContractError(f"{key}: unknown name {node.id!r}")
        v = env[node.id]
        return z3.IntVal(v) if symbolic and isinstance(v, int) else v
    if isinstance(node, ast.UnaryOp):
        v = ev(node.operand)
        if isinstance(node.op, ast.Not):
            return z3.Not(v) if symbolic else not v
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        a, b = ev(node.left), ev(node.right)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, ast.FloorDiv):
            return floordiv(a, b) if symbolic else a // b
        return a - b * floordiv(a, b) if symbolic else a % b
    if isinstance(node, ast.Call):
        a, b = (ev(x) for x in node.args)
        f = node.func.id
        if f == "cdiv":
            # (a + b - 1) // b: the form the kernels compute (tl.cdiv), so the solver sees one term
            if symbolic:
                return floordiv(a + b - 1, b) if z3.is_int_value(b) and b.as_long() > 0 else \
                    z3.If(b > 0, floordiv(a + b - 1, b), -floordiv(-a, b))
            return -(-a // b)
        if symbolic:
            return z3.If(a <= b, a, b) if f == "min" else z3.If(a >= b, a, b)
        return min(a, b) if f == "min" else max(a, b)
    if isinstance(node, ast.BoolOp):
        vals = [ev(v) for v in node.values]
        if symbolic:
            return z3.And(*vals) if isinstance(node.op, ast.And) else z3.Or(*vals)
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.Compare):
        out, left = [], ev(node.left)
        for op, right in zip(node.ops, node.comparators):
            r = ev(right)
            out.append({ast.Lt: lambda x, y: x < y, ast.LtE: lambda x, y: x <= y, ast.Gt: lambda x, y: x > y,
                        ast.GtE: lambda x, y: x >= y, ast.Eq: lambda x, y: x == y,
                        ast.NotEq: lambda x, y: x != y}[type(op)](left, r))
            left = r
        if symbolic:
            return out[0] if len(out) == 1 else z3.And(*out)
        return all(out)
    raise ContractError(f"{key}: cannot evaluate {ast.dump(node)}")


def floordiv(a, b):
    """Python's floor division on z3 integers (z3's own is Euclidean; they differ for a negative divisor)."""
    if z3.is_int_value(b) and b.as_long() > 0:
        return a / b
    return z3.If(b > 0, a / b, -(a / -b) - z3.If(a % -b == 0, 0, 1))


@dataclass(frozen=True)
class Scalar:
    """An integer argument: an inclusive range, or one value or expression."""
    name: str
    lo: int | None = None
    hi: int | None = None
    expr: Expr | None = None


@dataclass(frozen=True)
class Buffer:
    name: str
    shape: tuple
    strides: tuple      # Exprs; contiguous when the contract gives none
    dtype: str
    output: bool = False

    def extent(self, env: dict):
        """Elements from the first to one past the last the view can address (0 when empty)."""
        shape = [s.z3(env) for s in self.shape]
        strides = [s.z3(env) for s in self.strides]
        nonempty = z3.And(*[s >= 1 for s in shape]) if shape else z3.BoolVal(True)
        return z3.If(nonempty, 1 + sum((n - 1) * st for n, st in zip(shape, strides)), 0)


@dataclass
class Contract:
    name: str
    fn: object
    grid: list[Expr]
    scalars: dict[str, Scalar]
    constexprs: dict[str, list]
    assume: list[Expr]
    buffers: dict[str, Buffer]
    # (buffer read along the contracted dim, that dim, the output it accumulates into), or None
    contraction: tuple | None = None
    targets: tuple = ("sm_90a",)
    # Sizes of the problem that are not kernel arguments (a batch count only the grid sees).
    sizes: dict = None
    source: str = ""
    text: str = ""

    def combinations(self):
        """Every constexpr combination, as a dict, in the contract's order."""
        names = list(self.constexprs)
        for values in itertools.product(*(self.constexprs[n] for n in names)):
            yield dict(zip(names, values))

    def domain_scalars(self) -> dict:
        """The integer arguments and the sizes: every name with a domain."""
        return {**(self.sizes or {}), **self.scalars}

    def check(self):
        """Every kernel argument covered once; every name in every expression known."""
        args = list(self.fn.arg_names)
        sections = {"scalars": self.scalars, "constexprs": self.constexprs, "buffers": self.buffers}
        for sec, d in sections.items():
            for k in d:
                if k not in args:
                    raise ContractError(f"{sec}.{k}: not an argument of {self.name} (arguments: {', '.join(args)})")
        for a in args:
            where = [sec for sec, d in sections.items() if a in d]
            if not where:
                raise ContractError(f"{a}: kernel argument not covered by the contract (give it under [scalars], "
                                 f"[constexprs] or [buffers])")
            if len(where) > 1:
                raise ContractError(f"{a}: given in both [{where[0]}] and [{where[1]}]")
        for k, vals in self.constexprs.items():
            if not isinstance(vals, list) or not vals:
                raise ContractError(f"constexprs.{k}: expected a non-empty list of values")
        for k in self.sizes or {}:
            if k in args:
                raise ContractError(f"sizes.{k}: a kernel argument (give it under [scalars])")
        known = set(self.scalars) | set(self.constexprs) | set(self.sizes or {})
        exprs = list(self.grid) + list(self.assume) + [s.expr for s in self.domain_scalars().values() if s.expr]
        for b in self.buffers.values():
            exprs += list(b.shape) + list(b.strides)
        for e in exprs:
            bad = e.names() - known
            if bad:
                raise ContractError(f"{e.key}: unknown name {sorted(bad)[0]!r}")
        if not 1 <= len(self.grid) <= 3:
            raise ContractError(f"grid: expected 1 to 3 expressions, got {len(self.grid)}")
        return self


def _contiguous(shape: tuple, key: str) -> tuple:
    strides, acc = [], "1"
    for s in reversed(shape):
        strides.append(parse_expr(acc, key))
        acc = f"({acc}) * ({s.text})"
    return tuple(reversed(strides))


def buffer(name: str, shape, dtype: str, strides=None, output=False, key="buffers") -> Buffer:
    key = f"{key}.{name}"
    dtype_info(dtype, f"{key}.dtype")
    shp = tuple(parse_expr(s, f"{key}.shape[{i}]") for i, s in enumerate(shape))
    if strides is None:
        st = _contiguous(shp, f"{key}.strides")
    else:
        if len(strides) != len(shp):
            raise ContractError(f"{key}.strides: {len(strides)} strides for {len(shp)} dims")
        st = tuple(parse_expr(s, f"{key}.strides[{i}]") for i, s in enumerate(strides))
    return Buffer(name, shp, st, dtype, bool(output))


def scalar(name: str, spec, key="scalars") -> Scalar:
    key = f"{key}.{name}"
    if isinstance(spec, list):
        if len(spec) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in spec) or spec[0] > spec[1]:
            raise ContractError(f"{key}: a range is [low, high] with low <= high, got {spec!r}")
        return Scalar(name, spec[0], spec[1])
    return Scalar(name, expr=parse_expr(spec, key))


def load_jit(path: Path, fn_name: str, key="kernel"):
    if not path.is_file():
        raise ContractError(f"{key}: no file {path}")
    mod_name = f"_ceiling_verify_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's file failed to import: one line, naming the key
        raise ContractError(f"{key}: importing {path} failed ({type(exc).__name__}: {exc})") from None
    fn = getattr(module, fn_name, None)
    if fn is None or not hasattr(fn, "arg_names"):
        raise ContractError(f"{key}: {fn_name!r} is not a @triton.jit function in {path}")
    return fn


def load(path) -> Contract:
    path = Path(path)
    if not path.is_file():
        raise ContractError(f"contract: no file {path}")
    text = path.read_text()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ContractError(f"contract: not valid TOML ({exc})") from None
    return from_dict(data, base=path.parent, text=text)


def from_dict(data: dict, base: Path = Path("."), text: str = "", fn=None) -> Contract:
    for k in data:
        if k not in _TOP_KEYS:
            raise ContractError(f"{k}: unknown key (expected {', '.join(sorted(_TOP_KEYS))})")
    for k in ("kernel", "grid"):
        if k not in data:
            raise ContractError(f"{k}: missing")
    kernel = data["kernel"]
    if fn is None:
        if not isinstance(kernel, str) or ":" not in kernel:
            raise ContractError(f"kernel: expected \"file.py:function\", got {kernel!r}")
        file, fn_name = kernel.rsplit(":", 1)
        fn = load_jit(base / file, fn_name)
    grid = data["grid"]
    if not isinstance(grid, list):
        raise ContractError("grid: expected a list of 1 to 3 expressions")
    assume = (data.get("assume") or {}).get("conditions", [])
    for k in data.get("assume") or {}:
        if k != "conditions":
            raise ContractError(f"assume.{k}: unknown key (expected conditions)")
    bufs = {}
    for name, spec in (data.get("buffers") or {}).items():
        if not isinstance(spec, dict) or "shape" not in spec or "dtype" not in spec:
            raise ContractError(f"buffers.{name}: expected {{ shape = [...], dtype = \"...\" }}")
        extra = set(spec) - {"shape", "strides", "dtype", "output"}
        if extra:
            raise ContractError(f"buffers.{name}.{sorted(extra)[0]}: unknown key")
        bufs[name] = buffer(name, spec["shape"], spec["dtype"], spec.get("strides"), spec.get("output", False))
    contraction = None
    if "contraction" in data:
        c = data["contraction"]
        for k in ("load", "axis", "output"):
            if not isinstance(c, dict) or k not in c:
                raise ContractError(f"contraction.{k}: missing (expected load, axis, output)")
        for k in ("load", "output"):
            if c[k] not in bufs:
                raise ContractError(f"contraction.{k}: {c[k]!r} is not a buffer of the contract")
        if not isinstance(c["axis"], int) or not 0 <= c["axis"] < len(bufs[c["load"]].shape):
            raise ContractError(f"contraction.axis: {c['axis']!r} is not a dim of {c['load']}")
        if not bufs[c["output"]].output:
            raise ContractError(f"contraction.output: {c['output']!r} is not an output buffer")
        contraction = (c["load"], c["axis"], c["output"])
    targets = data.get("targets", ["sm_90a"])
    from ceiling.verify.ir import TARGETS
    for t in targets:
        if t not in TARGETS:
            raise ContractError(f"targets: unknown target {t!r} (expected one of {', '.join(TARGETS)})")
    contract = Contract(
        name=data.get("name") or (kernel if isinstance(kernel, str) else fn.__name__), fn=fn,
        grid=[parse_expr(g, f"grid[{i}]") for i, g in enumerate(grid)],
        scalars={k: scalar(k, v) for k, v in (data.get("scalars") or {}).items()},
        sizes={k: scalar(k, v, "sizes") for k, v in (data.get("sizes") or {}).items()},
        constexprs={k: v if isinstance(v, list) else [v] for k, v in (data.get("constexprs") or {}).items()},
        assume=[parse_expr(c, f"assume.conditions[{i}]", condition=True) for i, c in enumerate(assume)],
        buffers=bufs, contraction=contraction, targets=tuple(targets), text=text)
    return contract.check()
