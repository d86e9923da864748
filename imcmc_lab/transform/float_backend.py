"""The float derivative backend: forward-mode derivatives on Python floats (:mod:`.dual`).

A continuous read becomes a :class:`~.dual.Dual` (or a :class:`~.dual.DualVector`)
whose derivative dict is keyed by input coordinate ids; a written value keeps
its tangents (one derivative dict per coordinate); the Jacobian's rows are read
off those tangents. Anything :mod:`.dual` does not model raises
:class:`~.dual.NeedsTorch`, and the interpreter runs the transform again on
:mod:`.autograd_backend`.

The backend interface, shared with :class:`~.autograd_backend.AutogradBackend`:
``leaf(record)`` for a continuous read, ``written(value, label)`` for a write,
``derivative_source(write, dist)`` for a written output's rows, and, for
:func:`.jacobian.reduced_jacobian`, ``unit_runs`` and ``rows``.
"""

from __future__ import annotations

import contextlib
from itertools import compress, count
from operator import is_not

import torch
from numpy import array as _array

from ..core.values import as_real, float64_vector
from ..modeling.runtime import owned
from .dual import MAX_VECTOR, Dual, DualVector, IdRange, NeedsTorch, _dual, unit_derivatives
from .language import continuous

__all__ = ["FloatBackend", "float_write"]

_from_numpy = torch.from_numpy


def float_write(value, label):
    """``(value, tangent)`` of a write on the float path, as autograd would store it. The
    value is the engine's own: new, or a copy of a tensor the transform may still hold
    (the update that uses it takes it without copying, see ``runtime.OwnedChoices``)."""
    t = type(value)
    if label is not continuous:
        if t is Dual:
            return value.v, None          # like tensor.item()
        if t is DualVector:
            raise NeedsTorch
        if isinstance(value, torch.Tensor) and value.ndim == 0:
            return value.item(), None
        return owned(value), None
    if t is Dual:
        return _from_numpy(_array(float(value.v))), [value.d]    # float64, 0-d: faster than scalar_tensor
    if t is DualVector:
        return float64_vector(value.tolist()), [x.d for x in value.items]
    if isinstance(value, torch.Tensor):
        if value.requires_grad:
            raise NeedsTorch
        value = value.clone() if value.dtype == torch.float64 else value.to(torch.float64)
        return value, [{}] * value.numel()
    if isinstance(value, (list, tuple)):
        raise NeedsTorch          # lists (of Duals or tensors): autograd's conversion rules
    value = as_real(owned(value))     # a Python number (a constant), or an array (copied)
    return value, [{}] * value.numel()


_NO_CONTEXT = contextlib.nullcontext()     # reusable: one for every run, not one per move


