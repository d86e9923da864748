"""One execution request, its result, and the work counters.

Every way of running a generative function (simulate, generate, assess, update,
regenerate, differentiable scoring, a combinator's elements) builds one
:class:`Execution` and hands it to ``gen_fn._execute(request)``. ``request.mode``
is the handler class of the mode (``tracer.Simulate``, ``tracer.Update``, ...):
it holds the mode's rules, so nothing downstream compares mode names.
"""

from __future__ import annotations

__all__ = ["Execution", "Result", "count_work", "WorkCount", "counters"]


class Execution:
    """What to run: ``mode`` (a handler class of :mod:`.tracer`), the arguments, the
    previous trace (update, regenerate), the flat constraints ``{address: value}``
    (generate, assess, update), the selection (regenerate), and ``grad_terms``: a list
    collecting the log-density tensors of the run (differentiable scoring), or None."""

    __slots__ = ("mode", "args", "prev", "constraints", "selection", "grad_terms")

    def __init__(self, mode, args, prev=None, constraints=None, selection=None, grad_terms=None):
        self.mode, self.args, self.prev = mode, args, prev
        self.constraints, self.selection, self.grad_terms = constraints, selection, grad_terms

    @property
    def incremental(self) -> bool:
        """Whether the run starts from a previous trace it may reuse parts of."""
        return self.prev is not None and self.mode.incremental

    def child(self, gen_fn, args, prev_sub, constraints, selection):
        """Run a callee (a sub-call or a combinator's element) under this request's mode:
        ``(Result, contribution to the caller's weight)``."""
        return self.mode.run_child(self, gen_fn, args, prev_sub, constraints, selection)


class Result:
    """What a run returns.

    ``trace``: the new trace; ``weight``: the mode's log-weight (generate: log-density of
    the constrained choices; update: ``log p(new) - log p(old)``; regenerate: the
    resimulation MH weight); ``discard``: ``{address: old value}`` of the choices that were
    overwritten or that the new run no longer visits; ``fresh``: the addresses sampled from
    their prior (neither constrained nor kept); ``unvisited``: constraint addresses the
    program never visited (only with ``strict=False``; otherwise that is an error);
    ``kind_changed``: the addresses that kept their value under a distribution of the
    other kind (discrete then continuous, or the reverse), or None.

    The discarded values are the previous trace's own tensors: the Result of a public
    ``update_detailed`` notes them as handed out when ``discard`` is first read (see
    ``trace.Loans``), so changing one in place is a TraceChangedError when that trace is used next.
    """

    __slots__ = ("trace", "weight", "_discard", "fresh", "n_used", "unvisited", "lender", "kind_changed")

    def __init__(self, trace, weight, discard, fresh, n_used):
        self.trace, self.weight, self._discard, self.fresh, self.n_used = trace, weight, discard, fresh, n_used
        self.unvisited = ()
        self.kind_changed = None
        self.lender = None          # the previous trace, until ``discard`` was handed out

    @property
    def discard(self):
        lender = self.lender
        if lender is not None:
            self.lender = None
            if self._discard:
                lender._lend_addresses(self._discard)
        return self._discard

    @discard.setter
    def discard(self, value):
        self._discard = value

    def __repr__(self):
        return (f"Result(trace={self.trace!r}, weight={self.weight:.6g}, "
                f"{len(self._discard or ())} discarded, {len(self.fresh or ())} fresh)")


class WorkCounters:
    """Counts of engine work, for tests and benchmarks that measure by counting.

    ``logpdf_evaluations``: log-densities computed for choices (cached reuse not
    counted). ``executions``: bodies of ``@gen`` functions run (including
    combinator kernels).
    """

    __slots__ = ("logpdf_evaluations", "executions")

    def __init__(self):
        self.logpdf_evaluations = 0
        self.executions = 0

    def snapshot(self):
        return (self.logpdf_evaluations, self.executions)


counters = WorkCounters()


class WorkCount:
    """Result of :func:`count_work`: work done inside the ``with`` block."""

    def __init__(self):
        self.logpdf_evaluations = 0
        self.executions = 0

    def __repr__(self):
        return f"WorkCount(logpdf_evaluations={self.logpdf_evaluations}, executions={self.executions})"


class count_work:
    """``with il.count_work() as work: ...`` then read ``work.logpdf_evaluations``."""

    def __enter__(self):
        self._start = counters.snapshot()
        self.result = WorkCount()
        return self.result

    def __exit__(self, *exc):
        lp, ex = counters.snapshot()
        self.result.logpdf_evaluations = lp - self._start[0]
        self.result.executions = ex - self._start[1]
        return False
