"""Generative functions: the ``@gen`` decorator and the generative function interface.

Inside a ``@gen`` function a random choice is written ``dist @ address`` and a
call of another generative function that mounts its choices under ``address``
is ``callee(args) @ address``; everything else is ordinary Python::

    @il.gen
    def model(n):
        k = il.poisson_plus_one(1) @ "k"
        means = [il.normal(0, 10) @ ("mu", j) for j in range(1, k + 1)]
        ...

The interface (Gen's, adapted to Python) is on :class:`GenerativeFunction`:
``simulate``, ``generate``, ``assess``; and on traces: ``update``,
``regenerate``.
"""

from __future__ import annotations

import functools

from ..core.choicemap import ChoiceMap
from ..core.effects import visit_call
from . import runtime
from .families import HELPER_NAME, lower_families, lowering_report
from .pickling import reduce_by_name
from .trace import DynamicTrace, Trace

__all__ = ["GenerativeFunction", "DynamicGenFunction", "DynamicTrace", "GenCall", "gen"]


class GenCall:
    """``callee(args)`` inside a generative function, waiting for ``@ address``."""

    __slots__ = ("gen_fn", "args")

    def __init__(self, gen_fn, args):
        self.gen_fn, self.args = gen_fn, args

    def __matmul__(self, address):
        return visit_call(self.gen_fn, self.args, address)

    def __repr__(self):
        return f"<call of {self.gen_fn.name} — write `{self.gen_fn.name}(...) @ address` to trace it>"


class GenerativeFunction:
    """Base class: a program with a distribution over traces.

    Subclasses implement ``_execute(request)``: run the
    :class:`~imcmc_lab.modeling.execution.Execution` request, return a
    :class:`~imcmc_lab.modeling.execution.Result`. The methods below are the
    generative function interface; ``trace.update`` and ``trace.regenerate`` call
    ``update`` and ``regenerate`` here (as in Gen, the function knows how to run itself).
    """

    name = "generative function"

    def __call__(self, *args):
        return GenCall(self, args)

    def simulate(self, *args) -> Trace:
        """Run the program forward; return its trace."""
        __tracebackhide__ = True
        return runtime.simulate(self, args)

    def generate(self, args=(), constraints=None):
        """``(trace, log_weight)``: run with the constrained choices fixed.

        ``log_weight`` is the sum of the constrained choices' log-densities (the
        importance weight with the prior as proposal). A constraint at an address
        the program never visits is an error.
        """
        result = runtime.generate(self, args, constraints)
        return result.trace, result.weight

    def generate_detailed(self, args=(), constraints=None, *, strict=True):
        """``generate`` as a :class:`~imcmc_lab.modeling.Result` (``.trace``, ``.weight``,
        ``.fresh``: the addresses sampled from their prior). With ``strict=False`` a
        constraint the program never visits is listed in ``.unvisited`` instead of raising."""
        return runtime.generate(self, args, constraints, strict)

    def assess(self, args, choices) -> float:
        """``log p(choices)``, or ``-inf`` unless the choices are exactly a trace of the program."""
        return runtime.assess(self, args, choices)

    # Each use of a trace first checks that no value it handed out was changed in place
    # (``trace._lineage()``, see trace.py), and the new trace joins the same lineage.
    def update(self, trace, constraints=None, args=None):
        """``trace.update(constraints, args)``: ``(new_trace, log_weight, discard)``."""
        result = self.update_detailed(trace, constraints, args)
        return result.trace, result.weight, ChoiceMap._from_flat(result.discard or {})   # lent: see Result

    def update_detailed(self, trace, constraints=None, args=None, *, strict=True):
        """``trace.update_detailed(constraints, args, strict=strict)``: the full Result."""
        loans = trace._lineage()
        result = runtime.update(trace, constraints, args, strict)
        result.trace._loans = loans
        result.lender = trace       # the discarded values are still ``trace``'s: lent when read
        return result

    def regenerate(self, trace, selection, args=None):
        """``trace.regenerate(selection, args)``: ``(new_trace, log_weight)``."""
        loans = trace._lineage()
        new, weight = runtime.regenerate(trace, selection, args)
        new._loans = loans
        return new, weight

    def _execute(self, request):
        raise NotImplementedError


class DynamicGenFunction(GenerativeFunction):
    """A Python function whose body makes traced choices (built by :func:`gen`)."""

    def __init__(self, fn, lower=True):
        _check_body(fn)
        # the body that runs: comprehension families lowered (families.py); __wrapped__ is fn
        self.fn = _lowered(fn) if lower else fn
        self.name = getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", "gen_fn")
        functools.update_wrapper(self, fn, updated=())

    @property
    def lowered(self) -> bool:
        """Whether the body runs with its comprehension families lowered (see families.py)."""
        fn = self.fn.func if isinstance(self.fn, functools.partial) else self.fn
        return self.fn is not self.__wrapped__ or HELPER_NAME in getattr(getattr(fn, "__code__", None),
                                                                         "co_names", ())

    @property
    def lowering_report(self) -> list:
        """One line per loop or comprehension that makes a choice per key: lowered to one
        indexed family, or run as written and why (see families.py)."""
        fn = self.__wrapped__
        return lowering_report(fn.func if isinstance(fn, functools.partial) else fn, self.lowered)

    def _execute(self, request):
        __tracebackhide__ = True
        return runtime.run_dynamic(self, request)

    def __reduce_ex__(self, protocol):
        # the module attribute is this wrapper, so pickle's default (fn by name) would refuse
        return reduce_by_name(self, protocol, super().__reduce_ex__)

    def __repr__(self):
        return f"<generative function {self.name}>"


def _check_body(fn):
    """A body must be something ``gen`` can run as a program: a clear error otherwise."""
    if isinstance(fn, functools._lru_cache_wrapper):
        raise TypeError(
            f"il.gen got {fn.__name__}, a functools.lru_cache wrapper: a cached body would return "
            f"its first result again without making its random choices. Decorate the plain "
            f"function with @il.gen and leave out the cache.")
    if not callable(fn) or isinstance(fn, type) or not (
            isinstance(fn, functools.partial) or hasattr(fn, "__code__")
            or hasattr(type(fn), "__call__") and hasattr(type(fn).__call__, "__code__")):
        raise TypeError(
            f"il.gen needs a Python function (a def, a lambda, a functools.partial of one, or an "
            f"object with a __call__ method) whose body makes choices with `dist @ address`; "
            f"got {getattr(fn, '__name__', None) or type(fn).__name__!s} ({type(fn).__name__}).")


def _lowered(fn):
    """``fn`` with its comprehension families lowered; a partial's function is lowered inside."""
    if isinstance(fn, functools.partial):
        inner = _lowered(fn.func)
        return fn if inner is fn.func else functools.partial(inner, *fn.args, **fn.keywords)
    return lower_families(fn) if hasattr(fn, "__code__") else fn


def gen(fn=None, *, lower=True):
    """Decorator: make a generative function from a Python function.

    A comprehension that draws one choice per key, ``[normal(0, 10) @ ("mu", j) for j
    in keys]``, runs as one indexed family (``update`` keeps its unchanged elements
    without re-running them one by one; the trace is the same). ``@gen(lower=False)``
    runs the body exactly as written.
    """
    if fn is None:
        return lambda f: gen(f, lower=lower)
    if isinstance(fn, GenerativeFunction):
        return fn
    return DynamicGenFunction(fn, lower)
