"""The Jacobian of a transform's continuous part, with copy sparsity (paper Sec. 5.1).

Rows are output coordinates, columns input coordinates (``J[i, j] = ∂out_i/∂in_j``).
A row that is an exact copy of one input coordinate is a unit row: expanding the
determinant along it removes that row and that column. So

* explicit copies (``copy``) and implicit copies (model addresses the transform
  leaves alone) are eliminated without any autodiff;
* single coordinates of a vector choice that pass through unchanged (the
  untouched entries of a mixture's weight vector) are eliminated: on the float
  path (:mod:`.dual`) their derivative is exactly a unit row; on the torch path
  they are found by value and verified with one vector-Jacobian product;
* the rest is read off the float path's forward-mode derivatives (or computed
  with one batched autograd pass) and split into independent blocks (connected
  components of the read -> write dependency graph), each with its own
  determinant.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from itertools import accumulate, compress, count
from operator import is_not

import torch

from .dual import IdRange, unit_derivatives

__all__ = ["Coordinate", "CoordinateGroup", "JacobianRecord", "Block", "reduced_jacobian", "free_part"]


class Coordinate(tuple):
    """``(trace, address, index)``: one real coordinate; ``index`` is None for scalars."""

    __slots__ = ()

    def __new__(cls, trace, address, index=None):
        return tuple.__new__(cls, (trace, address, index))

    @property
    def trace(self):
        return self[0]

    @property
    def address(self):
        return self[1]

    @property
    def index(self):
        return self[2]

    def label(self) -> str:
        from ..core.address import format_address

        text = f"{self[0]}[{format_address(self[1])}]"
        return text if self[2] is None else f"{text}[{self[2]}]"

    def __repr__(self):
        return self.label()


class CoordinateGroup(tuple):
    """``(trace, address, size, vector)``: the coordinates of one choice, unexpanded.

    Records keep groups so that a move over ``n`` implicitly copied data points
    costs O(number of addresses), not O(n) coordinate objects; :meth:`expand`
    gives the :class:`Coordinate` list when a view asks for it.
    """

    __slots__ = ()

    def __new__(cls, trace, address, dist, value):
        """The coordinates of ``free_part(dist, value)``, counted without slicing the value."""
        if not (isinstance(value, torch.Tensor) and value.ndim > 0):
            return tuple.__new__(cls, (trace, address, 1, False))
        size = value.numel()
        if dist.simplex and size:
            size -= size // value.shape[-1]
        return tuple.__new__(cls, (trace, address, size, True))

    @property
    def size(self):
        return self[2]

    @property
    def vector(self):
        return self[3]

    @property
    def key(self):
        """``(side, address)``: the same for a choice's input and output groups."""
        return (self[0].split("_")[0], self[1])

    # (Coordinates are made with tuple.__new__, as Coordinate() does, without its
    # Python-level __new__: the float path makes one per row and column.)
    def coordinate(self, index):
        """The :class:`Coordinate` of the ``index``-th coordinate."""
        return _tuple_new(Coordinate, (self[0], self[1], index if self[3] else None))

    def expand(self):
        return [self.coordinate(i) for i in range(self[2])]


_tuple_new = tuple.__new__


def _coordinates(groups, indices):
    """The :class:`Coordinate` at each of ``indices``, positions in the concatenated
    coordinates of ``groups``."""
    starts = list(accumulate((g.size for g in groups), initial=0))
    out = []
    for i in indices:
        k = bisect_right(starts, i) - 1      # (past any empty group starting at i)
        out.append(groups[k].coordinate(i - starts[k]))
    return out


def _as_matrix(matrix, rows, cols):
    """``matrix`` as a float64 tensor of shape ``(len(rows), len(cols))``: the float path
    keeps its matrices as nested lists until a view or test asks for them."""
    if isinstance(matrix, torch.Tensor):
        return matrix
    return torch.tensor(matrix, dtype=torch.float64).reshape(len(rows), len(cols))