class FloatBackend:
    """Derivatives as sparse ``{input coordinate id: derivative}`` dicts on Python floats.

    ``leaves``: ``{(side, address): (record, version, ids, tracked)}``, the transform's
    own (:attr:`~.language.Transform.float_leaves`), kept across its runs: a read of the
    same record (an unchanged choice: the same object, its tensor not changed in place
    since) at the same coordinate ids gets the same Dual or DualVector again instead of
    a new one (Duals are never changed once made; see :mod:`.dual`)."""

    floats = True
    __slots__ = ("n_coordinates", "leaves")

    def __init__(self, leaves=None):
        self.n_coordinates = 0      # ids handed out to input coordinates
        self.leaves = {} if leaves is None else leaves

    def running(self):
        return _NO_CONTEXT

    def leaf_at(self, key, record):
        """:meth:`leaf` of the read at ``key``, reused where the same record was read there
        before at the same ids."""
        value = record.value
        first = self.n_coordinates
        seen = self.leaves.get(key)
        if seen is not None and seen[0] is record and seen[2].start == first and seen[1] == value._version:
            ids = seen[2]
            self.n_coordinates = ids.stop
            return ids, seen[3]
        ids, tracked = self.leaf(record)
        self.leaves[key] = (record, value._version, ids, tracked)
        return ids, tracked

    def leaf(self, record):
        """``(coordinate ids, Dual or DualVector)`` for a continuous read; the ids of one
        read are consecutive, given as a ``range``."""
        value = record.value
        first = self.n_coordinates
        if not value.ndim:
            self.n_coordinates = first + 1
            ids = range(first, first + 1)
            return ids, _dual(float(value), unit_derivatives(ids)[0])
        if value.ndim != 1 or value.numel() > MAX_VECTOR:
            raise NeedsTorch
        values = value.tolist()
        simplex = record.dist.simplex
        n_free = len(values) - 1 if simplex else len(values)
        ids = range(first, first + n_free)
        items = list(map(_dual, values, unit_derivatives(ids)))
        if simplex:
            # As on autograd: the free weights, and 1 - their sum. Its derivative is
            # -1 for every free weight: one entry for them all (see dual.Dual).
            items.append(_dual(1.0 - sum(values[:-1]), {IdRange(ids): -1.0} if ids else {}))
        self.n_coordinates = first + n_free
        return ids, DualVector(items)

    #: ``written(value, label)``: ``(value, tangents)`` of a write (:func:`float_write`)
    written = staticmethod(float_write)

    @staticmethod
    def derivative_source(write, dist):
        """The tangents of a written output's free coordinates."""
        return write[5][:-1] if dist.simplex else write[5]      # (write[5]: write.tangent)

    @staticmethod
    def unit_runs(tangents, ids):
        """Pass-through runs ``(k, j, n)`` (see :func:`.jacobian.find_pass_through`) of a
        vector output and the input at the same address, whose coordinate ids are ``ids``.

        A tangent passes through if it is exactly the unit row ``{i: 1.0}`` of one of
        ``ids``, unless an earlier row took that coordinate. Such a tangent is nearly
        always the input coordinate's own shared dict (:func:`.dual.unit_derivatives`),
        and so are the ones after it, of the coordinates after it, where a slice of the
        input is written back: a run is extended by identity, in C, and only the rows
        around runs are checked one by one."""
        units = unit_derivatives(ids)
        runs = []
        k, n_rows, n_ids, start = 0, len(tangents), len(ids), ids.start
        while k < n_rows:
            d = tangents[k]
            if len(d) == 1:
                i, = d
                if type(i) is int and start <= i < start + n_ids and d[i] == 1.0:
                    j = i - start
                    limit = min(n_rows - k, n_ids - j)
                    for _, j2, n2 in runs:
                        if j2 <= j < j2 + n2:
                            break                               # taken by an earlier row
                        if j < j2 < j + limit:
                            limit = j2 - j                      # a run may not reach a taken one
                    else:
                        others = map(is_not, tangents[k + 1:k + limit], units[j + 1:j + limit])
                        n = 1 + next(compress(count(), others), limit - 1)
                        runs.append((k, j, n))
                        k += n
                        continue
            k += 1
        return runs

    @staticmethod
    def rows(outputs, inputs, kept_rows, kept_cols, passes):
        """``(matrix as nested lists, None, row source)`` of the kept rows and columns, read
        off the tangents: each id's own derivative, plus an IdRange key's at every kept id
        in it. (None: the nonzero pattern is taken from the matrix when needed.)"""
        col_of, q = {}, 0
        for _, _, j, ids in kept_cols:      # (a loop: a comprehension is a call of its own on 3.11)
            col_of[ids[j]] = q
            q += 1
        n_cols = len(kept_cols)
        dense, range_cols = [], {}
        for _, _, k, tangents in kept_rows:
            entries = [0.0] * n_cols
            for i, g in tangents[k].items():
                q = col_of.get(i)
                if q is not None:
                    entries[q] += g
                elif type(i) is IdRange:
                    qs = range_cols.get(i)
                    if qs is None:
                        qs = range_cols[i] = [q for j, q in col_of.items() if j in i.ids]
                    for q in qs:
                        entries[q] += g
            dense.append(entries)
        return dense, None, _TangentRows([ts for _, ts in outputs])


class _TangentRows:
    """The float path's stand-in for an autograd graph: rows of the Jacobian of every
    written coordinate (one tangent list per output), with respect to any list of
    input coordinate-id ranges."""

    __slots__ = ("tangents",)

    def __init__(self, tangents):
        self.tangents = tangents

    def rows(self, leaves):
        col = {}
        for ids in leaves:
            for i in ids:
                col[i] = len(col)
        out = []
        for d in (d for ts in self.tangents for d in ts):
            row = [0.0] * len(col)
            for i, g in d.items():
                for k in (i.ids if type(i) is IdRange else (i,)):
                    j = col.get(k)
                    if j is not None:
                        row[j] += g
            out.append(row)
        return torch.tensor(out, dtype=torch.float64).reshape(len(out), len(col))
