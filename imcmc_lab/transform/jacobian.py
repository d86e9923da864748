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

import torch

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

    def __new__(cls, trace, address, value):
        vector = isinstance(value, torch.Tensor) and value.ndim > 0
        return tuple.__new__(cls, (trace, address, value.numel() if vector else 1, vector))

    @property
    def size(self):
        return self[2]

    def expand(self):
        trace, address, size, vector = self
        if vector:
            return [Coordinate(trace, address, i) for i in range(size)]
        return [Coordinate(trace, address)]


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
    ``full_size`` needs them; ``inputs``, ``outputs`` and ``eliminated`` are
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

    def _expand(self):
        if self._expanded is None:
            inputs, outputs, eliminated_groups = self._group_lists()
            eliminated = [(ci, co, kind) for gi, go, kind in eliminated_groups
                          for ci, co in zip(gi.expand(), go.expand())]
            self._expanded = ([c for g in inputs for c in g.expand()],
                              [c for g in outputs for c in g.expand()],
                              eliminated + list(self._pass_through))
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


def _coords(trace_name, address, value):
    if isinstance(value, torch.Tensor) and value.ndim > 0:
        return [Coordinate(trace_name, address, i) for i in range(value.numel())]
    return [Coordinate(trace_name, address)]


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

    ``outputs``: list of ``(Coordinate-list, value tensor)`` for written continuous outputs;
    ``inputs``: list of ``(Coordinate-list, autograd leaf)`` for remaining inputs
    (copies already removed), with as many coordinates as the outputs (the caller
    reports a dimension mismatch). Returns ``(reduced, pass_through, rows_source)``:
    ``rows_source`` is ``(outputs' derivative source, output coordinates)``, from which
    ``JacobianRecord.dense`` takes rows with respect to any inputs.
    With ``floats`` (the float path of :mod:`.dual`), each output value is
    ``(tangents, value tensor)`` and each input leaf a list of coordinate ids.
    """
    if floats:
        return _reduced_jacobian_floats(outputs, inputs)
    out_coords = [c for cs, _ in outputs for c in cs]
    in_coords = [c for cs, _ in inputs for c in cs]
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
    return (record_rows, record_cols, reduced.detach(), blocks, total), pass_through, (out_cat, out_coords)


def _reduced_jacobian_floats(outputs, inputs):
    """:func:`reduced_jacobian` from forward-mode derivative dicts: the rows are read off
    the tangents, and a pass-through coordinate is one whose tangent is exactly the
    unit row of a coordinate of the same vector input. (The torch path finds
    candidates by equal value and then verifies the unit row; here the derivative
    itself is exact, and the unit row is what removing the row and column needs.)"""
    out_coords = [c for cs, _ in outputs for c in cs]
    in_coords = [c for cs, _ in inputs for c in cs]
    tangents = [d for _, (ts, _v) in outputs for d in ts]
    col_of = {}
    for _cs, ids in inputs:
        for i in ids:
            col_of[i] = len(col_of)
    pass_rows, pass_cols = _float_pass_through(outputs, inputs, col_of)
    rows = [r for r in range(len(out_coords)) if r not in pass_rows]
    cols = [j for j in range(len(in_coords)) if j not in pass_cols]
    position = {j: q for q, j in enumerate(cols)}
    by_id = {i: position[j] for i, j in col_of.items() if j in position}   # input id -> column
    dense, nonzeros = [], []
    for p, r in enumerate(rows):
        row = [0.0] * len(cols)
        for i, g in tangents[r].items():
            q = by_id.get(i)
            if q is not None and g != 0.0:
                row[q] = g
                nonzeros.append((p, q))
        dense.append(row)
    blocks, total = [], 0.0
    for brows, bcols in _components_of(len(rows), len(cols), nonzeros):
        sub = dense if len(brows) == len(rows) and len(bcols) == len(cols) \
            else [[dense[i][j] for j in bcols] for i in brows]
        logdet = _logabsdet(sub) if len(brows) == len(bcols) else -math.inf
        blocks.append(Block([out_coords[rows[i]] for i in brows], [in_coords[cols[j]] for j in bcols],
                            sub, logdet))
        total += logdet
    pass_through = [(in_coords[c], out_coords[r], "pass-through") for r, c in pass_rows.items()]
    return ([out_coords[i] for i in rows], [in_coords[j] for j in cols], dense, blocks, total), \
        pass_through, (_TangentRows(tangents), out_coords)


def _float_pass_through(outputs, inputs, col_of):
    """``({row: col}, {col, ...})`` of pass-through coordinates on the float path."""
    owner = {}                        # input id -> (side, address) of a vector input
    for cs, ids in inputs:
        if cs and cs[0].index is not None:
            key = (cs[0].trace.split("_")[0], cs[0].address)
            for i in ids:
                owner[i] = key
    pass_rows, pass_cols = {}, set()
    row = 0
    for cs, (tangents, _value) in outputs:
        if owner and cs and cs[0].index is not None:
            key = (cs[0].trace.split("_")[0], cs[0].address)
            for k, d in enumerate(tangents):
                if len(d) == 1:
                    (i, g), = d.items()
                    col = col_of.get(i)
                    if g == 1.0 and owner.get(i) == key and col not in pass_cols:
                        pass_rows[row + k] = col
                        pass_cols.add(col)
        row += len(cs)
    return pass_rows, pass_cols


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
    written coordinate, with respect to any list of input coordinate-id lists."""

    __slots__ = ("tangents",)

    def __init__(self, tangents):
        self.tangents = tangents

    def rows(self, leaves):
        col = {}
        for ids in leaves:
            for i in ids:
                col[i] = len(col)
        out = torch.zeros((len(self.tangents), len(col)), dtype=torch.float64)
        for r, d in enumerate(self.tangents):
            for i, g in d.items():
                j = col.get(i)
                if j is not None:
                    out[r, j] = g
        return out


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
    for cs, leaf in inputs:
        if leaf.ndim > 0 and cs:
            by_key[(cs[0].trace.split("_")[0], cs[0].address)] = (offset, leaf.detach().reshape(-1))
        offset += len(cs)
    pairs, row = [], 0
    for cs, value in outputs:
        n = len(cs)
        if isinstance(value, torch.Tensor) and value.ndim > 0 and cs:
            match = by_key.get((cs[0].trace.split("_")[0], cs[0].address))
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
        source, out_coords, read_inputs = record._graph
        leaves = [leaf for _, leaf in read_inputs]
        in_coords = [c for cs, _ in read_inputs for c in cs]
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
