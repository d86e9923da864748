"""The exact route of ``rj_proposal``'s inversion: SymPy on the traced computation.

The proposal is run at ``x*`` with SymPy symbols in place of its continuous draws
(``u``) and of the scalar continuous values it reads (``x*``); torch functions and
arithmetic on them build SymPy expressions (a duck type with ``__torch_function__``,
as :mod:`imcmc_lab.transform.dual` does for derivatives). The equations
``returned_a(u; x*) = t_a`` (``t_a`` the current value at ``a``) are solved for ``u``
by ``sympy.solve``. That covers the elementary maps reversible-jump moves use --
affine maps, products, sums, powers, exp and log. Anything else (vectors, indexing,
comparisons of a symbol, a function not in the table) raises :class:`NotSymbolic`
and the caller solves numerically instead.

More than one admissible solution (``kap = u**2``: ``u = +-sqrt(kap)``) means the
proposal is not invertible in ``u``: a :class:`~.rj_runs.ProposalError` naming the draw.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch

from ..core.address import format_address
from ..core.values import DTYPE
from .rj_runs import ProposalError, TraceView, run_proposal

__all__ = ["NotSymbolic", "solve_symbolically", "Formula"]


class NotSymbolic(Exception):
    """The traced computation leaves what the symbolic route handles."""


@lru_cache(maxsize=None)
def _sympy():
    """SymPy, imported on first use: ``import imcmc_lab`` stays quick."""
    import sympy
    return sympy


@lru_cache(maxsize=None)
def _functions():
    sympy = _sympy()
    return {
        "exp": sympy.exp, "log": sympy.log, "sqrt": sympy.sqrt, "log1p": lambda e: sympy.log(1 + e),
        "expm1": lambda e: sympy.exp(e) - 1, "square": lambda e: e ** 2, "reciprocal": lambda e: 1 / e,
        "sigmoid": lambda e: 1 / (1 + sympy.exp(-e)), "neg": lambda e: -e, "__neg__": lambda e: -e,
    }


_BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "true_divide": lambda a, b: a / b, "pow": lambda a, b: a ** b,
}


def _lift(value):
    if isinstance(value, Sym):
        return value.expr
    if isinstance(value, bool):
        raise NotSymbolic
    if isinstance(value, (int, float)):
        return _sympy().Float(value) if isinstance(value, float) else _sympy().Integer(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point():
        return _sympy().Float(float(value.detach()))
    raise NotSymbolic


class Sym:
    """A SymPy expression that torch functions and arithmetic accept."""

    __slots__ = ("expr",)

    def __init__(self, expr):
        self.expr = expr

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if kwargs:
            raise NotSymbolic
        if name in _functions() and len(args) == 1:
            return Sym(_functions()[name](_lift(args[0])))
        base = name.strip("_")
        if base.startswith("r") and base[1:] in _BINARY and len(args) == 2:
            return Sym(_BINARY[base[1:]](_lift(args[1]), _lift(args[0])))
        if base in _BINARY and len(args) == 2:
            return Sym(_BINARY[base](_lift(args[0]), _lift(args[1])))
        raise NotSymbolic

    def _binary(op, reflected=False):
        def method(self, other):
            a, b = _lift(self), _lift(other)
            return Sym(_BINARY[op](b, a) if reflected else _BINARY[op](a, b))
        return method

    __add__, __radd__ = _binary("add"), _binary("add", True)
    __sub__, __rsub__ = _binary("sub"), _binary("sub", True)
    __mul__, __rmul__ = _binary("mul"), _binary("mul", True)
    __truediv__, __rtruediv__ = _binary("div"), _binary("div", True)
    __pow__, __rpow__ = _binary("pow"), _binary("pow", True)
    del _binary

    def __neg__(self):
        return Sym(-self.expr)

    def __pos__(self):
        return self

    def _no(self, *args):
        raise NotSymbolic

    __bool__ = __float__ = __int__ = __index__ = __lt__ = __le__ = __gt__ = __ge__ = __getitem__ = _no
    __eq__ = __ne__ = _no
    __hash__ = object.__hash__


class Formula:
    """The solutions ``u = F_i(x*, t)`` of one discrete path, evaluated with torch."""

    def __init__(self, solutions, read_symbols, target_symbols):
        self.solutions = solutions                 # [[expr per unknown]]
        self.read_symbols = read_symbols           # [(symbol, address)]
        self.target_symbols = target_symbols       # [(symbol, address)]

    def _evaluate(self, read, target):
        env = {s: read(a) for s, a in self.read_symbols}
        env.update({s: target(a) for s, a in self.target_symbols})
        return [torch.stack([torch.as_tensor(_to_torch(e, env), dtype=DTYPE).reshape(()) for e in exprs])
                for exprs in self.solutions]

    def evaluate_numeric(self, search, path, unknowns, continuous):
        """The one admissible solution at the search's ``x*`` and ``x``, or None."""
        with torch.no_grad():
            values = self._evaluate(search.x_star.__getitem__, lambda a: search.targets[a].value)
        valid = [u for u in values if torch.all(torch.isfinite(u)) and all(
            d.logpdf(u[i]) > -math.inf for i, (_, d, _) in enumerate(unknowns))]
        distinct = [u for k, u in enumerate(valid)
                    if not any(torch.allclose(u, v) for v in valid[:k])]
        if len(distinct) > 1:
            names = " and ".join(format_address(a) for a, _, _ in unknowns)
            raise ProposalError(
                f"rj_proposal({search.proposal.name}): the proposal is not invertible in its draw "
                f"{names}: {len(distinct)} values of {names} ({', '.join(f'{float(u[0]):.6g}' for u in distinct)}) "
                f"give the same proposed state, so the reverse move cannot tell which one was drawn. "
                f"Use a one-to-one map (e.g. kap = 0.015 * exp(u) instead of u ** 2), or restrict "
                f"the draw's support so only one solution is admissible.")
        return distinct[0] if distinct else None

    def evaluate_tracked(self, search, move, view, target):
        values = self._evaluate(view.__getitem__, target)
        return min(values, key=lambda u: float(torch.abs(u.detach() - move.u0).max()))


