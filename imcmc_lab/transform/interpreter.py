"""Running a transform: the RUN-INVOLUTION interpreter of the paper's Algorithm 2.

:func:`run_transform` executes a transform on a model trace and an auxiliary
trace, enforcing the language's rules (read inputs only, write outputs only,
once each; labels match the choice's distribution; addresses exist), and
returns a :class:`TransformRun`: what was read (continuous reads as tracked
values), written and copied. The new traces and the Jacobian are derived from
it in :mod:`.apply`.

The interpreter takes derivatives through a backend object: continuous reads
are tracked on the float path first (:mod:`.float_backend`: Python floats
carrying forward-mode derivatives, several times faster for the scalar formulas
of most transforms); a transform that does something that path does not model
runs again on torch autograd leaves (:mod:`.autograd_backend`).
"""

from __future__ import annotations

import linecache
import re
from operator import itemgetter

import torch

from ..core.address import did_you_mean, format_address
from ..core.effects import resolve_line
from ..errors import AddressError, LabelError, TransformError
from ..modeling.runtime import OwnedChoices
from .autograd_backend import AutogradBackend
from .dual import NeedsTorch
from .float_backend import FloatBackend
from .float_backend import float_write as _float_write  # noqa: F401  (tests check it directly)
from .language import AddressRef, TraceHandle, Transform, continuous, discrete

__all__ = ["run_transform", "TransformRun", "Write", "Copy", "Read"]

MODEL, AUX = "model", "aux"
_SIDE_IN = {MODEL: "model_in", AUX: "aux_in"}


def _where(line) -> str:
    filename, lineno = resolve_line(line)
    text = linecache.getline(filename, lineno).strip()
    return f"line {lineno}: {text}" if text else f"line {lineno}"


# Read and Write are immutable records made for every statement of every move: tuples
# with named fields, made by the interpreter with tuple.__new__ (no Python-level call).
_tuple_new = tuple.__new__


class Read(tuple):
    """A read of an input address: ``side``, ``address``, ``label``, ``value``, ``leaf``,
    ``line``, ``tracked``.

    For continuous reads ``leaf`` stands for the Jacobian's input coordinates and
    ``tracked`` is the value the transform sees, a function of the leaf: the leaf
    itself, or for a simplex-valued choice the free weights ``w[:-1]`` completed
    with ``1 - sum`` of them. On the float path (:mod:`.float_backend`) ``leaf`` is the
    range of coordinate ids and ``tracked`` a :class:`~.dual.Dual` or
    :class:`~.dual.DualVector`; on autograd ``leaf`` is an autograd leaf.
    """

    __slots__ = ()

    def __new__(cls, side, address, label, value, leaf, line, tracked=None):
        return _tuple_new(cls, (side, address, label, value, leaf, line, leaf if tracked is None else tracked))

    def __getnewargs__(self):
        return tuple(self)

    side, address, label, value, leaf, line, tracked = (property(itemgetter(i)) for i in range(7))


class Write(tuple):
    """A write of ``value`` at an output address: ``side``, ``address``, ``label``,
    ``value``, ``line``, ``tangent``. On the float path a continuous write also keeps
    ``tangent``: one derivative dict per coordinate of the value."""

    __slots__ = ()

    def __new__(cls, side, address, label, value, line, tangent=None):
        return _tuple_new(cls, (side, address, label, value, line, tangent))

    def __getnewargs__(self):
        return tuple(self)

    side, address, label, value, line, tangent = (property(itemgetter(i)) for i in range(6))


class Copy:
    """One copied leaf: ``source`` (input side, address) -> ``destination`` (output side, address)."""

    __slots__ = ("src_side", "src_address", "dst_side", "dst_address", "value", "is_discrete", "line")

    def __init__(self, src_side, src_address, dst_side, dst_address, value, is_discrete, line):
        self.src_side, self.src_address = src_side, src_address
        self.dst_side, self.dst_address = dst_side, dst_address
        self.value, self.is_discrete, self.line = value, is_discrete, line


