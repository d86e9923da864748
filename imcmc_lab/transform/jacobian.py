"""The Jacobian of a transform's continuous part, with copy sparsity (paper Sec. 5.1).

What both derivative backends share (:mod:`.float_backend`, :mod:`.autograd_backend`):
the records, the pass-through finder, the block decomposition and the determinant.

Rows are output coordinates, columns input coordinates (``J[i, j] = ∂out_i/∂in_j``).
A row that is an exact copy of one input coordinate is a unit row: expanding the
determinant along it removes that row and that column. So

* explicit copies (``copy``) and implicit copies (model addresses the transform
  leaves alone) are eliminated without any autodiff;
* single coordinates of a vector choice that pass through unchanged (the
  untouched entries of a mixture's weight vector) are eliminated
  (:func:`find_pass_through`; the backend says which coordinates of one vector
  are exact unit rows);
* the rest (rows from the backend: forward-mode derivative dicts, or one batched
  autograd pass) is split into independent blocks (connected components of the
  read -> write dependency graph), each with its own determinant
  (:func:`logabsdet`).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from itertools import accumulate, chain

import torch

__all__ = ["Coordinate", "CoordinateGroup", "group_of", "JacobianRecord", "Block", "reduced_jacobian", "free_part",
           "find_pass_through", "logabsdet", "components_of", "jacobian_problem"]


class Coordinate(tuple):
    """``(trace, address, index)``: one real coordinate; ``index`` is None for scalars."""

    __slots__ = ()

    def __new__(cls, trace, address, index=None):
        return tuple.__new__(cls, (trace, address, index))

    def __getnewargs__(self):
        return tuple(self)

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

    def __reduce__(self):       # __new__ takes (trace, address, dist, value), not the items
        return _tuple_new, (CoordinateGroup, tuple(self))

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
_Tensor = torch.Tensor


def group_of(trace, address, dist, value):
    """``CoordinateGroup(trace, address, dist, value)``, made without the class's
    Python-level ``__new__`` for a scalar tensor (the common case: one per read and
    written continuous address of every move)."""
    if type(value) is _Tensor and not value.ndim:
        return _tuple_new(CoordinateGroup, (trace, address, 1, False))
    return CoordinateGroup(trace, address, dist, value)


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
    ``full_size`` needs them, the pass-through eliminations as a list or a
    function returning it, and ``layout``: ``(rows, cols, blocks)``, or a function
    returning them (a move reads only ``logabsdet``); ``inputs``, ``outputs`` and
    ``eliminated`` are expanded to single coordinates on first access.
    """

    def __init__(self, groups, pass_through, layout, reduced, logabsdet, graph=None):
        self._groups, self._pass_through = groups, pass_through
        self._layout, self._reduced, self.logabsdet = layout, reduced, logabsdet
        self._graph = graph
        self._dense = None
        self._expanded = None

    def _made(self, name):
        """The lazily given attribute ``name``: a value, or a function called once for it."""
        value = getattr(self, name)
        if callable(value):
            value = value()
            setattr(self, name, value)
        return value

    @property
    def rows(self):
        """The output coordinates of the reduced matrix (its rows)."""
        return self._made("_layout")[0]

    @property
    def cols(self):
        """The input coordinates of the reduced matrix (its columns)."""
        return self._made("_layout")[1]

    @property
    def blocks(self):
        """The independent square :class:`Block` s of the reduced matrix."""
        return self._made("_layout")[2]

    @property
    def input_groups(self):
        return self._made("_groups")[0]

    @property
    def output_groups(self):
        return self._made("_groups")[1]

    @property
    def eliminated_groups(self):
        """``(input group, output group, kind)`` per eliminated copy or implicit copy,
        unexpanded (views of large traces count coordinates without making them)."""
        return self._made("_groups")[2]

    @property
    def pass_through(self):
        """The pass-through eliminations ``(input, output, "pass-through")``."""
        return self._made("_pass_through")

    def _expand(self):
        if self._expanded is None:
            inputs, outputs, eliminated_groups = self._made("_groups")
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
    def problem(self):
        """Why ``log |det J|`` is not finite, naming the coordinates; None if it is finite.
        For an involution ``J(f(z)) J(z) = I``, so that always means a derivative was lost
        or is NaN: the move and :func:`~.checks.check_involution` raise it."""
        return None if math.isfinite(self.logabsdet) else jacobian_problem(self.blocks, self.logabsdet)

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


