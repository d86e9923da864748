"""Immutable execution traces.

A trace holds a generative function's arguments, its choices (each with its
distribution and cached log-density), its sub-traces, its return value and its
total score ``log p(choices)``. ``update`` and ``regenerate`` return *new*
traces; the old one stays valid, so rejecting a move costs nothing.
"""

from __future__ import annotations

from ..core.address import did_you_mean, format_address, normalize_address
from ..core.choicemap import ChoiceMap, as_selection
from ..errors import AddressError

__all__ = ["ChoiceRecord", "CallRecord", "Trace", "DynamicTrace"]


class ChoiceRecord:
    """One random choice: its distribution, value and log-density (a float)."""

    __slots__ = ("dist", "value", "logpdf")

    def __init__(self, dist, value, logpdf):
        self.dist, self.value, self.logpdf = dist, value, logpdf

    @property
    def discrete(self) -> bool:
        return self.dist.discrete

    def __repr__(self):
        return f"ChoiceRecord({self.dist!r}, {self.value!r}, {self.logpdf:.4g})"


class CallRecord:
    """A sub-call mounted at an address: holds the callee's trace."""

    __slots__ = ("trace",)

    def __init__(self, trace):
        self.trace = trace

    @property
    def logpdf(self) -> float:
        return self.trace.score


class Trace:
    """Base class of traces. Subclasses provide ``_records`` (address -> record)."""

    __slots__ = ("gen_fn", "args", "retval", "score", "_choices", "_flat")

    def __init__(self, gen_fn, args, retval, score):
        self.gen_fn, self.args, self.retval, self.score = gen_fn, args, retval, score
        self._choices = None
        self._flat = None

    # -- records --------------------------------------------------------
    def _record_items(self):
        """``(local address, record)`` pairs of this trace's own level."""
        raise NotImplementedError

    def _record_get(self, address):
        raise NotImplementedError

    def flat_records(self) -> dict:
        """Every random choice, by full address -> :class:`ChoiceRecord` (cached)."""
        if self._flat is None:
            flat = {}
            for address, record in self._record_items():
                if type(record) is ChoiceRecord:
                    flat[address] = record
                else:
                    for sub, rec in record.trace.flat_records().items():
                        flat[address + sub] = rec
            self._flat = flat
        return self._flat

    def _resolve(self, address):
        """``(kind, target)`` for ``address``: ("leaf", ChoiceRecord), ("call", Trace) or None."""
        for i in range(1, len(address) + 1):
            record = self._record_get(address[:i])
            if record is None:
                continue
            if type(record) is ChoiceRecord:
                return ("leaf", record) if i == len(address) else None
            if i == len(address):
                return ("call", record.trace)
            return record.trace._resolve(address[i:])
        return None

    def choice_record(self, address):
        """The :class:`ChoiceRecord` at a leaf address, or ``None``."""
        found = self._resolve(normalize_address(address))
        return found[1] if found is not None and found[0] == "leaf" else None

    # -- user-facing access ---------------------------------------------
    def __getitem__(self, address):
        """Value at a leaf; a sub-call's return value; a namespace's choices as a ChoiceMap.

        ``trace[()]`` is the return value of the whole program.
        """
        address = normalize_address(address)
        if not address:
            return self.retval
        found = self._resolve(address)
        if found is not None:
            kind, target = found
            return target.value if kind == "leaf" else target.retval
        choices = self.get_choices()
        if choices.has_submap(address):
            return choices.get_submap(address)
        raise AddressError(
            f"this trace of {self.gen_fn.name} has no address {format_address(address)}."
            + did_you_mean(address, self.flat_records())
        )

    def __contains__(self, address) -> bool:
        address = normalize_address(address)
        return self._resolve(address) is not None or self.get_choices().has_submap(address)

    def get_choices(self) -> ChoiceMap:
        """All random choices as a :class:`ChoiceMap` (cached; traces are immutable)."""
        if self._choices is None:
            self._choices = ChoiceMap._from_flat(
                {a: r.value for a, r in self.flat_records().items()})
        return self._choices

    @property
    def choices(self) -> ChoiceMap:
        return self.get_choices()

    def get_args(self):
        return self.args

    def get_retval(self):
        return self.retval

    def get_score(self) -> float:
        return self.score

    # -- GFI ------------------------------------------------------------
    def update(self, constraints=None, args=None):
        """``(new_trace, log_weight, discard)`` with ``log_weight = log p(new) - log p(old)``.

        ``constraints`` (a ChoiceMap or ``{address: value}``) sets new values;
        everything else keeps its value. Addresses the new execution no longer
        visits, and overwritten values, are returned in ``discard``. Choices the
        new execution needs but that are neither constrained nor in the old trace
        are sampled from their prior (and included in ``log_weight``).
        """
        return self.gen_fn.update(self, constraints, args)

    def update_detailed(self, constraints=None, args=None, *, strict=True):
        """``update`` with everything it learned, as a :class:`~imcmc_lab.modeling.Result`:
        ``.trace``, ``.weight``, ``.discard`` (``{address: old value}``) and ``.fresh`` (the
        addresses sampled from their prior because nothing gave them a value). With
        ``strict=False`` a constraint at an address the new execution never visits is
        listed in ``.unvisited`` instead of raising :class:`~imcmc_lab.errors.ConstraintError`."""
        return self.gen_fn.update_detailed(self, constraints, args, strict=strict)

    def regenerate(self, selection, args=None):
        """``(new_trace, log_weight)``: resample the selected choices from their prior.

        ``selection``: a :class:`Selection`, one address (``"k"``, ``("mu", 2)``)
        or a list of addresses; a namespace selects everything under it.

        ``log_weight`` is the Metropolis-Hastings weight of resimulation (Gen's):
        the ratio of new to old densities over the choices that were kept.
        """
        return self.gen_fn.regenerate(self, selection, args)

    def project(self, selection) -> float:
        """Sum of log-densities of the selected choices."""
        sel = as_selection(selection)
        return sum(r.logpdf for a, r in self.flat_records().items() if a in sel)

    # -- display --------------------------------------------------------
    def __repr__(self):
        n = len(self.flat_records())
        return (f"<{type(self).__name__} of {self.gen_fn.name}{_format_args(self.args)}: "
                f"{n} choice{'s' if n != 1 else ''}, score {self.score:.4f}>")

    def _repr_html_(self):
        from ..core.display import trace_html

        return trace_html(self)


def _format_args(args) -> str:
    from ..core.values import format_value

    text = ", ".join(format_value(a) for a in args)
    return f"({text})" if len(text) < 60 else "(…)"


_ONLY_CHOICES = frozenset([ChoiceRecord])


class DynamicTrace(Trace):
    """Trace of a ``@gen`` function: records keyed by local address."""

    __slots__ = ("_records", "_families")

    def __init__(self, gen_fn, args, retval, score, records, families=None):
        super().__init__(gen_fn, args, retval, score)
        self._records = records
        # (namespace, line) -> family_update.Family: the run's indexed families, which the
        # next update keeps in slices (the records above hold the same choices, one by one)
        self._families = families

    def _record_items(self):
        return self._records.items()

    def _record_get(self, address):
        return self._records.get(address)

    def flat_records(self) -> dict:
        if self._flat is None and set(map(type, self._records.values())) <= _ONLY_CHOICES:
            self._flat = dict(self._records)      # no sub-calls: a copy, without a Python loop
        return super().flat_records()