class TransformRun:
    """Everything one execution of a transform did; ``backend`` took its derivatives."""

    def __init__(self, transform, model_in, aux_in, backend):
        self.transform = transform
        self.backend = backend
        self.model_in, self.aux_in = model_in, aux_in
        self.reads = {}      # (side, address) -> Read
        self.writes = {}     # (side, address) -> Write
        self.copies = []     # list of Copy (one per copied leaf)
        self.copied_to = {}  # (side, address) -> Copy, by destination
        self.retval = None

    @property
    def floats(self):
        """Whether the derivatives came from the float path rather than torch autograd."""
        return self.backend.floats

    # -- results ----------------------------------------------------------
    def output_choices(self, side, detach=True) -> dict:
        """Flat ``{address: value}`` written or copied to ``side``'s output trace, as
        :class:`~imcmc_lab.modeling.runtime.OwnedChoices`: the backend's written values are
        the engine's own, copied values come from the input traces (never modified)."""
        out = OwnedChoices()
        floats = self.backend.floats      # the float path writes new tensors that need no detach
        for (s, address), w in self.writes.items():
            if s == side:
                v = w.value
                if detach and isinstance(v, torch.Tensor) and (not floats or v.requires_grad):
                    v = v.detach()
                out[address] = v
        for c in self.copies:
            if c.dst_side == side:
                out[c.dst_address] = c.value
        return out

    def read_addresses(self, side=None):
        return [a for (s, a) in self.reads if side is None or s == side]

    def written_addresses(self, side=None):
        return [a for (s, a) in self.writes if side is None or s == side]