class Block:
    """An independent square block of the reduced Jacobian. ``matrix`` may be given as
    nested lists of floats (the float path); it becomes a tensor when first read."""

    __slots__ = ("rows", "cols", "_matrix", "logabsdet")

    def __init__(self, rows, cols, matrix, logabsdet):
        self.rows, self.cols, self._matrix, self.logabsdet = rows, cols, matrix, logabsdet

    @property
    def matrix(self):
        self._matrix = _as_matrix(self._matrix, self.rows, self.cols)
        return self._matrix

    @property
    def size(self):
        return (len(self.rows), len(self.cols))

    def __repr__(self):
        return f"Block({len(self.rows)}x{len(self.cols)}, log|det|={self.logabsdet:.4g})"


class JacobianRecord:
    """The Jacobian of one transform application, as a record for people and widgets.

    ``inputs``/``outputs``: every continuous coordinate on each side.
    ``eliminated``: ``(input, output, kind)`` with kind ``"copy"``, ``"implicit"``
    (model address left unchanged) or ``"pass-through"`` (vector coordinate).
    ``rows``/``cols``: the coordinates of the reduced matrix ``reduced``;
    ``blocks`` its independent parts; ``logabsdet`` the total ``log |det J|``.

    The engine gives a function returning :class:`CoordinateGroup` lists (one
    entry per address: inputs, outputs, eliminated), called only when a view or
    ``full_size`` needs them, and the pass-through eliminations as a list or a
    function returning it; ``inputs``, ``outputs`` and ``eliminated`` are
    expanded to single coordinates on first access.
    """

    def __init__(self, groups, pass_through, rows, cols, reduced, blocks, logabsdet, graph=None):
        self._groups_fn, self._groups = groups, None
        self._pass_through = pass_through
        self.rows, self.cols, self._reduced = rows, cols, reduced
        self.blocks, self.logabsdet = blocks, logabsdet
        self._graph = graph
        self._dense = None
        self._expanded = None

    def _group_lists(self):
        if self._groups is None:
            self._groups = self._groups_fn() if callable(self._groups_fn) else self._groups_fn
        return self._groups

    @property
    def input_groups(self):
        return self._group_lists()[0]

    @property
    def output_groups(self):
        return self._group_lists()[1]

    @property
    def eliminated_groups(self):
        """``(input group, output group, kind)`` per eliminated copy or implicit copy,
        unexpanded (views of large traces count coordinates without making them)."""
        return self._group_lists()[2]

    @property
    def pass_through(self):
        """The pass-through eliminations ``(input, output, "pass-through")``."""
        if callable(self._pass_through):
            self._pass_through = self._pass_through()
        return self._pass_through

    def _expand(self):
        if self._expanded is None:
            inputs, outputs, eliminated_groups = self._group_lists()
            eliminated = [(ci, co, kind) for gi, go, kind in eliminated_groups
                          for ci, co in zip(gi.expand(), go.expand())]
            self._expanded = ([c for g in inputs for c in g.expand()],
                              [c for g in outputs for c in g.expand()],
                              eliminated + list(self.pass_through))
        return self._expanded

    @property
    def inputs(self):
        return self._expand()[0]

    @property
    def outputs(self):
        return self._expand()[1]

    @property
    def eliminated(self):
        return self._expand()[2]

    @property
    def reduced(self) -> torch.Tensor:
        """The reduced matrix (rows ``rows``, columns ``cols``); the float path gives it as
        nested lists, made a tensor on first access."""
        self._reduced = _as_matrix(self._reduced, self.rows, self.cols)
        return self._reduced

    @property
    def reduced_size(self):
        return (len(self.rows), len(self.cols))

    @property
    def full_size(self):
        return (sum(g.size for g in self.output_groups), sum(g.size for g in self.input_groups))

    def dense(self) -> torch.Tensor:
        """The full Jacobian over every continuous coordinate (computed on demand)."""
        if self._dense is None:
            self._dense = _dense_jacobian(self)
        return self._dense

    def __repr__(self):
        return (f"JacobianRecord(full {self.full_size[0]}x{self.full_size[1]}, reduced "
                f"{self.reduced_size[0]}x{self.reduced_size[1]} in {len(self.blocks)} block(s), "
                f"log|det| = {self.logabsdet:.6g})")


