"""Selections that must name addresses of the model (a typo is an error, not a no-op).

``MH(select("muu"))`` used to resample nothing and accept every move: the chain
looked healthy and never moved. The rule, sound for trans-dimensional models:

* A selected address is *named by the trace* when it is an address of the trace
  (a choice or a namespace) or its parent namespace exists: ``("mu", 3)`` is fine
  in a state with ``k = 2`` because the namespace ``"mu"`` exists there.
* A selected address the trace does not name is an error (with the nearest
  addresses suggested) -- unless the kernel has seen it named in an earlier state.
  So a chain of a trans-dimensional model whose namespace comes and goes (``"y"``
  only when ``b`` is true) runs, as long as it starts from a state that has it; the
  function forms (:func:`~imcmc_lab.inference.mh.mh`, :func:`~imcmc_lab.inference.hmc.hmc`)
  see one state only, so that state must name every selected address.

The check costs one lookup per selected address until each is confirmed, then nothing.
"""

from __future__ import annotations

from ..core.address import did_you_mean, format_address
from ..core.choicemap import as_selection
from ..errors import AddressError

__all__ = ["CheckedSelection"]


def _named_by(trace, address) -> bool:
    return address in trace or (len(address) > 1 and address[:-1] in trace)


class CheckedSelection:
    """A selection, and which of its addresses a trace has confirmed so far."""

    __slots__ = ("selection", "_unconfirmed")

    def __init__(self, selection):
        self.selection = as_selection(selection)
        # select_all() lists no addresses: nothing to confirm
        self._unconfirmed = frozenset(a for a in self.selection.addresses() if a)

    def confirm(self, trace, who: str):
        """The selection, after checking that ``trace`` names each unconfirmed address."""
        if self._unconfirmed:
            self._unconfirmed = frozenset(a for a in self._unconfirmed if not _named_by(trace, a))
            if self._unconfirmed:
                raise _not_in_trace(who, self.selection, min(self._unconfirmed, key=format_address), trace)
        return self.selection

    def __repr__(self):
        return repr(self.selection)


def _not_in_trace(who, selection, address, trace):
    where = (f"nor a namespace {format_address(address[:-1])} for it" if len(address) > 1
             else "neither a choice nor a namespace")
    return AddressError(
        f"{who}: the selection {selection!r} names {format_address(address)}, which this trace of "
        f"{trace.gen_fn.name} does not have ({where})."
        + did_you_mean(address, trace.flat_records())
        + " A selected address that is not in the model is never resampled: the kernel would silently "
          "do less, or nothing while accepting every move. (An address that exists only in some states of a trans-dimensional model is fine once the "
          "kernel has seen it: start the chain from a state that has it.)"
    )
