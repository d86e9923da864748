"""The autograd derivative backend: continuous reads as torch autograd leaves.

Runs any transform torch can differentiate (and every transform with
``autodiff="torch"``). The Jacobian's rows come from one batched backward pass;
pass-through coordinates of a vector are found by equal value and verified with
a vector-Jacobian product in the same pass, so a coincidence of values can
never remove a row. Same interface as :class:`~.float_backend.FloatBackend`.
"""

from __future__ import annotations

import torch

from ..core.values import as_real
from ..modeling.runtime import owned
from .jacobian import free_part
from .language import continuous

__all__ = ["AutogradBackend"]


class AutogradBackend:
    """Derivatives by torch autograd."""

    floats = False
    __slots__ = ()

    @staticmethod
    def running():
        return torch.enable_grad()

    def leaf_at(self, key, record):
        """:meth:`leaf` (the float path reuses unchanged leaves; autograd makes new ones)."""
        return self.leaf(record)

    @staticmethod
    def leaf(record):
        """``(autograd leaf, value the transform sees)``: for a simplex-valued choice the
        leaf is the free weights and the value completes them with ``1 - sum``."""
        if record.dist.simplex:
            leaf = record.value[..., :-1].detach().clone().requires_grad_(True)
            return leaf, torch.cat([leaf, 1 - leaf.sum(-1, keepdim=True)], dim=-1)
        leaf = record.value.detach().clone().requires_grad_(True)
        return leaf, leaf

    @staticmethod
    def written(value, label):
        """The value a write stores: the engine's own (a copy: the transform may still hold
        the tensor it wrote; clone keeps the autograd graph)."""
        if label is continuous:
            if not isinstance(value, torch.Tensor):
                value = as_real(owned(value))
            else:
                value = value.clone() if value.dtype == torch.float64 else value.to(torch.float64)
        elif isinstance(value, torch.Tensor) and value.ndim == 0:
            value = value.item()
        else:
            value = owned(value)
        return value, None

    @staticmethod
    def derivative_source(write, dist):
        return free_part(dist, write.value)

    @staticmethod
    def unit_runs(value, leaf):
        """Candidate pass-through coordinates: output coordinates equal in value to exactly
        one coordinate of the input at the same address (verified in :meth:`rows`)."""
        if not (isinstance(value, torch.Tensor) and value.ndim > 0 and leaf.ndim > 0):
            return []
        index = {}
        for j, v in enumerate(leaf.detach().reshape(-1).tolist()):
            index.setdefault(v, []).append(j)
        runs, taken = [], set()
        for k, v in enumerate(value.detach().reshape(-1).tolist()):
            js = index.get(v)
            if js is not None and len(js) == 1 and js[0] not in taken:   # one output per input
                taken.add(js[0])
                runs.append((k, js[0], 1))
        return runs

    @staticmethod
    def rows(outputs, inputs, kept_rows, kept_cols, passes):
        """``(reduced matrix, nonzero (row, col) pairs, row source)``, or None if a claimed
        pass-through is not a unit row: with random weights ``v`` on the claimed rows,
        ``v @ J`` must be exactly ``v`` placed at the claimed columns."""
        values = [v for _, v in outputs]
        leaves = [leaf for _, leaf in inputs]
        out_cat = torch.cat([_flatten(v).to(torch.float64) for v in values]) if values \
            else torch.zeros(0, dtype=torch.float64)
        row_ids = [r for r, _, _, _ in kept_rows]
        if not passes:
            full = _batched_rows(out_cat, leaves, row_ids)
        else:
            if not out_cat.requires_grad:
                return None
            claimed = [(r + t, c + t) for r, c, n in passes for t in range(n)]
            gen = torch.Generator().manual_seed(12345)  # never touches the global RNG
            weights = torch.rand(len(claimed), generator=gen, dtype=torch.float64) + 0.5
            claimed_rows, claimed_cols = torch.as_tensor(claimed, dtype=torch.long).T
            v = torch.zeros_like(out_cat)
            expected = torch.zeros(sum(leaf.numel() for leaf in leaves), dtype=torch.float64)
            v[claimed_rows] = weights
            expected[claimed_cols] = weights
            both = _batched_rows(out_cat, leaves, row_ids, extra=v.detach())
            if not torch.allclose(both[-1], expected, rtol=1e-12, atol=1e-12):
                return None
            full = both[:-1]
        reduced = full[:, [c for c, _, _, _ in kept_cols]].detach()
        return reduced, torch.nonzero(reduced).tolist(), _AutogradRows(out_cat)


class _AutogradRows:
    """Rows of the Jacobian of every written coordinate, with respect to any leaves."""

    __slots__ = ("out_cat",)

    def __init__(self, out_cat):
        self.out_cat = out_cat

    def rows(self, leaves):
        n = self.out_cat.numel()
        return _batched_rows(self.out_cat, leaves, list(range(n)))


def _flatten(value):
    return value.reshape(-1) if isinstance(value, torch.Tensor) else torch.as_tensor([value])


def _batched_rows(out_cat, leaves, row_ids, extra=None):
    """Rows ``row_ids`` of d out_cat / d leaves, in one batched autodiff pass; with
    ``extra`` (a vector over out_cat), also the vector-Jacobian product ``extra @ J``
    as a last row, in the same pass."""
    n_rows = len(row_ids) + (extra is not None)
    n_cols = sum(leaf.numel() for leaf in leaves)
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
    parts = [torch.zeros((n_rows, leaf.numel()), dtype=torch.float64) if g is None else g.reshape(n_rows, -1)
             for leaf, g in zip(leaves, grads)]
    return torch.cat(parts, dim=1) if parts else torch.zeros((n_rows, 0), dtype=torch.float64)