def _flatten(value):
    return value.reshape(-1) if isinstance(value, torch.Tensor) else torch.as_tensor([value])


def free_part(dist, value):
    """The coordinates of ``value`` that Jacobians use: all but the last weight of a
    simplex-valued choice (its density is on the first ``k - 1``), else all."""
    return value[..., :-1] if dist.simplex and isinstance(value, torch.Tensor) else value


def _batched_rows(out_cat, leaves, row_ids, extra=None):
    """Rows ``row_ids`` of d out_cat / d leaves, in one batched autodiff pass; with
    ``extra`` (a vector over out_cat), also the vector-Jacobian product ``extra @ J``
    as a last row, in the same pass."""
    n_cols = sum(l.numel() for l in leaves)
    n_rows = len(row_ids) + (extra is not None)
    if not n_rows or not out_cat.requires_grad:
        return torch.zeros((n_rows, n_cols), dtype=torch.float64)
    selector = torch.zeros((n_rows, out_cat.numel()), dtype=out_cat.dtype)
    if row_ids:
        selector[torch.arange(len(row_ids)), torch.as_tensor(row_ids)] = 1.0
    if extra is not None:
        selector[-1] = extra
    try:
        grads = torch.autograd.grad(out_cat, leaves, grad_outputs=selector, retain_graph=True,
                                    allow_unused=True, is_grads_batched=True)
    except RuntimeError:
        # Some operations have no batching rule: fall back to one pass per row.
        grads = [[] for _ in leaves]
        for k in range(n_rows):
            g = torch.autograd.grad(out_cat, leaves, grad_outputs=selector[k], retain_graph=True,
                                    allow_unused=True)
            for j, gj in enumerate(g):
                grads[j].append(torch.zeros_like(leaves[j]) if gj is None else gj)
        grads = [torch.stack(g) for g in grads]
    parts = []
    for leaf, g in zip(leaves, grads):
        if g is None:
            parts.append(torch.zeros((n_rows, leaf.numel()), dtype=torch.float64))
        else:
            parts.append(g.reshape(n_rows, -1))
    return torch.cat(parts, dim=1) if parts else torch.zeros((n_rows, 0), dtype=torch.float64)


def _components(matrix):
    """Connected components of the bipartite nonzero pattern: list of (rows, cols)."""
    m, n = matrix.shape
    return _components_of(m, n, torch.nonzero(matrix).tolist())


def _components_of(m, n, nonzeros):
    """Connected components of an ``m x n`` pattern given its nonzero ``(row, col)`` pairs,
    as ``(rows, cols)`` lists in order of their first row (then column)."""
    parent = list(range(m + n))
    for i, j in nonzeros:
        a, b = i, m + j
        while parent[a] != a:
            parent[a] = a = parent[parent[a]]
        while parent[b] != b:
            parent[b] = b = parent[parent[b]]
        if a != b:
            parent[a] = b
    groups = {}
    for i in range(m + n):
        r = i
        while parent[r] != r:
            r = parent[r]
        group = groups.get(r)
        if group is None:
            group = groups[r] = ([], [])
        if i < m:
            group[0].append(i)
        else:
            group[1].append(i - m)
    return list(groups.values())


