"""The trace-transform language (paper Sec. 4.2): ``read``, ``write``, ``copy``, ``tcall``.

A transform is a Python function over four traces::

    @il.transform
    def f(model_in, aux_in, model_out, aux_out):
        k = il.read(model_in["k"], il.discrete)
        il.write(model_out["k"], k + 1, il.discrete)
        il.copy(model_in["mu", 1], aux_out["mu_old"])

It may only *read* from the input traces and only *write* to the output
traces. ``model_in["k"]`` is an :class:`AddressRef` (a trace and an address),
not a value: the interpreter (see :mod:`.interpreter`) answers each statement,
records what was read, written and copied, and tracks continuous reads (as
forward-mode dual numbers, or torch autograd tensors) so the Jacobian can be
derived.

The one-trace form ``def f(t_in, t_out)`` is for deterministic transforms of a
model trace alone.
"""

from __future__ import annotations

import inspect
import linecache
import sys
import threading

from ..core.address import format_address, normalize_address
from ..errors import TransformError
from ..modeling.pickling import reduce_by_name
from .compiled.report import CompileReport

__all__ = ["discrete", "continuous", "read", "exists", "write", "copy", "tcall", "transform", "Transform",
           "AddressRef", "TraceHandle", "pair_bijections", "involution_from_bijections"]


class Label:
    """``discrete`` or ``continuous``: how a transform treats a choice's value."""

    __slots__ = ("name", "is_discrete")

    def __init__(self, name, is_discrete):
        self.name, self.is_discrete = name, is_discrete

    def __repr__(self):
        return self.name

    def __reduce__(self):
        # the engine compares labels by identity: a copy must be the module's own object
        return self.name


discrete = Label("discrete", True)
continuous = Label("continuous", False)


def _as_label(label):
    if isinstance(label, Label):
        return label
    if label in ("discrete", ":discrete"):
        return discrete
    if label in ("continuous", ":continuous"):
        return continuous
    raise TransformError(f"a label is il.discrete or il.continuous, got {label!r}")


_new_object = object.__new__


class TraceHandle:
    """One of the four traces a transform sees; indexing gives an :class:`AddressRef`."""

    __slots__ = ("name", "side", "is_input", "interp")

    def __init__(self, name, side, is_input, interp):
        self.name, self.side, self.is_input, self.interp = name, side, is_input, interp

    def __getitem__(self, address):
        ref = _new_object(AddressRef)       # (AddressRef(...) without its __init__ call: per statement)
        ref.handle = self
        if type(address) is str:            # the common case, as normalize_address spells it
            ref.address = (address,)
        else:
            ref.address = normalize_address(address) if address != () else ()
        return ref

    @property
    def trace(self):
        """The input trace itself (immutable), for computations that need it whole, such
        as a differentiable score inside an HMC transform. Only input traces have one."""
        if not self.is_input:
            raise AttributeError(f"{self.name} is an output trace; it is built from the writes")
        return self.interp.traces[self.side]

    def __repr__(self):
        return f"<{self.name}>"

    def __setitem__(self, address, value):
        frame = sys._getframe(1)
        raise TransformError(
            f"{self.name}[{format_address(normalize_address(address))}] = ... ({_line_of(frame)}): a "
            f"transform sets an output address with write({'model_out' if self.side == 'model' else 'aux_out'}"
            f"[...], value, il.continuous) (or il.discrete), or copies an input to it with copy(...).")


class AddressRef:
    """``trace[address]`` inside a transform: where to read, write or copy."""

    __slots__ = ("handle", "address")

    def __init__(self, handle, address):
        self.handle, self.address = handle, address

    def describe(self) -> str:
        return f"{self.handle.name}[{format_address(self.address)}]" if self.address else f"{self.handle.name}[()]"

    def __repr__(self):
        return f"<{self.describe()}>"

    def _not_a_value(self, *args):
        """``model_in["k"] == 1``, ``model_in["mu"] - u``, ...: an address used as if it were its
        value (a read or a write forgotten)."""
        frame = sys._getframe(1)
        if self.handle.is_input:
            fix = f"read it first: read({self.describe()}, il.discrete) or read({self.describe()}, il.continuous)"
        else:
            fix = f"an output address is only written: write({self.describe()}, value, label)"
        raise TransformError(f"{self.describe()} is an address, not its value ({_line_of(frame)}): {fix}.")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _not_a_value
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = _not_a_value
    __matmul__ = __rmatmul__ = __neg__ = __pos__ = __abs__ = _not_a_value
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _not_a_value
    __bool__ = __float__ = __int__ = __index__ = __len__ = __iter__ = __getitem__ = _not_a_value
    __hash__ = object.__hash__