def free_part(dist, value):
    """The coordinates of ``value`` that Jacobians use: all but the last weight of a
    simplex-valued choice (its density is on the first ``k - 1``), else all."""
    return value[..., :-1] if dist.simplex and isinstance(value, torch.Tensor) else value


def components_of(m, n, nonzeros):
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
    roots = []
    for r in range(m + n):
        while parent[r] != r:
            r = parent[r]
        roots.append(r)
    if roots and roots.count(roots[0]) == m + n:       # one component: the common case
        return [(list(range(m)), list(range(n)))]
    groups = {}
    for i, r in enumerate(roots):
        group = groups.get(r)
        if group is None:
            group = groups[r] = ([], [])
        if i < m:
            group[0].append(i)
        else:
            group[1].append(i - m)
    return list(groups.values())


def reduced_jacobian(outputs, inputs, backend):
    """Compute the reduced Jacobian and its log-determinant.

    ``outputs``: ``(CoordinateGroup, derivative source)`` for the written continuous
    outputs (the backend's: tangent lists, or autograd values); ``inputs``:
    ``(CoordinateGroup, leaf)`` for the remaining inputs (copies already removed), with
    as many coordinates as the outputs (the caller reports a dimension mismatch).
    ``backend`` (:mod:`.float_backend` or :mod:`.autograd_backend`) says which
    coordinates of a vector pass through and gives the remaining rows.
    Returns ``((layout, matrix, logabsdet), pass_through, rows_source)``: ``layout`` a
    function returning ``(rows, cols, blocks)`` (coordinates and :class:`Block` s, made
    only when something asks for them); ``pass_through`` a function returning the
    pass-through eliminations; ``rows_source`` is ``(the backend's row source, outputs)``,
    from which ``JacobianRecord.dense`` takes rows with respect to any inputs.
    """
    passes, kept_rows, kept_cols = find_pass_through(outputs, inputs, backend.unit_runs)
    found = backend.rows(outputs, inputs, kept_rows, kept_cols, passes)
    if found is None:     # a claimed pass-through is not a unit row: nothing passes through
        passes, kept_rows, kept_cols = find_pass_through(outputs, inputs, None)
        found = backend.rows(outputs, inputs, kept_rows, kept_cols, passes)
    matrix, nonzeros, source = found
    m, n = len(kept_rows), len(kept_cols)
    # A small matrix's log |det| (eliminated in Python, as its blocks would be) is the sum
    # over its blocks, up to rounding when they are several: the blocks are found only when
    # a view asks, or when it is not finite (a block that is not square is exactly
    # singular, and the problem names the blocks).
    parts, total = matrix_logdet(m, n, matrix, nonzeros)

    def layout():
        rows = [group.coordinate(k) for _, group, k, _ in kept_rows]
        cols = [group.coordinate(j) for _, group, j, _ in kept_cols]
        blocks = parts if parts is not None else _block_logdets(m, n, matrix, nonzeros)[0]
        return rows, cols, [Block([rows[i] for i in brows], [cols[j] for j in bcols], sub, logdet)
                            for brows, bcols, sub, logdet in blocks]

    def pass_through():
        outs = _coordinates([g for g, _ in outputs], [r + t for r, _, n in passes for t in range(n)])
        ins = _coordinates([g for g, _ in inputs], [c + t for _, c, n in passes for t in range(n)])
        return [(ci, co, "pass-through") for ci, co in zip(ins, outs)]

    return (layout, matrix, total), pass_through, (source, outputs)


