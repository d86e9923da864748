"""Generations of a sequential target, and extending a trace by one generation.

``Steps(model, args=lambda t: ..., observations=lambda t: {...}, n=T)`` describes the
targets ``gamma_t`` (``t = 0, ..., n - 1``): the model run with ``args(t)`` and the
observations of generations ``0..t`` (``observations(t)`` gives the ones *new* at ``t``).
Generation ``t``'s program must make every choice generation ``t - 1``'s made and add
some: extending a particle is ``trace.update_detailed(observations(t), args(t))``.
"""

from __future__ import annotations

import numbers

from ...core.address import format_address
from ...core.choicemap import as_choicemap
from ...errors import ConstraintError

__all__ = ["Steps", "Extension", "extend"]


class Steps:
    """The generations of an SMC run (see the module docstring).

    ``Steps(model, args=lambda t: (t + 1,), observations=lambda t: {("y", t): ys[t]}, n=T)``
    or ``Steps(model, [(args_0, observations_0), (args_1, observations_1), ...])``.
    ``args(t)`` may return a tuple or a single argument.
    """

    def __init__(self, model, args=None, observations=None, n=None):
        self.model = model
        if isinstance(args, (list, tuple)) and observations is None and n is None:
            table = [(a, o) for a, o in args]
            self._args, self._observations, n = (lambda t: table[t][0]), (lambda t: table[t][1]), len(table)
        else:
            if not callable(args) or (observations is not None and not callable(observations)):
                raise TypeError("Steps(model, args=lambda t: ..., observations=lambda t: {...}, n=T), "
                                "or Steps(model, [(args, observations), ...])")
            self._args, self._observations = args, observations or (lambda t: {})
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise ValueError(f"Steps: n must be a positive number of generations, got {n!r}")
        self.n = int(n)
        self._cache = {}

    def args(self, t: int) -> tuple:
        a = self._args(t)
        return a if isinstance(a, tuple) else (a,)

    def observations(self, t: int) -> dict:
        """The observations new at generation ``t``, as flat ``{address: value}`` (cached)."""
        if t not in self._cache:
            self._cache[t] = dict(as_choicemap(self._observations(t) or {})._leaves)
        return self._cache[t]

    def observed_until(self, t: int) -> set:
        """Addresses observed in generations ``0..t``."""
        return {a for s in range(t + 1) for a in self.observations(s)}

    def __repr__(self):
        return f"Steps({self.model.name}, n={self.n})"


class Extension:
    """One particle extended by one generation: the new ``trace``, the incremental log-weight
    ``log gamma_t(new) - log gamma_{t-1}(old) - log q(fresh)``, and the fresh addresses."""

    __slots__ = ("trace", "log_weight", "fresh", "result")

    def __init__(self, trace, log_weight, fresh, result):
        self.trace, self.log_weight, self.fresh, self.result = trace, log_weight, fresh, result


def extend(steps: Steps, trace, t: int, proposed=None) -> Extension:
    """Extend ``trace`` (a trace of generation ``t - 1``, or None for ``t = 0``) to generation
    ``t``. ``proposed``: values for choices new at ``t`` (conditional SMC's retained particle);
    their densities leave the weight as the fresh ones' do (both come from the prior)."""
    constraints = steps.observations(t)
    if proposed:
        constraints = {**proposed, **constraints}
    if trace is None:
        result = steps.model.generate_detailed(steps.args(0), constraints)
    else:
        result = trace.update_detailed(constraints, steps.args(t))
        if result.discard:
            _discard_error(steps, t, result.discard)
    new = result.trace
    log_weight = result.weight       # generate: the constrained choices' densities only
    if trace is not None:            # update's weight also has the fresh choices' densities
        log_weight -= sum(new.choice_record(a).logpdf for a in result.fresh)
    if proposed:
        log_weight -= sum(new.choice_record(a).logpdf for a in proposed)
    return Extension(new, log_weight, result.fresh, result)


def _discard_error(steps, t, discard):
    shown = ", ".join(format_address(a) for a in list(discard)[:5])
    more = f" (and {len(discard) - 5} more)" if len(discard) > 5 else ""
    raise ConstraintError(
        f"generation {t} of {steps!r} would discard the choices at {shown}{more}: an SMC generation "
        f"may only add choices (and observations at addresses not sampled before). Observe an "
        f"address only from the generation that first makes it, and let args(t) keep earlier "
        f"choices in the program.")
