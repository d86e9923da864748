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

from .families import HELPER_NAME, lower_families
from ..core.effects import visit_call
from .runtime import SIMULATE, public_assess, public_generate, run_dynamic
from .trace import ChoiceRecord, Trace

_ONLY_CHOICES = frozenset([ChoiceRecord])

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

    Subclasses implement ``_execute(args, prev, constraints, selection, mode)``
    returning a :class:`~imcmc_lab.modeling.runtime.Result`.
    """

    name = "generative function"

    def __call__(self, *args):
        return GenCall(self, args)

    def simulate(self, *args) -> Trace:
        """Run the program forward; return its trace."""
        __tracebackhide__ = True
        return self._execute(args, None, None, None, SIMULATE).trace

    def generate(self, args=(), constraints=None):
        """``(trace, log_weight)``: run with the constrained choices fixed.

        ``log_weight`` is the sum of the constrained choices' log-densities (the
        importance weight with the prior as proposal). A constraint at an address
        the program never visits is an error.
        """
        return public_generate(self, args, constraints)

    def assess(self, args, choices) -> float:
        """``log p(choices)``, or ``-inf`` unless the choices are exactly a trace of the program."""
        return public_assess(self, args, choices)

    def _execute(self, args, prev, constraints, selection, mode):
        raise NotImplementedError


class DynamicGenFunction(GenerativeFunction):
    """A Python function whose body makes traced choices (built by :func:`gen`)."""

    def __init__(self, fn, lower=True):
        # the body that runs: comprehension families lowered (families.py); __wrapped__ is fn
        self.fn = lower_families(fn) if lower else fn
        self.name = getattr(fn, "__name__", "gen_fn")
        functools.update_wrapper(self, fn, updated=())

    @property
    def lowered(self) -> bool:
        """Whether the body runs with its comprehension families lowered (see families.py)."""
        return self.fn is not self.__wrapped__ or HELPER_NAME in self.fn.__code__.co_names

    def _execute(self, args, prev, constraints, selection, mode):
        __tracebackhide__ = True
        return run_dynamic(self, args, prev, constraints, selection, mode)

    def __repr__(self):
        return f"<generative function {self.name}>"


class DynamicTrace(Trace):
    """Trace of a :class:`DynamicGenFunction`: records keyed by local address."""

    __slots__ = ("_records", "_families")

    def __init__(self, gen_fn, args, retval, score, records, families=None):
        super().__init__(gen_fn, args, retval, score)
        self._records = records
        # (namespace, line) -> runtime._Family: the run's indexed families, which the next
        # update keeps in slices (the records above hold the same choices, one by one)
        self._families = families

    def _record_items(self):
        return self._records.items()

    def _record_get(self, address):
        return self._records.get(address)

    def flat_records(self) -> dict:
        if self._flat is None and set(map(type, self._records.values())) <= _ONLY_CHOICES:
            self._flat = dict(self._records)      # no sub-calls: a copy, without a Python loop
        return super().flat_records()


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
