"""Automated involutive MCMC (paper Algorithm 2, model side through incremental update).

::

    log alpha = [log p(x' + b) - log p(x + b)]   # the update weight, incremental
              + log q_{x'}(y') - log q_x(y)      # q assessed at the new model trace
              + log |det J|                      # reduced Jacobian of the continuous part

Every move produces a :class:`MoveRecord` that widgets render.
"""

from __future__ import annotations

import inspect
import math
import os
import sys
import warnings

from ..transform.apply import EMPTY_AUX, apply_transform
from ..transform.checks import involution_problem
from .acceptance import metropolis_accept
from .kernels import Kernel

__all__ = ["involutive_mcmc", "involutive_move", "MoveRecord", "InvolutiveKernel"]


class MoveRecord:
    """Everything about one involutive MCMC move.

    Traces: ``model_in``, ``aux_in`` (y ~ q), ``model_out`` (x'), ``aux_out``
    (y' as a trace of q at x', or None); ``q`` and ``q_args`` the auxiliary
    program and its extra arguments. Addresses: ``read``, ``written``,
    ``copied`` (explicit: ``(source, destination)`` pairs) and
    ``copied_implicitly`` (model addresses left as they were). ``jacobian``: a
    :class:`~imcmc_lab.transform.jacobian.JacobianRecord`. Terms of
    ``log_alpha``: ``model_log_ratio``, ``log_q_new``, ``log_q_old``,
    ``logabsdet``. ``accepted``; ``check_failure`` says why a check rejected
    the move (None if no check failed or none ran).

    A record pickles (standard ``pickle`` when its programs are module-level, else
    ``cloudpickle``) without its :class:`~imcmc_lab.transform.apply.Application`,
    which holds autograd graphs: the copy re-applies the transform, a deterministic
    function of ``(model_in, aux_in)``, when something asks for it.
    """

    def __init__(self, app, model_in, aux_in, log_q_old, log_alpha, accepted, check_failure,
                 q=None, q_args=()):
        self._application, self._transform = app, app.transform if app.transform is not None else app.run.transform
        self.q, self.q_args = q, tuple(q_args)   # what made aux_in (views re-apply f with them)
        self.model_in, self.aux_in = model_in, aux_in
        self.model_out, self.aux_out = app.new_model, app.new_aux
        self.log_q_old = log_q_old
        self.log_alpha, self.accepted, self.check_failure = log_alpha, accepted, check_failure

    @property
    def application(self):
        """The transform's :class:`~imcmc_lab.transform.apply.Application` (reads, writes, Jacobian)."""
        if self._application is None:       # an unpickled copy
            self._application = apply_transform(self._transform, self.model_in, self.aux_in, self.q,
                                                self.q_args, check_dimension=False)
        return self._application

    def __getstate__(self):
        state = dict(self.__dict__, _application=None)
        for side in ("aux_in", "aux_out"):          # the shared empty trace stays the shared one
            if state[side] is EMPTY_AUX:
                state[side] = _EMPTY_AUX_MARK
        return state

    def __setstate__(self, state):
        for side in ("aux_in", "aux_out"):
            if isinstance(state[side], str):
                state[side] = EMPTY_AUX
        self.__dict__.update(state)

    @property
    def trace(self):
        """The chain's next state: ``model_out`` if accepted, else ``model_in``."""
        return self.model_out if self.accepted else self.model_in

    @property
    def jacobian(self):
        return self.application.jacobian

    @property
    def model_log_ratio(self):
        return self.application.model_log_ratio

    @property
    def log_q_new(self):
        return self.application.log_q_new

    @property
    def logabsdet(self):
        return self.application.logabsdet

    @property
    def read(self):
        return [(s, a) for (s, a) in self.application.run.reads]

    @property
    def written(self):
        return [(s, a) for (s, a) in self.application.run.writes]

    @property
    def copied(self):
        return [((c.src_side, c.src_address), (c.dst_side, c.dst_address)) for c in self.application.run.copies]

    @property
    def copied_implicitly(self):
        return list(self.application.copied_implicitly)

    @property
    def terms(self) -> dict:
        """The terms of ``log alpha``, by name."""
        return {
            "log p(x') - log p(x)": self.model_log_ratio,
            "log q_x'(y')": self.log_q_new,
            "- log q_x(y)": -self.log_q_old,
            "log |det J|": self.logabsdet,
            "log alpha": self.log_alpha,
        }

    @property
    def acceptance_probability(self) -> float:
        return 0.0 if self.log_alpha == -math.inf else min(1.0, math.exp(min(self.log_alpha, 0.0)))

    def __repr__(self):
        status = "accepted" if self.accepted else "rejected"
        why = f" ({self.check_failure.splitlines()[0]})" if self.check_failure else ""
        return f"<MoveRecord {status}{why}: log alpha = {self.log_alpha:.4g}>"


_EMPTY_AUX_MARK = "<EMPTY_AUX>"