class _Interpreter:
    def __init__(self, run: TransformRun):
        self.run = run
        self.traces = {MODEL: run.model_in, AUX: run.aux_in}
        backend = self.backend = run.backend
        self.written = backend.written
        self.leaf_at = backend.leaf_at     # a continuous read's (leaf, tracked value)
        self.reads, self.writes, self.copied_to = run.reads, run.writes, run.copied_to
        # every choice of each input trace by address (cached on the trace, which is
        # immutable; _account uses them too)
        self.flats = {MODEL: run.model_in.flat_records(),
                      AUX: run.aux_in.flat_records() if run.aux_in is not None else None}

    def handles(self, one_trace_names=None):
        if one_trace_names:
            t_in, t_out = one_trace_names
            return (TraceHandle(t_in, MODEL, True, self), TraceHandle("aux_in", AUX, True, self),
                    TraceHandle(t_out, MODEL, False, self), TraceHandle("aux_out", AUX, False, self))
        return (TraceHandle("model_in", MODEL, True, self), TraceHandle("aux_in", AUX, True, self),
                TraceHandle("model_out", MODEL, False, self), TraceHandle("aux_out", AUX, False, self))

    # -- read ------------------------------------------------------------
    def _input(self, ref: AddressRef, what: str, line):
        handle = ref.handle
        if not handle.is_input:
            raise TransformError(
                f"{what} {ref.describe()} ({_where(line)}): {handle.name} is an output trace; "
                f"a transform reads only from input traces. Read the input address instead "
                f"(e.g. model_in[...] rather than model_out[...])."
            )
        trace = self.traces[handle.side]
        if trace is None:
            raise TransformError(
                f"{what} {ref.describe()} ({_where(line)}): this transform runs without an "
                f"auxiliary trace (no auxiliary program was given)."
            )
        return trace

    def read(self, ref: AddressRef, label, line):
        handle = ref.handle
        side = handle.side
        trace = self.traces[side] if handle.is_input else None     # _input's hot path
        if trace is None:
            trace = self._input(ref, "read of", line)      # raises, naming the misuse
        address = ref.address
        key = (side, address)
        seen = self.reads.get(key)
        if seen is not None:
            if seen[2] is not label:           # (Read fields by position: label, leaf, tracked)
                raise LabelError(
                    f"{ref.describe()} is read as {label} ({_where(line)}) but was read as "
                    f"{seen.label} before ({_where(seen.line)})."
                )
            return seen[6] if seen[4] is not None else seen[3]
        record = self.flats[side].get(address) if address else None
        if record is None:
            if ref.address == () or ref.address in trace:
                # A sub-call's return value or a namespace: discrete information only.
                if label is continuous:
                    raise LabelError(
                        f"{ref.describe()} ({_where(line)}) is not a single random choice (it is "
                        f"a namespace or a sub-call's return value); read it as discrete, or read "
                        f"its continuous choices one by one."
                    )
                value = trace[ref.address]
                self.run.reads[key] = Read(ref.handle.side, ref.address, label, value, None, line)
                return value
            raise AddressError(
                f"read of {ref.describe()} ({_where(line)}): the {ref.handle.name} trace has no "
                f"address {format_address(ref.address)}."
                + did_you_mean(ref.address, trace.flat_records())
            )
        if record.dist.discrete != label.is_discrete:
            kind = "discrete" if record.dist.discrete else "continuous"
            hint = ("its derivative would be lost and the Jacobian would be wrong"
                    if not record.dist.discrete else "discrete values have no derivative")
            raise LabelError(
                f"{ref.describe()} is read as {label} ({_where(line)}) but its distribution "
                f"{record.dist!r} is {kind}: {hint}. Use il.{kind}."
            )
        if label is discrete:
            value = record.value
            if isinstance(value, torch.Tensor):
                # the trace's own tensor: an in-place change is caught when the trace is
                # used next (see modeling/trace.py, Loans)
                trace._lend_record(address, record)
            self.reads[key] = _tuple_new(Read, (side, address, label, value, None, line, None))
            return value
        leaf, tracked = self.leaf_at(key, record)
        self.reads[key] = _tuple_new(Read, (side, address, label, record.value, leaf, line, tracked))
        return tracked

    def exists(self, ref: AddressRef, line) -> bool:
        trace = self._input(ref, "exists on", line)
        return ref.address == () or ref.address in trace

    # -- write -----------------------------------------------------------
    def _output(self, ref: AddressRef, what, line):
        handle = ref.handle
        if handle.is_input:
            raise TransformError(
                f"{what} {ref.describe()} ({_where(line)}): {handle.name} is an input trace; a "
                f"transform writes only to output traces. Write to "
                f"{'model_out' if handle.side == MODEL else 'aux_out'}[...] instead."
            )
        if not ref.address:
            raise TransformError(f"{what} {ref.describe()} ({_where(line)}): give an address to write")
        key = (handle.side, ref.address)
        earlier = self.writes.get(key) or self.copied_to.get(key)
        if earlier is not None:
            raise TransformError(
                f"{ref.describe()} is written twice: at {_where(earlier.line)} and again at "
                f"{_where(line)}. Each output address gets exactly one value."
            )
        return key

    def write(self, ref: AddressRef, value, label, line):
        handle, address = ref.handle, ref.address
        side = handle.side
        key = (side, address)
        writes = self.writes
        if handle.is_input or not address or key in writes or key in self.copied_to:
            self._output(ref, "write to", line)        # raises, naming the misuse
        value, tangent = self.written(value, label)
        writes[key] = _tuple_new(Write, (side, address, label, value, line, tangent))

    # -- copy ------------------------------------------------------------
    def copy(self, src: AddressRef, dst: AddressRef, line):
        trace = self._input(src, "copy from", line)
        self._output(dst, "copy to", line)
        record = trace.flat_records().get(src.address) if src.address else None
        if record is not None:
            leaves = [((), record)]
        else:
            flat = trace.flat_records()
            n = len(src.address)
            leaves = [(a[n:], r) for a, r in flat.items() if len(a) > n and a[:n] == src.address]
            if not leaves:
                raise AddressError(
                    f"copy from {src.describe()} ({_where(line)}): the {src.handle.name} trace has "
                    f"no address or namespace {format_address(src.address)}."
                    + did_you_mean(src.address, flat)
                )
        for suffix, rec in leaves:
            dkey = (dst.handle.side, dst.address + suffix)
            earlier = self.run.writes.get(dkey) or self.run.copied_to.get(dkey)
            if earlier is not None:
                raise TransformError(
                    f"{dst.handle.name}[{format_address(dkey[1])}] is written twice: at "
                    f"{_where(earlier.line)} and again by the copy at {_where(line)}."
                )
            c = Copy(src.handle.side, src.address + suffix, dkey[0], dkey[1], rec.value,
                     rec.dist.discrete, line)
            self.run.copies.append(c)
            self.run.copied_to[dkey] = c