def _line_of(frame) -> str:
    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return f"line {frame.f_lineno}: {text}" if text else f"line {frame.f_lineno}"


def _check_ref(ref, what):
    if not isinstance(ref, AddressRef):
        raise TransformError(
            f"{what} expects a trace address such as model_in[\"k\"], got {ref!r}"
        )
    return ref


def _caller_line():
    """The caller's call site ``(code, offset)``; :func:`~imcmc_lab.core.effects.resolve_line`
    finds its line when a message needs it."""
    frame = sys._getframe(2)
    return (frame.f_code, frame.f_lasti)


# read and write run once per statement of every move: the checks are inlined as type tests
_getframe = sys._getframe

def read(ref, label):
    """The value at an input address; a tracked value if ``label`` is ``continuous``."""
    if type(ref) is not AddressRef:
        _check_ref(ref, "read")
    if type(label) is not Label:
        label = _as_label(label)
    frame = _getframe(1)
    return ref.handle.interp.read(ref, label, (frame.f_code, frame.f_lasti))


def exists(ref) -> bool:
    """Whether an input trace has this address (a leaf or a namespace); discrete information."""
    ref = _check_ref(ref, "exists")
    return ref.handle.interp.exists(ref, _caller_line())


def write(ref, value, label):
    """Set an output address to ``value``."""
    if type(ref) is not AddressRef:
        _check_ref(ref, "write")
    if type(label) is not Label:
        label = _as_label(label)
    frame = _getframe(1)
    return ref.handle.interp.write(ref, value, label, (frame.f_code, frame.f_lasti))


def copy(source, destination):
    """Copy a leaf or a whole namespace from an input trace to an output trace unchanged."""
    source = _check_ref(source, "copy")
    destination = _check_ref(destination, "copy")
    return source.handle.interp.copy(source, destination, _caller_line())


_local = threading.local()


def current_handles():
    handles = getattr(_local, "handles", None)
    if handles is None:
        raise TransformError("tcall(...) can only be used inside a running transform")
    return handles


def tcall(other, *args):
    """Run another transform on the same traces (composition); returns its return value."""
    if not isinstance(other, Transform):
        raise TransformError(f"tcall expects a transform (made with @il.transform), got {other!r}")
    return other.run_on(current_handles(), *args)