def reduced_jacobian(outputs, inputs, floats=False):
    """Compute the reduced Jacobian and its log-determinant.

    ``outputs``: list of ``(CoordinateGroup, value tensor)`` for written continuous outputs;
    ``inputs``: list of ``(CoordinateGroup, autograd leaf)`` for remaining inputs
    (copies already removed), with as many coordinates as the outputs (the caller
    reports a dimension mismatch). Returns ``(reduced, pass_through, rows_source)``:
    ``pass_through`` is the list of pass-through eliminations, or a function returning
    it; ``rows_source`` is ``(outputs' derivative source, output groups)``, from which
    ``JacobianRecord.dense`` takes rows with respect to any inputs.
    With ``floats`` (the float path of :mod:`.dual`), each output value is its list of
    tangents (one derivative dict per coordinate) and each input leaf the ``range`` of
    its coordinate ids.
    """
    if floats:
        return _reduced_jacobian_floats(outputs, inputs)
    out_coords = [c for g, _ in outputs for c in g.expand()]
    in_coords = [c for g, _ in inputs for c in g.expand()]
    values = [v for _, v in outputs]
    leaves = [l for _, l in inputs]
    out_cat = torch.cat([_flatten(v).to(torch.float64) for v in values]) if values \
        else torch.zeros(0, dtype=torch.float64)
    # Pass-through coordinates of vector choices: an output coordinate equal to a
    # coordinate of the input at the same address. Verified below, then eliminated.
    candidates = _pass_through_candidates(outputs, inputs)
    full_rows = _rows_without(out_cat, leaves, len(out_coords), len(in_coords), candidates)
    if full_rows is None:     # a candidate is not a unit row: nothing passes through
        candidates = []
        full_rows = _rows_without(out_cat, leaves, len(out_coords), len(in_coords), candidates)
    rows = _remaining(len(out_coords), {r for r, _ in candidates})
    cols = _remaining(len(in_coords), {c for _, c in candidates})
    pass_through = [(in_coords[c], out_coords[r], "pass-through") for r, c in candidates]
    reduced = full_rows[:, cols] if cols else full_rows[:, :0]
    blocks, total = [], 0.0
    for brows, bcols in _components(reduced):
        sub = reduced[brows][:, bcols]
        if len(brows) != len(bcols):
            logdet = -math.inf
        else:
            sign, logdet = torch.linalg.slogdet(sub)
            logdet = -math.inf if float(sign) == 0 else float(logdet)
        blocks.append(Block([out_coords[rows[i]] for i in brows], [in_coords[cols[j]] for j in bcols],
                            sub.detach(), logdet))
        total += logdet
    record_rows = [out_coords[i] for i in rows]
    record_cols = [in_coords[j] for j in cols]
    return (record_rows, record_cols, reduced.detach(), blocks, total), pass_through, \
        (out_cat, [g for g, _ in outputs])


