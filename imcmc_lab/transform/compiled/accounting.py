"""``apply._account`` done once per branch key, symbolically (a mixin of the tracer).

Which reads copies consume (explicit and implicit: an unwritten read model address that the
new model trace keeps is its own copy, a membership fact checked per move as ``post``), the
pass-through runs of vector outputs, the kept rows in the new traces' order and the kept
columns in the old traces' order (LU pivot ties make the order matter bit for bit: the
caller checks it per move), each matrix entry as the sum of its tangent terms, and
log |det| by :func:`_ld`, which calls ``jacobian.matrix_logdet`` exactly as
``jacobian.reduced_jacobian`` does.
"""

from __future__ import annotations

from ..interpreter import AUX, MODEL
from ..jacobian import matrix_logdet
from ..language import continuous
from .symbolic import (S, SVec, SymInt, TF, Lin, Unsupported, _lin_deps, _lin_value, addr_code, addr_conc,
                       addr_deps, bin_ex, conc, lit)

_F = {MODEL: "mf", AUX: "af"}


class Accounting:
    """``apply._account`` done once per key, symbolically (a mixin of Tracer)."""

    def order_guards(self, entries):
        """Consecutive addresses ``(ns, i)`` of one side and namespace: ``i`` increasing."""
        for p, q in zip(entries, entries[1:]):
            (s1, a1), (s2, a2) = p[:2], q[:2]
            if s1 == s2 and len(a1) == len(a2) == 2 and a1[0] == a2[0] and type(a1[1]) is not str:
                if not self.decide(Lin.of(a1[1]) - Lin.of(a2[1]), "lt", conc(a1[1]) < conc(a2[1])):
                    raise Unsupported("a family out of index order")

    def finish(self, app):
        """The accounting of the key, from the interpreter's application on the same traces
        (its new traces' order and records): rows, columns, the matrix and the return."""
        new_flat = {MODEL: app.new_model.flat_records(), AUX: app.new_aux.flat_records()}
        self.new_flat = new_flat
        self._aux_all_touched()
        old_pos = {s: {a: i for i, a in enumerate(f)} for s, f in self.flats.items()}
        new_pos = {s: {a: i for i, a in enumerate(f)} for s, f in new_flat.items()}
        rank = {MODEL: 0, AUX: 1}
        outs = []
        for side, a, label, value in self.writes:
            if label is not continuous:
                continue
            rec = new_flat[side].get(addr_conc(a))
            if rec is None or rec.dist.discrete:
                raise Unsupported("a write the engine refuses")
            outs.append((side, a, value, bool(rec.dist.simplex)))
        outs.sort(key=lambda o: (rank[o[0]], new_pos[o[0]][addr_conc(o[1])]))
        self.order_guards(outs)
        cols_in = self._remaining_inputs(new_flat[MODEL])
        cols_in.sort(key=lambda c: (rank[c[0]], old_pos[c[0]][addr_conc(c[1])]))
        self.order_guards(cols_in)
        rows, runs_by_read = self._rows(outs, cols_in)
        cols = self._cols(cols_in, runs_by_read)
        if len(rows) != len(cols):
            raise Unsupported("dimension (the engine's error)")
        matrix = self._matrix(rows, cols)
        self.order = {"rows": [(s, o[1]) for o in outs for s in (o[0],)],
                      "cols": [(c[0], c[1]) for c in cols_in]}
        self._emit_return(matrix)

    def _remaining_inputs(self, xn):
        out = []
        for no, side, a, vr in self.cont_reads:
            consumed = any(ss == side and self.same_addr(sa, a) for ss, sa, _, _, _ in self.copies)
            if not consumed and side == MODEL:
                written = any(s == MODEL and self.same_addr(a, a2) for s, a2, _, _ in self.writes)
                copied_to = any(ds == MODEL and self.same_addr(a, da) for _, _, ds, da, _ in self.copies)
                if not written and not copied_to:
                    present = addr_conc(a) in xn
                    self.post.append((a, present))
                    consumed = present
            if not consumed:
                out.append((side, a, no, vr))
        self._copy_sources(xn)
        return out

    def _copy_sources(self, xn):
        """A continuous model address copied elsewhere and not written or copied to is consumed
        by its copy; were it still in the new model trace it would also be its own implicit
        copy (the interpreter's "reaches two outputs" error). Its membership is checked per
        move (``post``), as the trace-time instance had it."""
        for ss, sa, _, _, is_discrete in self.copies:
            if ss != MODEL or is_discrete:
                continue
            if any(s == MODEL and self.same_addr(sa, a2) for s, a2, _, _ in self.writes) or \
                    any(ds == MODEL and self.same_addr(sa, da) for _, _, ds, da, _ in self.copies):
                continue
            self.post.append((sa, addr_conc(sa) in xn))

    def _aux_all_touched(self):
        """Every auxiliary address of the trace-time instance is read or copied: then the
        generated code's check ``len(aux_in) == this count`` proves that no other auxiliary
        choice exists whose loss the interpreter would report."""
        touched = [a for s, a, _, _ in self.reads if s == AUX]
        touched += [sa for ss, sa, _, _, _ in self.copies if ss == AUX]
        for i, a in enumerate(touched):     # (whether two coincide: guarded, as the count relies on it)
            for b in touched[i + 1:]:
                self.same_addr(a, b)
        self.n_aux = len({addr_conc(a) for a in touched})
        if self.n_aux != len(self.flats[AUX]):
            raise Unsupported("an auxiliary choice the transform does not read or copy")

    def _rows(self, outs, cols_in):
        rows, runs_by_read = [], {}
        for side, a, value, simplex_out in outs:
            if type(value) is TF:
                rows.append(value.d)
                continue
            if not isinstance(value, SVec):
                raise Unsupported("a written constant")
            free = value
            if simplex_out:
                segs = list(value.segs)
                last = segs.pop()
                if last[0] == "l":
                    segs.append(("l", last[1], last[2], S(last[3]) - 1))
                free = SVec(segs)
            match = next((vr for s2, a2, _, vr in cols_in
                          if vr is not None and s2 == side and self.same_addr(a, a2)), None)
            runs = []
            for s in free.segs:
                if match is not None and s[0] == "l" and s[1] is match:
                    runs.append((S(s[2]), S(s[3])))
                    continue
                if match is not None and s[0] == "e" and len(s[1].d) == 1:
                    (k, g), = s[1].d.items()
                    if k[0] == "c" and k[1] == match.no and k[2] is not None:
                        if g.lit and g.v == 1.0:
                            start = SymInt(_lin_value(k[2]), Lin(*k[2]))
                            runs.append((start, start + 1))
                            continue
                        if g.v == 1.0:
                            raise Unsupported("a computed unit row")
                        self.guard(f"{g.code} != 1.0", True, (g,))
                if s[0] == "e":
                    rows.append(s[1].d)
                else:
                    rows.extend(e.d for e in SVec([s]).elements())
            for i, (a1, b1) in enumerate(runs):
                for a2, b2 in runs[i + 1:]:
                    if not (b1 <= a2) and not (b2 <= a1):
                        raise Unsupported("overlapping pass-through runs")
            if match is not None:
                runs_by_read.setdefault(match.no, []).extend(runs)
        return rows, runs_by_read

    def _cols(self, cols_in, runs_by_read):
        cols = []
        for side, a, no, vr in cols_in:
            if vr is None:
                cols.append((no, None))
                continue
            n = SymInt(self.env[vr.nvar], Lin(((vr.nvar, 1),), 0))
            nfree = n - 1 if vr.simplex else n
            runs = sorted(runs_by_read.get(no, []), key=lambda r: conc(r[0]))
            for r1, r2 in zip(runs, runs[1:]):
                if not (r1[1] <= r2[0]):
                    raise Unsupported("run order")
            pos = S(0)
            for start, stop in runs + [(nfree, None)]:
                length = self.concrete(start - pos)
                cols.extend((no, (pos + t).lin.key()) for t in range(length))
                if stop is None:
                    break
                pos = stop
        return cols

    def _matrix(self, rows, cols):
        matrix = []
        for d in rows:
            row = []
            for no, lk in cols:
                terms = []
                for k, g in d.items():
                    if k[1] != no:
                        continue
                    if k[0] == "R":
                        if lk is not None:
                            terms.append(g)
                    elif k[2] is None or lk is None:
                        if k[2] is None and lk is None:
                            terms.append(g)
                    elif self.decide(Lin(*k[2]) - Lin(*lk), "eq", _lin_value(k[2]) == _lin_value(lk)):
                        terms.append(g)
                e = terms[0] if terms else lit(0.0)
                for g in terms[1:]:
                    e = bin_ex(e, g, "+")
                row.append(e)
            matrix.append(row)
        return matrix



