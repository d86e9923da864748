"""Tracing a transform once, on symbolic values, into the items of one branch key.

:class:`Tracer` is the interpreter behind four stand-in trace handles (see
:mod:`.symbolic` for the values it hands out). Every read also emits the per-move guards
that make the generated code as strict as the engine's interpreter: the record's kind
(discrete or continuous) against the label, a discrete value's exact type, a continuous
value's dimension and a vector's simplex flag. Whatever the generated code cannot decide
for itself makes it return None (a miss): the interpreter then runs the move from the start.
"""

from __future__ import annotations

import torch

from ..language import AddressRef, discrete
from .accounting import AUX, MODEL, Accounting, Returns
from .symbolic import (MAX_VECTOR, TooCostly, MINUS_ONE, ONE, TF, Ex, Lin, SVec, SymInt, Unsupported, VecRead, _OPS, _PY,
                       _lin_value, addr_code, addr_conc, addr_deps, quiet, set_tracer, T)

_F = {MODEL: "mf", AUX: "af"}
MAX_ITEMS = 3000        # statements and guards of one key: a longer trace stops (refused)
MAX_STEPS = 10000       # statements and decisions of one trace: a longer one stops (key refused)


class _Handle:
    """A stand-in for :class:`..language.TraceHandle`: indexing gives an AddressRef whose
    address may hold symbolic keys."""

    __slots__ = ("name", "side", "is_input", "interp")

    def __init__(self, name, side, is_input, interp):
        self.name, self.side, self.is_input, self.interp = name, side, is_input, interp

    def __getitem__(self, address):
        keys = address if type(address) is tuple else (address,)
        for k in keys:          # (other keys: the engine normalises them; not followed here)
            if type(k) is not str and type(k) is not int and type(k) is not SymInt:
                raise Unsupported(f"an address key of type {type(k).__name__}")
        ref = object.__new__(AddressRef)
        ref.handle = self
        ref.address = keys
        return ref

    @property
    def trace(self):
        raise Unsupported("the whole input trace")