def _reduced_jacobian_floats(outputs, inputs):
    """:func:`reduced_jacobian` from forward-mode derivative dicts: the rows are read off
    the tangents, and a pass-through coordinate is one whose tangent is exactly the
    unit row of a coordinate of the same vector input. (The torch path finds
    candidates by equal value and then verifies the unit row; here the derivative
    itself is exact, and the unit row is what removing the row and column needs.)

    Only the rows and columns that remain get :class:`Coordinate` objects and matrix
    entries, so each pass-through coordinate of a long weight vector costs one check."""
    # One input's ids are consecutive: the column of id i is col0 + (i - ids.start).
    vector_inputs = {}                  # (side, address) of a vector input -> (ids, col0)
    n_cols = 0
    for group, ids in inputs:
        if group.vector:
            vector_inputs[group.key] = (ids, n_cols)
        n_cols += len(ids)
    passes = []                         # (first row, first column, length) of pass-through runs
    passed = {}                         # (side, address) of an input -> its passed (start, stop) spans
    kept = []                           # (coordinate, tangent) of every other row
    row = 0
    for group, tangents in outputs:
        match = vector_inputs.get(group.key) if group.vector else None
        if match is None:
            kept.extend(zip(group.expand(), tangents) if group.vector else [(group.coordinate(0), tangents[0])])
        else:
            ids, col0 = match
            runs, kept_rows = _pass_through_runs(tangents, ids)
            passed[group.key] = [(j, j + n) for _, j, n in runs]
            for k, j, n in runs:
                passes.append((row + k, col0 + j, n))
            for k in kept_rows:
                kept.append((group.coordinate(k), tangents[k]))
        row += len(tangents)
    col_of, cols = {}, []               # input id -> column of the reduced matrix; its coordinate
    for group, ids in inputs:
        if not group.vector:
            col_of[ids.start] = len(cols)
            cols.append(group.coordinate(0))
            continue
        spans = passed.get(group.key)
        for j in (range(len(ids)) if spans is None else _uncovered(spans, len(ids))):
            col_of[ids[j]] = len(cols)
            cols.append(group.coordinate(j))
    rows = [c for c, _ in kept]
    # The entries: each id's own derivative, plus an IdRange key's at every kept id in it.
    dense, nonzeros, range_cols = [], [], {}
    for p, (_c, d) in enumerate(kept):
        entries = [0.0] * len(cols)
        first, has_range = len(nonzeros), False
        for i, g in d.items():
            q = col_of.get(i)
            if q is not None:
                entries[q] += g
                if g != 0.0:
                    nonzeros.append((p, q))
            elif type(i) is IdRange:
                has_range = True
                qs = range_cols.get(i)
                if qs is None:
                    qs = range_cols[i] = [q for j, q in col_of.items() if j in i.ids]
                for q in qs:
                    entries[q] += g
        if has_range:                   # sums may cancel: take the nonzeros from the entries
            nonzeros[first:] = [(p, q) for q, g in enumerate(entries) if g != 0.0]
        dense.append(entries)
    blocks, total = [], 0.0
    for brows, bcols in _components_of(len(rows), len(cols), nonzeros):
        sub = dense if len(brows) == len(rows) and len(bcols) == len(cols) \
            else [[dense[i][j] for j in bcols] for i in brows]
        logdet = _logabsdet(sub) if len(brows) == len(bcols) else -math.inf
        blocks.append(Block([rows[i] for i in brows], [cols[j] for j in bcols], sub, logdet))
        total += logdet
    out_groups = [g for g, _ in outputs]

    def pass_through():
        outs = _coordinates(out_groups, [r + t for r, _, n in passes for t in range(n)])
        ins = _coordinates([g for g, _ in inputs], [c + t for _, c, n in passes for t in range(n)])
        return [(ci, co, "pass-through") for ci, co in zip(ins, outs)]

    return (rows, cols, dense, blocks, total), pass_through, \
        (_TangentRows([ts for _, ts in outputs]), out_groups)


def _pass_through_runs(tangents, ids):
    """``(runs, kept)`` for a vector output and the input at the same address, whose
    coordinate ids are ``ids``: ``runs`` are ``(k, j, n)`` where ``tangents[k:k + n]`` pass
    through the input's coordinates ``j, ..., j + n - 1`` (increasing ``k``); ``kept``
    are the positions of the other tangents.

    A tangent passes through if it is exactly the unit row ``{i: 1.0}`` of one of ``ids``,
    unless an earlier row took that coordinate. Such a tangent is nearly always the
    input coordinate's own shared dict (:func:`.dual.unit_derivatives`), and so are the
    ones after it, of the coordinates after it, where a slice of the input is written
    back: a run is extended by identity, in C, and only the rows around runs are
    checked one by one."""
    units = unit_derivatives(ids)
    runs, kept = [], []
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
        kept.append(k)
        k += 1
    return runs, kept


def _uncovered(spans, n):
    """The positions in ``range(n)`` outside the disjoint ``(start, stop)`` spans, in order."""
    out, position = [], 0
    for first, stop in sorted(spans):
        out.extend(range(position, first))
        position = stop
    out.extend(range(position, n))
    return out


def _logabsdet(matrix):
    """``log |det|`` of a small square matrix (lists of floats) by Gaussian elimination with
    partial pivoting, as LAPACK's LU does; torch above a few dozen rows."""
    n = len(matrix)
    if n > 16:
        sign, logdet = torch.linalg.slogdet(torch.tensor(matrix, dtype=torch.float64))
        return -math.inf if float(sign) == 0 else float(logdet)
    a = [list(row) for row in matrix]
    total = 0.0
    for k in range(n):
        p, best = k, abs(a[k][k])
        for i in range(k + 1, n):
            if abs(a[i][k]) > best:
                p, best = i, abs(a[i][k])
        pivot = a[p][k]
        if pivot == 0.0:
            return -math.inf
        if p != k:
            a[k], a[p] = a[p], a[k]
        total += math.log(abs(pivot))
        row_k = a[k]
        for i in range(k + 1, n):
            factor = a[i][k] / pivot
            if factor != 0.0:
                row_i = a[i]
                for j in range(k + 1, n):
                    row_i[j] -= factor * row_k[j]
    return total


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