class Transform:
    """A trace transform (built by :func:`transform`).

    ``one_trace`` transforms have the signature ``(t_in, t_out, *args)``.
    ``inverse`` is set by :func:`pair_bijections`.

    ``autodiff`` chooses how the Jacobian's derivatives are taken: ``"auto"``
    (default) runs the transform on floats with forward-mode derivatives
    (:mod:`.dual`) and re-runs it on torch autograd tensors when it uses
    something that path does not model; ``"torch"`` always uses autograd.
    ``torch_fallbacks`` counts those re-runs and ``last_fallback`` says why the
    last one happened. ``float_leaves`` keeps the float path's last reads, one per
    address, to reuse for an unchanged choice (see ``float_backend.FloatBackend``).

    ``compile`` (default True): a move with ``autodiff="auto"`` and no checks may be served
    by generated code, traced once per branch of the transform (:mod:`.compiled`), with
    results bit-identical to the interpreter's; anything the generated code cannot decide
    runs the interpreter. ``compiled`` reports what it did (keys, hits, misses, refusals).
    """

    def __init__(self, fn, one_trace=False, name=None, autodiff="auto", compile=True):
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "transform")
        self.one_trace = one_trace
        self.inverse = None
        self.__doc__ = fn.__doc__
        self.__module__ = getattr(fn, "__module__", None)
        self.__qualname__ = getattr(fn, "__qualname__", self.name)
        if autodiff not in ("auto", "torch"):
            raise TransformError(f'autodiff is "auto" or "torch", got {autodiff!r}')
        self.autodiff = autodiff
        self.torch_fallbacks = 0
        self.last_fallback = None
        # the float path's leaves, kept across runs (see float_backend.FloatBackend)
        self.float_leaves = {}
        self.compile = bool(compile)
        self.compiled = CompileReport()
        self._compiled_cache = None      # a compiled.cache.CompiledTransform, made by apply_transform

    def __getstate__(self):
        # generated code and locks stay behind: a copy compiles its own keys
        return dict(self.__dict__, _compiled_cache=None, compiled=CompileReport())

    def run_on(self, handles, *args):
        model_in, aux_in, model_out, aux_out = handles
        saved = getattr(_local, "handles", None)
        _local.handles = handles
        try:
            if self.one_trace:
                return self.fn(model_in, model_out, *args)
            return self.fn(model_in, aux_in, model_out, aux_out, *args)
        finally:
            _local.handles = saved

    def __reduce_ex__(self, protocol):
        # the module attribute is this wrapper, so pickle's default (fn by name) would refuse
        return reduce_by_name(self, protocol, super().__reduce_ex__)

    def __call__(self, *args, **kwargs):
        raise TransformError(
            f"transform {self.name} is not called directly: pass it to il.involutive_mcmc, "
            f"il.apply_transform or il.check_involution, or compose it with tcall({self.name}, ...)"
        )

    def __repr__(self):
        form = "(t_in) to (t_out)" if self.one_trace else "(model_in, aux_in) to (model_out, aux_out)"
        return f"<transform {self.name} {form}>"


def transform(fn=None, *, one_trace=None, name=None, autodiff="auto", compile=True):
    """Decorator: make a trace transform from a Python function.

    The four-trace form is ``def f(model_in, aux_in, model_out, aux_out, *args)``;
    a function with exactly two parameters is the one-trace form
    ``def f(t_in, t_out)`` (or say ``@transform(one_trace=True)``). ``name``
    (default: the function's) is what messages and records call it, useful when
    a factory makes several transforms from one ``def``. ``autodiff`` and ``compile``: see
    :class:`Transform`.
    """

    def wrap(fn):
        form = one_trace
        if form is None:
            params = [p for p in inspect.signature(fn).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            form = len(params) == 2
        return Transform(fn, one_trace=form, name=name, autodiff=autodiff, compile=compile)

    return wrap(fn) if fn is not None else wrap


def pair_bijections(f: Transform, f_inv: Transform):
    """Declare two transforms mutually inverse (Gen's ``pair_bijections!``)."""
    f.inverse, f_inv.inverse = f_inv, f
    return f, f_inv


def involution_from_bijections(f: Transform, f_inv: Transform, forward):
    """An involution that applies ``f`` on its domain and ``f_inv`` elsewhere.

    ``forward`` says which side a pair of input traces is on: either the address
    of a discrete auxiliary choice that is ``True`` for ``f`` (the involution
    then writes its negation to ``aux_out``), or a function
    ``forward(model_in, aux_in) -> bool`` that reads what it needs.
    The result is an involution exactly when ``f`` and ``f_inv`` are inverse
    bijections; ``check_involution`` tests that.
    """
    pair_bijections(f, f_inv)
    if callable(forward):
        def both(model_in, aux_in, model_out, aux_out):
            return tcall(f if forward(model_in, aux_in) else f_inv)
    else:
        flag = normalize_address(forward)

        def both(model_in, aux_in, model_out, aux_out):
            go = bool(read(aux_in[flag], discrete))
            write(aux_out[flag], not go, discrete)
            return tcall(f if go else f_inv)

    both.__name__ = f"involution({f.name}, {f_inv.name})"
    return Transform(both)