class Tracer(Accounting, Returns):
    """One run of a transform on symbolic values: the statements and guards (``items``) of
    its branch key, what it read, wrote and copied, and the accounting of :mod:`.accounting`."""

    def __init__(self, x, y, meter):
        self.flats = {MODEL: x.flat_records(), AUX: y.flat_records()}
        self.items = []
        self.n = 0
        self.decided = {}
        self.reads = []         # (side, address, label, value)
        self.cont_reads = []    # (no, side, address, VecRead or None)
        self.writes = []        # (side, address, label, value)
        self.copies = []        # (src side, src address, dst side, dst address, discrete)
        self.vec_values = {}
        self.post = []          # (address, expected membership in the new model trace)
        self.env = {}           # variable -> its concrete value
        self.kinds = {MODEL: [], AUX: []}       # per output, in the returned dicts' order
        self.refused = None     # set by any Unsupported raised while this tracer runs
        self.meter = meter      # [steps of this transform's traces so far, its budget]
        self.steps = 0

    # -- code ------------------------------------------------------------
    def step(self):
        """Count one step of tracing (a statement or a decision): budgets in steps, not
        seconds, so what compiles does not depend on the machine's speed or load."""
        self.steps += 1
        meter = self.meter
        meter[0] += 1
        if meter[0] > meter[1]:
            raise TooCostly("the learning budget is spent")
        if self.steps > MAX_STEPS:
            raise Unsupported(f"a trace of more than {MAX_STEPS} steps")

    def name(self, prefix="t"):
        self.n += 1
        return f"{prefix}{self.n}"

    def stmt(self, code, v, deps, prefix="t"):
        if len(self.items) > MAX_ITEMS:
            raise TooCostly(f"a key of more than {MAX_ITEMS} statements")
        self.step()
        name = self.name(prefix)
        self.items.append(("s", name, code, tuple(deps)))
        return Ex(v, name, False)

    def guard(self, code, outcome, deps):
        """Record that ``code`` evaluated to ``outcome`` (the generated code re-checks it)."""
        names = []
        for d in deps:
            if type(d) is Ex:
                if not d.lit:
                    names.append(d.code)
            elif type(d) is Lin:
                names.extend(v for v, _ in d.terms)
            else:
                names.append(d)
        if code in self.decided:
            if self.decided[code] != outcome:
                raise Unsupported("a guard decided two ways")
            return outcome
        self.decided[code] = outcome
        self.items.append(("g", code, outcome, tuple(names)))
        return outcome

    def decide(self, lin, op, outcome):
        self.step()
        c = lin.const()
        if c is not None:
            if _PY[op](c, 0) != bool(outcome):
                raise Unsupported("a static comparison disagrees with the values")
            return bool(outcome)
        return self.guard(f"{lin.code()} {_OPS[op]} 0", bool(outcome), (lin,))

    def concrete(self, s):
        """Specialise on ``s``'s value: a guard whose answer is the value (a switch in the code)."""
        if s.lin.const() is not None:
            return s.lin.c
        return self.guard(s.lin.code(), int(s.value), (s.lin,))

    def concrete_lin(self, x):
        return self.concrete(x) if isinstance(x, SymInt) else x

    def same_int(self, a, b):
        return self.decide(Lin.of(a) - Lin.of(b), "eq", _conc(a) == _conc(b))

    def same_addr(self, a, b):
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            if type(x) is str or type(y) is str:
                if x != y:
                    return False
        return all(self.same_int(x, y) for x, y in zip(a, b) if type(x) is not str)

    def find_key(self, d, k):
        if k in d:
            return k
        if k[0] != "c" or k[2] is None:
            return None
        for k2 in d:
            if k2[0] == "c" and k2[1] == k[1] and k2[2] is not None:
                if self.decide(Lin(*k[2]) - Lin(*k2[2]), "eq", _lin_value(k[2]) == _lin_value(k2[2])):
                    return k2
        return None

    # -- the language ----------------------------------------------------
    def _record(self, side, a, is_discrete):
        """The record at ``a`` (trace time) and its per-move guards: present (a KeyError is a
        miss) and of the same kind, as the interpreter's label check demands."""
        rec = self.flats[side].get(addr_conc(a))
        if rec is None or bool(rec.dist.discrete) != is_discrete:
            raise Unsupported("missing address or wrong label (the engine's error)")
        r = self.stmt(f"{_F[side]}[{addr_code(a)}]", rec, addr_deps(a), "r")
        self.guard(f"{r.code}.dist.discrete", bool(rec.dist.discrete), (r,))
        return rec, r

    def read(self, ref, label, line):
        h = ref.handle
        if not h.is_input:
            raise Unsupported("read of an output")
        side, a = h.side, ref.address
        for s, a2, label2, value in self.reads:
            if s == side and self.same_addr(a, a2):
                if label2 is not label:
                    raise Unsupported("label")
                return value
        rec, r = self._record(side, a, label is discrete)
        if label is discrete:
            value = self._discrete_value(rec, r)
        else:
            value = self._continuous_value(side, a, rec, r)
        self.reads.append((side, a, label, value))
        return value

    def _discrete_value(self, rec, r):
        v = rec.value
        if type(v) is not int and type(v) is not bool:
            raise Unsupported("a discrete value that is not an int")
        self.guard(f"type({r.code}.value) is {type(v).__name__}", True, (r,))
        x = self.stmt(f"{r.code}.value", v, (r.code,), "d")
        self.env[x.code] = int(v)
        return SymInt(v, Lin(((x.code, 1),), 0))

    def _continuous_value(self, side, a, rec, r):
        no = len(self.cont_reads)
        t = rec.value
        vr = None
        ndim = getattr(t, "ndim", None)
        if ndim not in (0, 1) or type(t) is not torch.Tensor:
            raise Unsupported("a continuous value that is not a 0-d or 1-d tensor")
        self.guard(f"{r.code}.value.ndim", ndim, (r,))
        if ndim == 0:
            value = TF(self.stmt(f"{r.code}.value.item()", float(t), (r.code,)), {("c", no, None): ONE})
        else:
            values = t.tolist()
            w = self.stmt(f"{r.code}.value.tolist()", values, (r.code,), "W")
            nx = self.stmt(f"len({w.code})", len(values), (w.code,), "n")
            n = SymInt(len(values), Lin(((nx.code, 1),), 0))
            self.env[nx.code] = len(values)
            if not (n <= MAX_VECTOR):
                raise Unsupported("a long vector (autograd in the engine)")
            simplex = bool(rec.dist.simplex)
            self.guard(f"bool({r.code}.dist.simplex)", simplex, (r,))
            vr = VecRead(no, w.code, nx.code, simplex)
            self.vec_values[no] = values
            if vr.simplex:      # (one weight: no free coordinate; its "R" key meets no column)
                value = SVec([("l", vr, 0, n - 1), ("e", vr.last())])
            else:
                value = SVec([("l", vr, 0, n)])
        self.cont_reads.append((no, side, a, vr))
        return value

    def _check_new_output(self, side, a):
        for s, a2, *_ in self.writes:
            if s == side and self.same_addr(a, a2):
                raise Unsupported("double write (the engine's error)")
        for _, _, s, a2, _ in self.copies:
            if s == side and self.same_addr(a, a2):
                raise Unsupported("double write (the engine's error)")

    def write(self, ref, value, label, line):
        h = ref.handle
        if h.is_input or not ref.address:
            raise Unsupported("write to an input")
        self._check_new_output(h.side, ref.address)
        self.writes.append((h.side, ref.address, label, value))

    def copy(self, src, dst, line):
        if not src.handle.is_input or dst.handle.is_input or not dst.address:
            raise Unsupported("copy direction")
        rec = self.flats[src.handle.side].get(addr_conc(src.address))
        if rec is None:
            raise Unsupported("copy of a namespace")
        self._record(src.handle.side, src.address, bool(rec.dist.discrete))
        self._check_new_output(dst.handle.side, dst.address)
        self.copies.append((src.handle.side, src.address, dst.handle.side, dst.address,
                            bool(rec.dist.discrete)))

    def exists(self, ref, line):
        raise Unsupported("exists")


for _name in ("read", "write", "copy", "exists"):
    setattr(Tracer, _name, quiet(getattr(Tracer, _name)))
_Handle.__getitem__ = quiet(_Handle.__getitem__)


def _conc(x):
    return x.value if isinstance(x, SymInt) else x


def trace_once(f, x, y, app, env, meter):
    """The tracer of ``f`` on ``(x, y)`` after its accounting (``app``: the interpreter's
    application there). ``env`` (an :class:`.environment.Environment`) records and watches
    what the transform's code reaches while it runs; ``meter``: see :meth:`Tracer.step`."""
    tr = Tracer(x, y, meter)
    handles = (_Handle("model_in", MODEL, True, tr), _Handle("aux_in", AUX, True, tr),
               _Handle("model_out", MODEL, False, tr), _Handle("aux_out", AUX, False, tr))
    set_tracer(tr)
    try:
        previous = env.start()
        try:
            f.run_on(handles)
        finally:
            env.stop(previous)
        if tr.refused is not None:      # (the transform caught it: its other branch is not the key)
            raise Unsupported(f"the transform caught the tracer's refusal ({tr.refused})")
        tr.finish(app)
    finally:
        set_tracer(None)
    return tr