class Returns:
    """The return statement of a key (a mixin of the tracer, after :class:`Accounting`)."""

    def _value_code(self, label, v):
        if label is continuous:
            if type(v) is TF:
                return f"_fn(_arr({v.x.code}))", () if v.x.lit else (v.x.code,)
            if isinstance(v, SVec):
                parts, deps = [], []
                for s in v.segs:
                    if s[0] == "l":
                        lo, hi = Lin.of(s[2]), Lin.of(s[3])
                        parts.append(f"{s[1].var}[{lo.code()}:{hi.code()}]")
                        deps += [s[1].var, *_lin_deps(lo), *_lin_deps(hi)]
                    else:
                        parts.append(f"[{s[1].x.code}]")
                        if not s[1].x.lit:
                            deps.append(s[1].x.code)
                return f"_f64v({' + '.join(parts) or '[]'})", tuple(deps)
            raise Unsupported("a written constant")
        if isinstance(v, SymInt):
            return v.lin.code(), _lin_deps(v.lin)
        if type(v) in (bool, int, str, float, type(None)):
            return repr(v), ()
        raise Unsupported("a discrete write of another type")

    def _emit_return(self, matrix):
        """The key's return statement: ``(model choices, aux choices, log|det|, post, inputs,
        rows, cols, kinds index)``; see :mod:`.cache` for what the caller checks with them."""
        deps = []
        rows = []
        for row in matrix:
            rows.append("[" + ", ".join(e.code for e in row) + "]")
            deps += [e.code for e in row if not e.lit]
        m = self.stmt("[" + ", ".join(rows) + "]", None, deps, "M")
        ld = self.stmt(f"_ld({m.code})", None, (m.code,), "ld")
        sides = {MODEL: [], AUX: []}
        deps = [ld.code]
        for side, a, label, value in self.writes:
            code, d = self._value_code(label, value)
            sides[side].append(f"{addr_code(a)}: {code}")
            self.kinds[side].append(self._write_kind(side, a, label, value))
            deps += [*addr_deps(a), *d]
        for ss, sa, ds, da, is_discrete in self.copies:
            sides[ds].append(f"{addr_code(da)}: {_F[ss]}[{addr_code(sa)}].value")
            self.kinds[ds].append((is_discrete, None))
            deps += [*addr_deps(sa), *addr_deps(da)]
        inputs = [a for s, a, _, _ in self.reads if s == MODEL] + [sa for ss, sa, _, _, _ in self.copies if ss == MODEL]
        groups = [inputs] + [[a for s, a in self.order[w] if s == side] for w in ("rows", "cols") for side in (MODEL, AUX)]
        deps += [v for a, _ in self.post for v in addr_deps(a)]
        deps += [v for group in groups for a in group for v in addr_deps(a)]
        post = "(" + "".join(f"({addr_code(a)}, {p}), " for a, p in self.post) + ")"
        tuples = ["(" + "".join(addr_code(a) + ", " for a in group) + ")" for group in groups]
        code = (f"return (_OC({{{', '.join(sides[MODEL])}}}), _OC({{{', '.join(sides[AUX])}}}), "
                f"{ld.code}, {post}, {', '.join(tuples)}, KEY)")
        self.items.append(("r", code, tuple(deps)))

    def _write_kind(self, side, a, label, value):
        """``(discrete, simplex)`` the new record at a written address must have per move (the
        interpreter's output label check; the simplex flag sizes the row group)."""
        if label is not continuous:
            return (True, None)
        rec = self.new_flat[side].get(addr_conc(a))
        return (False, bool(rec.dist.simplex) if rec is not None else None)


def _ld(matrix):
    """``log |det|`` as ``jacobian.reduced_jacobian`` takes it (m == n here)."""
    return matrix_logdet(len(matrix), len(matrix), matrix, None)[1]