def find_pass_through(outputs, inputs, unit_runs):
    """The coordinates of vector outputs that pass an input coordinate through unchanged.

    A written vector and the vector read at the same address may share coordinates
    exactly (a mixture's untouched weights): such a row is a unit row, and expanding
    the determinant along it removes that row and that column. ``unit_runs(value,
    leaf)`` (the backend's; None: find none) gives ``(k, j, n)`` runs where the
    output's coordinates ``k, ..., k + n - 1`` are unit rows of the input's
    ``j, ..., j + n - 1``, each input coordinate used once.

    Returns ``(passes, kept_rows, kept_cols)``: ``passes`` as ``(row, col, n)`` runs in
    the concatenated coordinates; kept rows and columns as ``(position, group, index in
    the group, the group's derivative source or leaf)``, in order."""
    vector_inputs, n_cols = None, 0
    if unit_runs is not None:
        for group, leaf in inputs:
            if group[3]:            # (group[3]: group.vector, group[2]: its size)
                if vector_inputs is None:
                    vector_inputs = {}
                vector_inputs[_SIDE[group[0]], group[1]] = (leaf, n_cols)
            n_cols += group[2]
    passes, kept_rows, passed = [], [], None
    keep = kept_rows.append         # (loops, not comprehensions: each of those is a call on 3.11)
    row = 0
    for group, value in outputs:
        if not group[3]:
            keep((row, group, 0, value))      # a scalar: the common case, kept
            row += 1
            continue
        size = group[2]
        positions = range(size)
        if vector_inputs is not None:
            key = (_SIDE[group[0]], group[1])
            match = vector_inputs.get(key)
            runs = unit_runs(value, match[0]) if match is not None else None
            if runs:
                col0, spans, covered = match[1], [], []
                for k, j, n in runs:
                    passes.append((row + k, col0 + j, n))
                    spans.append((j, j + n))
                    covered.append((k, k + n))
                if passed is None:
                    passed = {}
                passed[key] = spans
                positions = _uncovered(covered, size)
        for k in positions:
            keep((row + k, group, k, value))
        row += size
    kept_cols, col = [], 0
    keep = kept_cols.append
    for group, leaf in inputs:
        if not group[3]:
            keep((col, group, 0, leaf))
            col += 1
            continue
        spans = passed.get((_SIDE[group[0]], group[1])) if passed is not None else None
        for j in (range(group[2]) if spans is None else _uncovered(spans, group[2])):
            keep((col + j, group, j, leaf))
        col += group[2]
    return passes, kept_rows, kept_cols


_SIDE = {"model_in": "model", "model_out": "model", "aux_in": "aux", "aux_out": "aux"}   # CoordinateGroup.key


def _uncovered(spans, n):
    """The positions in ``range(n)`` outside the disjoint ``(start, stop)`` spans, in order."""
    out, position = [], 0
    for first, stop in sorted(spans):
        out.extend(range(position, first))
        position = stop
    out.extend(range(position, n))
    return out


def matrix_logdet(m, n, matrix, nonzeros):
    """``(blocks or None, log |det|)`` of the reduced ``m`` x ``n`` ``matrix``: a small square
    one eliminated whole; a large one, one that is not square, or a singular/NaN one through
    its blocks (:func:`_block_logdets`, which names them)."""
    total = logabsdet(matrix) if m == n <= 16 else None
    if total is None or not math.isfinite(total):       # large, not square, or singular/NaN
        return _block_logdets(m, n, matrix, nonzeros)
    return None, total


def _block_logdets(m, n, matrix, nonzeros):
    """The independent blocks of the ``m x n`` reduced matrix (nested lists or a tensor;
    ``nonzeros`` its nonzero ``(row, col)`` pairs, or None to find them) as ``(rows, cols, sub-matrix, log |det|)``, and the sum of their ``log |det|``; a
    block that is not square makes the matrix singular."""
    if nonzeros is None:        # (the float path: from the nested lists)
        nonzeros = [(i, j) for i, row in enumerate(matrix) for j, g in enumerate(row) if g != 0.0]
    parts, total = [], 0.0
    for brows, bcols in components_of(m, n, nonzeros):
        if len(brows) == m and len(bcols) == n:
            sub = matrix
        elif isinstance(matrix, torch.Tensor):
            sub = matrix[brows][:, bcols]
        else:
            sub = [[matrix[i][j] for j in bcols] for i in brows]
        logdet = logabsdet(sub) if len(brows) == len(bcols) else -math.inf
        parts.append((brows, bcols, sub, logdet))
        total += logdet
    return parts, total