def _as_q_args(q_args) -> tuple:
    """``q_args`` as a tuple: a tuple or list of q's extra arguments, or None for none."""
    if q_args is None:
        return ()
    if isinstance(q_args, (tuple, list)):
        return tuple(q_args)
    raise TypeError(f"q_args must be a tuple of the auxiliary program's extra arguments (q is called "
                    f"as q(trace, *q_args)), got {q_args!r}: write ({q_args!r},) for one argument, "
                    f"or () for none.")


def _check_arguments(trace, q, q_args, f):
    """Raise a TypeError naming the argument that is not what ``involutive_move(trace, q,
    q_args, f)`` expects (called once a move failed; its arguments may be swapped)."""
    order = "involutive_mcmc(trace, q, q_args, f): "
    if not hasattr(trace, "flat_records"):
        raise TypeError(order + f"trace must be a trace of the model (p.simulate(...) or "
                                f"p.generate(...)[0]), got {trace!r}. Are the arguments in this order?")
    if q is not None and not hasattr(q, "simulate"):
        raise TypeError(order + f"q must be the auxiliary program (a @gen function, or None), got {q!r}. "
                                f"Are the arguments in this order?")
    if not hasattr(f, "run_on"):
        raise TypeError(order + f"f must be the transform (@il.transform or %%transform), got {f!r}. "
                                f"Are the arguments in this order?")
    fn = getattr(q, "fn", None)
    if fn is not None:
        try:
            inspect.signature(fn).bind(trace, *q_args)
        except TypeError as exc:
            raise TypeError(f"the auxiliary program is called as {getattr(q, 'name', 'q')}(trace, *q_args) "
                            f"with q_args = {q_args!r}: {exc}. Give q_args one value for each parameter "
                            f"of q after the trace.") from None


def involutive_move(trace, q, q_args, f, check=False, rtol=1e-6, atol=1e-8) -> MoveRecord:
    """One move of involutive MCMC from ``trace``; returns its :class:`MoveRecord`."""
    q_args = q_args if type(q_args) is tuple else _as_q_args(q_args)
    try:
        aux = q.simulate(trace, *q_args) if q is not None else EMPTY_AUX
    except (AttributeError, TypeError):
        _check_arguments(trace, q, q_args, f)     # a clearer error if the arguments are wrong
        raise
    log_q_old = aux.score
    app = apply_transform(f, trace, aux, q, q_args, check_dimension=not check)
    if not check:
        app.raise_jacobian_problem()      # a lost or NaN derivative; a checked move rejects with it
    failure = app.problem if check else None
    if check and failure is None:
        failure = involution_problem(f, app, trace, aux, q, q_args, rtol, atol)
    if app.problem is not None or failure is not None:
        # A failed check rejects (Lemma 6.1 keeps the kernel stationary); without
        # checks, a support failure is simply a zero acceptance probability.
        return MoveRecord(app, trace, aux, log_q_old, -math.inf, False, failure, q, q_args)
    log_alpha = app.model_log_ratio + app.log_q_new - log_q_old + app.logabsdet
    if math.isnan(log_alpha):
        log_alpha = -math.inf
    accepted = metropolis_accept(log_alpha)
    return MoveRecord(app, trace, aux, log_q_old, log_alpha, accepted, None, q, q_args)


def involutive_mcmc(trace, q, q_args, f, check=False, rtol=1e-6, atol=1e-8):
    """Involutive MCMC: ``(new_trace, accepted)``. ``q`` is called as ``q(trace, *q_args)``.

    With ``check=True`` every move also runs the support, dimension and
    involution checks; a failed check rejects the move (use
    :func:`involutive_move` or :class:`InvolutiveKernel` to see why).
    """
    record = involutive_move(trace, q, q_args, f, check, rtol, atol)
    return record.trace, record.accepted


def _first_user_frame() -> int:
    """The ``stacklevel`` of the first frame of the caller's stack outside imcmc-lab."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_ENGINE):
        frame, level = frame.f_back, level + 1
    return level


_ENGINE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class InvolutiveKernel(Kernel):
    """``kernel(trace) -> (trace, accepted)`` for chains; keeps the ``last_record``
    and counts moves rejected by a failed check in ``check_failures``."""

    def __init__(self, q, q_args, f, check=False, name=None):
        super().__init__(name or f"involutive({f.name})")
        self.q, self.q_args, self.f, self.check = q, _as_q_args(q_args), f, check
        self.last_record = None
        self.check_failures = 0

    def step(self, trace):
        self.last_record = involutive_move(trace, self.q, self.q_args, self.f, self.check)
        failure = self.last_record.check_failure
        if failure is not None:
            self.check_failures += 1
            if self.check_failures == 1 and not failure.startswith("support"):
                # (q or p zero at the new state is a rejection a correct kernel can meet too)
                warnings.warn(
                    f"{self.name}: a move failed its check and was rejected "
                    f"({failure.splitlines()[0].rstrip(':')}). "
                    f"check=True keeps the chain correct (paper Lemma 6.1), but this kernel never makes "
                    f"such moves: fix the transform (il.check_involution shows a case; "
                    f"kernel.last_record.check_failure says why; kernel.check_failures counts them). "
                    f"Warned once per kernel.", stacklevel=_first_user_frame())
        return self.last_record.trace, self.last_record.accepted