def run_transform(f: Transform, model_trace, aux_trace, args=(), autodiff=None) -> TransformRun:
    """Execute transform ``f`` on ``(model_trace, aux_trace)``; see :class:`TransformRun`.

    The float path (:mod:`.float_backend`) is tried first unless ``autodiff`` (default
    ``f.autodiff``) is ``"torch"``; where the transform does something that path
    does not model (it raises :class:`~.dual.NeedsTorch`, which also covers its
    domain errors, where torch gives inf or NaN), the transform is run again on
    torch autograd tensors. Any other exception is the transform's own and
    propagates from the first run."""
    if not isinstance(f, Transform):
        raise TransformError(f"expected a transform made with @il.transform, got {f!r}")
    names = ("t_in", "t_out") if f.one_trace else None
    reason = None
    if (autodiff or f.autodiff) == "auto":
        try:
            return _run_on(FloatBackend(f.float_leaves), f, model_trace, aux_trace, names, args)
        except NeedsTorch as exc:   # (only this: a user's exception propagates, raised once)
            reason = f"{type(exc).__name__}: {exc}"[:200]
    run = _run_on(AutogradBackend(), f, model_trace, aux_trace, names, args)
    if reason is not None:     # (counted only when autograd succeeds: not a user error)
        f.torch_fallbacks += 1
        f.last_fallback = reason
    return run


def _run_on(backend, f, model_trace, aux_trace, names, args):
    run = TransformRun(f, model_trace, aux_trace, backend)
    if backend.floats:          # (its running() is a null context: two Python calls saved)
        run.retval = f.run_on(_Interpreter(run).handles(names), *args)
        return run
    with backend.running():
        try:
            run.retval = f.run_on(_Interpreter(run).handles(names), *args)
        except RuntimeError as exc:
            error = _torch_misuse(exc, run)
            if error is None:
                raise
            raise error.with_traceback(exc.__traceback__) from None
    return run


# torch's words for what a transform may not do to a value il.read returned, and ours
_MISUSES = (
    ("leaf Variable that requires grad is being used in an in-place operation",
     "changes a value il.read returned in place",
     "A continuous read is a coordinate of the Jacobian and cannot change; make a new value "
     "instead: `x = x + 1` rather than `x += 1`, `w = w * 2` rather than `w.mul_(2)`, and "
     "`w = w.clone()` before `w[0] = ...`."),
    ("Can't call numpy() on Tensor that requires grad",
     "hands a value il.read returned to NumPy",
     "NumPy cannot carry its derivative (and `.detach().numpy()` would lose it, making the "
     "Jacobian wrong): compute with torch functions instead (torch.sin, torch.exp, ...)."),
)


def _torch_misuse(exc, run):
    """A :class:`TransformError` for a torch error that a transform's misuse of a read value
    caused (naming the transform's line and the addresses read into names on it), or None."""
    for words, what, fix in _MISUSES:
        if words in str(exc):
            break
    else:
        return None
    tb, line = exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code is getattr(run.transform.fn, "__code__", None):
            frame, line = tb.tb_frame, (tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    if line is None:
        return None
    text = linecache.getline(*line)
    named = [f"{name}: {_SIDE_IN[r.side]}[{format_address(r.address)}]"
             for name, value in frame.f_locals.items() if re.search(rf"\b{re.escape(name)}\b", text)
             for r in run.reads.values() if r.leaf is not None and value is r.tracked]
    read = f" ({', '.join(named)})" if named else ""
    return TransformError(f"the transform {run.transform.name} {what}{read} at {_where(line)}. {fix}")