def logabsdet(matrix):
    """``log |det|`` of a square matrix (nested lists of floats or a tensor): Gaussian
    elimination with partial pivoting, as LAPACK's LU does, for small ones (cheaper than
    a torch call); ``slogdet`` above 16 rows. ``-inf`` if singular, NaN if an entry is
    not finite."""
    n = len(matrix)
    if n > 16:
        sign, logdet = torch.linalg.slogdet(torch.as_tensor(matrix, dtype=torch.float64))
        return -math.inf if float(sign) == 0 and not math.isnan(float(logdet)) else float(logdet)
    a = matrix.tolist() if isinstance(matrix, torch.Tensor) else list(map(list, matrix))
    if not all(map(math.isfinite, chain.from_iterable(a))):
        return math.nan
    total = 0.0
    log = math.log
    for k in range(n):
        row_k = a[k]
        p, best = k, abs(row_k[k])
        for i in range(k + 1, n):
            v = abs(a[i][k])
            if v > best:
                p, best = i, v
        if best == 0.0:             # (the pivot is 0; a NaN pivot goes on, giving NaN)
            return -math.inf
        if p != k:
            a[k], a[p] = a[p], row_k
            row_k = a[k]
        pivot = row_k[k]
        total += log(best)
        rest = range(k + 1, n)
        for i in rest:
            row_i = a[i]
            factor = row_i[k] / pivot
            if factor != 0.0:
                for j in rest:
                    row_i[j] -= factor * row_k[j]
    return total


def jacobian_problem(blocks, total):
    """A description of why ``total`` (``log |det J|`` over ``blocks``) is not finite."""
    not_finite, lost_rows, lost_cols, singular = [], [], [], []
    for block in blocks:
        if math.isfinite(block.logabsdet):
            continue
        if block.rows and block.cols:
            bad = torch.nonzero(~torch.isfinite(block.matrix)).tolist()
            not_finite += [(block.rows[i], block.cols[j], float(block.matrix[i, j])) for i, j in bad]
        if not block.cols:
            lost_rows += block.rows
        elif not block.rows:
            lost_cols += block.cols
        elif not bad:
            singular.append(block)
    parts = []
    if not_finite:
        shown = "; ".join(f"d {o.label()} / d {i.label()} = {v}" for o, i, v in not_finite[:4])
        parts.append(f"a derivative is not finite: {shown}. A NaN derivative usually comes from a branch "
                     f"that is computed but not used: torch.where(c, a, b) evaluates both a and b, and "
                     f"sqrt or log of a negative number in the unused one gives NaN gradients. Keep both "
                     f"branches finite, e.g. torch.sign(v) * torch.sqrt(torch.abs(v))")
    if lost_rows:
        shown = ", ".join(c.label() for c in lost_rows[:6])
        parts.append(f"{shown} {'does' if len(lost_rows) == 1 else 'do'} not depend on any continuous input "
                     f"left after copies: the derivative was lost. float(x), x.item(), math.* functions "
                     f"and NumPy calls on a value il.read returned give a constant; compute with torch "
                     f"functions and operators on it instead")
    if lost_cols:
        parts.append("no written coordinate depends on " + ", ".join(c.label() for c in lost_cols[:6]))
    for block in singular:
        parts.append(f"the rows {', '.join(c.label() for c in block.rows)} are linearly dependent "
                     f"(columns {', '.join(c.label() for c in block.cols)})")
    kind = "NaN" if math.isnan(total) else f"{total} (the Jacobian is singular)" if total < 0 else str(total)
    return (f"jacobian: log |det J| is {kind}, which an involution never has (J(f(z)) J(z) = I): "
            + "; ".join(parts) + ".")


def _dense_jacobian(record: JacobianRecord) -> torch.Tensor:
    """Full matrix over every continuous coordinate; copies are unit entries."""
    out_index = {c: i for i, c in enumerate(record.outputs)}
    in_index = {c: j for j, c in enumerate(record.inputs)}
    dense = torch.zeros((len(record.outputs), len(record.inputs)), dtype=torch.float64)
    for cin, cout, _kind in record.eliminated:
        if cin in in_index and cout in out_index:
            dense[out_index[cout], in_index[cin]] = 1.0
    if record._graph is not None:
        source, outputs, read_inputs = record._graph
        leaves = [leaf for _, leaf in read_inputs]
        out_coords = [c for g, _ in outputs for c in g.expand()]
        in_coords = [c for g, _ in read_inputs for c in g.expand()]
        if out_coords and leaves:
            full = source.rows(leaves)
            for i, co in enumerate(out_coords):
                for j, ci in enumerate(in_coords):
                    if full[i, j] != 0 and co in out_index and ci in in_index:
                        dense[out_index[co], in_index[ci]] = full[i, j]
    return dense