def _remaining(n, removed):
    return [i for i in range(n) if i not in removed]


def _rows_without(out_cat, leaves, n_out, n_in, candidates):
    """The Jacobian rows that are not pass-through ``candidates``, from one autodiff pass
    that also verifies the candidates: with random weights ``v`` on the candidate rows,
    ``v @ J`` must be exactly ``v`` placed at the claimed columns (so a coincidence of
    values can never remove a row). Returns None if that check fails."""
    rows = _remaining(n_out, {r for r, _ in candidates})
    if not candidates:
        return _batched_rows(out_cat, leaves, rows) if rows else torch.zeros((0, n_in), dtype=torch.float64)
    if not out_cat.requires_grad:
        return None
    gen = torch.Generator().manual_seed(12345)  # never touches the global RNG
    weights = torch.rand(len(candidates), generator=gen, dtype=torch.float64) + 0.5
    cand_rows, cand_cols = torch.as_tensor(candidates, dtype=torch.long).T   # vectorized: O(M)
    v = torch.zeros_like(out_cat)
    expected = torch.zeros(n_in, dtype=torch.float64)
    v[cand_rows] = weights
    expected[cand_cols] = weights
    both = _batched_rows(out_cat, leaves, rows, extra=v.detach())
    if not torch.allclose(both[-1], expected, rtol=1e-12, atol=1e-12):
        return None
    return both[:-1]


def _pass_through_candidates(outputs, inputs):
    """``(row, col)`` pairs where a vector output coordinate equals an input coordinate
    of the same trace side and address."""
    by_key = {}
    offset = 0
    for group, leaf in inputs:
        if leaf.ndim > 0 and group.size:
            by_key[group.key] = (offset, leaf.detach().reshape(-1))
        offset += group.size
    pairs, row = [], 0
    for group, value in outputs:
        n = group.size
        if isinstance(value, torch.Tensor) and value.ndim > 0 and n:
            match = by_key.get(group.key)
            if match is not None:
                col0, in_vals = match
                out_vals = value.detach().reshape(-1)
                index = {}
                for j, v in enumerate(in_vals.tolist()):
                    index.setdefault(v, []).append(j)
                for i, v in enumerate(out_vals.tolist()):
                    js = index.get(v)
                    if js is not None and len(js) == 1:
                        pairs.append((row + i, col0 + js[0]))
                # one output coordinate per input coordinate
                seen, unique = set(), []
                for r, c in pairs:
                    if c not in seen:
                        seen.add(c)
                        unique.append((r, c))
                pairs = unique
        row += n
    return pairs


def _dense_jacobian(record: JacobianRecord) -> torch.Tensor:
    """Full matrix over every continuous coordinate; copies are unit entries."""
    out_index = {c: i for i, c in enumerate(record.outputs)}
    in_index = {c: j for j, c in enumerate(record.inputs)}
    dense = torch.zeros((len(record.outputs), len(record.inputs)), dtype=torch.float64)
    for cin, cout, _kind in record.eliminated:
        if cin in in_index and cout in out_index:
            dense[out_index[cout], in_index[cin]] = 1.0
    if record._graph is not None:
        source, out_groups, read_inputs = record._graph
        leaves = [leaf for _, leaf in read_inputs]
        out_coords = [c for g in out_groups for c in g.expand()]
        in_coords = [c for g, _ in read_inputs for c in g.expand()]
        if out_coords and leaves:
            if isinstance(source, _TangentRows):
                full = source.rows(leaves)
            else:
                full = _batched_rows(source, leaves, list(range(len(out_coords))))
            for i, co in enumerate(out_coords):
                for j, ci in enumerate(in_coords):
                    if full[i, j] != 0 and co in out_index and ci in in_index:
                        dense[out_index[co], in_index[ci]] = full[i, j]
    return dense