def _to_torch(expr, env):
    if expr.is_Symbol:
        return env[expr]
    if expr.is_Number:
        if not expr.is_real:
            raise NotSymbolic
        return float(expr)
    args = [_to_torch(a, env) for a in expr.args]
    if expr.is_Add:
        return sum(args[1:], args[0])
    if expr.is_Mul:
        out = args[0]
        for a in args[1:]:
            out = out * a
        return out
    if expr.is_Pow:
        return args[0] ** args[1]
    fn = {_sympy().exp: torch.exp, _sympy().log: torch.log}.get(expr.func)
    if fn is None or len(args) != 1:
        raise NotSymbolic
    return fn(torch.as_tensor(args[0], dtype=DTYPE))


def _evaluable(expr) -> bool:
    """Whether :func:`_to_torch` can evaluate ``expr`` (real numbers, +, *, **, exp, log)."""
    sympy = _sympy()
    if expr.is_Symbol:
        return True
    if expr.is_Number:
        return bool(expr.is_real)
    if not (expr.is_Add or expr.is_Mul or expr.is_Pow or expr.func in (sympy.exp, sympy.log)):
        return False
    return all(_evaluable(a) for a in expr.args)


def solve_symbolically(search, path, unknowns, continuous) -> Formula:
    """Trace the run of ``path`` at ``x*`` with symbols and solve for its continuous draws."""
    if any(shape != () for _, _, shape in unknowns):
        raise NotSymbolic
    sympy = _sympy()
    reads = {}

    def read(address):
        value = search.x_star[address]
        rec = search.x_star.choice_record(address)
        if rec is None or rec.discrete:
            return value
        if rec.value.shape != ():
            raise NotSymbolic
        if address not in reads:
            reads[address] = sympy.Symbol(f"x{len(reads)}", real=True)
        return Sym(reads[address])

    u_symbols = {a: sympy.Symbol(f"u{i}", real=True) for i, (a, _, _) in enumerate(unknowns)}
    chosen = iter(path)

    def draw(address, dist):
        return next(chosen) if dist.discrete else Sym(u_symbols[address])

    try:
        changes, _ = run_proposal(search.proposal, TraceView(read, search.x_star), search.args, draw)
    except (TypeError, ValueError, RuntimeError, StopIteration):
        raise NotSymbolic from None
    return _solve(changes, continuous, u_symbols, reads)


def _solve(changes, continuous, u_symbols, reads):
    sympy = _sympy()
    equations, targets = [], []
    for i, a in enumerate(continuous):
        if not isinstance(changes[a], Sym) or not changes[a].expr.free_symbols & set(u_symbols.values()):
            continue                  # a value that does not involve the draws
        t = sympy.Symbol(f"t{i}", real=True)
        targets.append((t, a))
        equations.append(changes[a].expr - t)
    unknown = list(u_symbols.values())
    if not equations:
        raise NotSymbolic
    try:
        solutions = sympy.solve(equations, unknown, dict=True)
    except (NotImplementedError, ValueError, TypeError):
        raise NotSymbolic from None
    exprs = []
    for solution in solutions:
        if any(s not in solution or solution[s].free_symbols & set(unknown) for s in unknown):
            raise NotSymbolic
        exprs.append([solution[s] for s in unknown])
    if not exprs or not all(_evaluable(e) for solution in exprs for e in solution):
        raise NotSymbolic             # e.g. a complex root: solve numerically instead
    return Formula(exprs, [(s, a) for a, s in reads.items()], targets)
