"""The Jacobian view: the sparsity pattern of paper Sec. 5.1, from a JacobianRecord.

Rows are output coordinates and columns input coordinates (``J[i, j] =
∂out_i / ∂in_j``), each labelled by trace, address and coordinate. Coordinates
the engine eliminated (explicit copies, implicit copies, pass-through vector
coordinates; their unit entry is coloured) lie in grey bands; what is left is
the reduced matrix, split into independent blocks (outlined, each with its
size and ``log |det|``). Two orderings: by address, and by block (blocks on the
diagonal, eliminated coordinates last), switched in the browser.
Everything drawn comes from the record (``dense()``, ``eliminated``,
``blocks``, ``logabsdet``); nothing is recomputed here.
"""

from __future__ import annotations

import math

from ._frames import FramePlayer, caption
from ._style import (BLOCK_COLOURS, ELIMINATED, FAINT, INK, LINE, MONO, MONO_CHAR, MUTED, PANEL, SANS,
                     address_text, esc, legend_svg, sans_width, svg_text)

__all__ = ["JacobianView", "JacobianLayout", "GroupedJacobianLayout", "layout", "coordinate_label"]

NONZERO = "#24292f"
ELIM_BAND = "#eef1f4"


def coordinate_label(coord) -> str:
    """``model_out[mu, 2]``, ``aux_in[u]``, ``model_in[weights][1]`` (vector coordinate 1)."""
    text = f"{coord.trace}[{address_text(coord.address)}]"
    return text if coord.index is None else f"{text}[{coord.index}]"


class JacobianLayout:
    """The Jacobian as data for drawing: labels, entries, eliminated coordinates, blocks.

    Coordinate level: ``rows``/``cols`` (output/input coordinates, address order),
    ``dense`` (the full matrix), ``eliminated`` ``(row, col, kind)``, ``blocks``
    ``[(row indices, col indices, logabsdet)]``.

    Display level (what is drawn): ``row_groups``/``col_groups`` list the coordinates
    of each drawn row/column. A vector choice of more than ``collapse`` coordinates
    that is copied whole and touches nothing else (typically the observed data,
    an implicit copy) is drawn as one row and one column: an identity block.
    ``row_kind``/``col_kind``: drawn index -> elimination kind; ``cells``:
    ``{(r, c): (value or None, unit kind or None)}`` for nonzero entries;
    ``block_groups``: blocks in drawn indices.
    """

    note = None             # what the drawing leaves out, if anything
    MAX_VALUES = 12         # matrices up to this size show each entry's value in its cell

    def __init__(self, jacobian, collapse: int = 6):
        self.record = jacobian
        self.rows, self.cols = list(jacobian.outputs), list(jacobian.inputs)
        row_index = {c: i for i, c in enumerate(self.rows)}
        col_index = {c: j for j, c in enumerate(self.cols)}
        self.dense = jacobian.dense()
        self.eliminated = []
        row_kind, col_kind, unit, partner = {}, {}, {}, {}
        for cin, cout, kind in jacobian.eliminated:
            i, j = row_index.get(cout), col_index.get(cin)
            if i is not None:
                row_kind[i] = kind
            if j is not None:
                col_kind[j] = kind
            if i is not None and j is not None:
                unit[(i, j)] = kind
                partner[i] = j
                self.eliminated.append((i, j, kind))
        self.blocks = [([row_index[c] for c in b.rows], [col_index[c] for c in b.cols], b.logabsdet)
                       for b in jacobian.blocks]
        self.logabsdet = jacobian.logabsdet
        self._group(row_kind, col_kind, unit, partner, collapse)

    def _group(self, row_kind, col_kind, unit, partner, collapse):
        nz = self.dense != 0
        by_address: dict = {}
        for i, c in enumerate(self.rows):
            by_address.setdefault((c.trace, c.address), []).append(i)
        collapsed_rows, collapsed_cols = {}, {}
        for members in by_address.values():
            kinds = {row_kind.get(i) for i in members}
            cols = [partner.get(i) for i in members]
            if len(members) <= collapse or len(kinds) != 1 or None in kinds or None in cols:
                continue
            sources = {(self.cols[j].trace, self.cols[j].address) for j in cols}
            same_order = all(self.cols[j].index == self.rows[i].index for i, j in zip(members, cols))
            sub_rows, sub_cols = nz[members], nz[:, cols]
            isolated = int(sub_rows.sum()) == len(members) and int(sub_cols.sum()) == len(members)
            if len(sources) == 1 and same_order and isolated:
                collapsed_rows[members[0]] = members
                collapsed_cols[cols[0]] = cols
        skip_rows = {i for g in collapsed_rows.values() for i in g[1:]}
        skip_cols = {j for g in collapsed_cols.values() for j in g[1:]}
        self.row_groups = [collapsed_rows.get(i, [i]) for i in range(len(self.rows)) if i not in skip_rows]
        self.col_groups = [collapsed_cols.get(j, [j]) for j in range(len(self.cols)) if j not in skip_cols]
        row_at = {i: r for r, g in enumerate(self.row_groups) for i in g}
        col_at = {j: c for c, g in enumerate(self.col_groups) for j in g}
        self.row_labels = [_group_label(self.rows, g) for g in self.row_groups]
        self.col_labels = [_group_label(self.cols, g) for g in self.col_groups]
        self.row_kind = {r: row_kind[g[0]] for r, g in enumerate(self.row_groups) if g[0] in row_kind}
        self.col_kind = {c: col_kind[g[0]] for c, g in enumerate(self.col_groups) if g[0] in col_kind}
        self.partner = {row_at[i]: col_at[j] for i, j in partner.items()}
        self.cells = {}
        for i, j in nz.nonzero().tolist():
            r, c = row_at[i], col_at[j]
            if len(self.row_groups[r]) > 1:
                self.cells[(r, c)] = (None, unit.get((i, j)))
            else:
                self.cells[(r, c)] = (float(self.dense[i, j]), unit.get((i, j)))
        self.block_groups = [(sorted({row_at[i] for i in br}), sorted({col_at[j] for j in bc}), ld)
                             for br, bc, ld in self.blocks]

    @property
    def shape(self):
        """The full Jacobian's shape (outputs x inputs)."""
        return (len(self.rows), len(self.cols))

    def eliminated_counts(self) -> dict:
        counts: dict = {}
        for _i, _j, kind in self.eliminated:
            counts[kind] = counts.get(kind, 0) + 1
        return counts

    def order(self, kind: str):
        """Drawn ``(row order, col order)``: ``"address"`` as recorded; ``"block"`` puts each
        block's rows and columns together on the diagonal, then eliminated pairs on a diagonal."""
        n_rows, n_cols = len(self.row_groups), len(self.col_groups)
        if kind == "address":
            return list(range(n_rows)), list(range(n_cols))
        rows, cols = [], []
        for brows, bcols, _ in self.block_groups:
            rows += brows
            cols += bcols
        elim_rows = [r for r in range(n_rows) if r in self.row_kind and r not in rows]
        rows += elim_rows
        cols += [self.partner[r] for r in elim_rows if r in self.partner and self.partner[r] not in cols]
        rows += [r for r in range(n_rows) if r not in rows]
        cols += [c for c in range(n_cols) if c not in cols]
        return rows, cols


MAX_DENSE = 150      # more coordinates than this on a side: draw from the record's groups (no dense J)
MAX_REDUCED = 60     # more reduced coordinates than this: one row and column per block
MAX_COPY_ROWS = 12   # more copied choices than this: one row for all of them


class GroupedJacobianLayout(JacobianLayout):
    """The layout of a Jacobian over many coordinates (issue 16, item 17), made from the
    record's per-address groups without the dense matrix: each reduced coordinate is a
    row and a column (one per block when there are more than ``MAX_REDUCED``), and the
    eliminated coordinates are lumped, one row and column per kind (per copied choice
    when there are few), drawn as identity blocks. Entries of eliminated rows and columns
    other than their unit entries are not drawn (``note`` says so)."""

    def __init__(self, jacobian):
        self.record, self.dense, self.logabsdet = jacobian, None, jacobian.logabsdet
        self.row_groups, self.col_groups, self.row_labels, self.col_labels = [], [], [], []
        self.row_kind, self.col_kind, self.partner, self.cells = {}, {}, {}, {}
        self.blocks = [([], [], b.logabsdet) for b in jacobian.blocks]     # (truthiness and count)
        self.eliminated = []
        self._reduced_part(jacobian)
        self._counts: dict = {}
        lumps: dict = {}
        copies = [e for e in jacobian.eliminated_groups if e[2] == "copy"]
        for gi, go, kind in list(jacobian.eliminated_groups) + [
                (_One(cin), _One(cout), kind) for cin, cout, kind in jacobian.pass_through]:
            self._counts[kind] = self._counts.get(kind, 0) + go.size
            key = (kind, gi[1], go[1]) if kind == "copy" and len(copies) <= MAX_COPY_ROWS else (kind,)
            lumps.setdefault(key, []).append((gi, go))
        for key, pairs in lumps.items():
            kind, size = key[0], sum(go.size for _gi, go in pairs)
            r, c = self._add(self.row_groups, self.row_labels, _lump_label([go for _, go in pairs]), size), \
                self._add(self.col_groups, self.col_labels, _lump_label([gi for gi, _ in pairs]), size)
            self.row_kind[r], self.col_kind[c], self.partner[r] = kind, kind, c
            self.cells[(r, c)] = (None, kind)
        self.note = (f"{self.shape[0]:,} × {self.shape[1]:,} coordinates: eliminated coordinates are drawn as one "
                     "identity block per kind, and the other entries of their rows and columns are not drawn.")

    def _reduced_part(self, jacobian):
        rows, cols = list(jacobian.rows), list(jacobian.cols)
        if len(rows) <= MAX_REDUCED and len(cols) <= MAX_REDUCED:
            for c in rows:
                self._add(self.row_groups, self.row_labels, coordinate_label(c), 1)
            for c in cols:
                self._add(self.col_groups, self.col_labels, coordinate_label(c), 1)
            reduced = jacobian.reduced
            for i, j in (reduced != 0).nonzero().tolist():
                self.cells[(i, j)] = (float(reduced[i, j]), None)
            row_at, col_at = {c: i for i, c in enumerate(rows)}, {c: j for j, c in enumerate(cols)}
            self.block_groups = [(sorted(row_at[c] for c in b.rows), sorted(col_at[c] for c in b.cols), b.logabsdet)
                                 for b in jacobian.blocks]
            return
        self.block_groups = []
        for b, block in enumerate(jacobian.blocks):
            r = self._add(self.row_groups, self.row_labels, f"B{b + 1}: {len(block.rows):,} outputs", len(block.rows))
            c = self._add(self.col_groups, self.col_labels, f"B{b + 1}: {len(block.cols):,} inputs", len(block.cols))
            self.cells[(r, c)] = (None, None)
            self.block_groups.append(([r], [c], block.logabsdet))

    @staticmethod
    def _add(groups, labels, label, size) -> int:
        groups.append(range(size))
        labels.append(label)
        return len(groups) - 1

    @property
    def shape(self):
        return self.record.full_size

    def eliminated_counts(self) -> dict:
        return dict(self._counts)


class _One(tuple):
    """A single coordinate seen as a group of size 1 (a pass-through elimination)."""

    def __new__(cls, coord):
        return tuple.__new__(cls, (coord.trace, coord.address, 1, coord.index is not None))

    size = property(lambda self: 1)


def _lump_label(groups) -> str:
    """``model_out[mu, 2]`` for one choice, ``model_out[x][0…99]`` for one vector,
    ``model_out[… 10,000 choices]`` for many."""
    g = groups[0]
    if len(groups) == 1:
        text = f"{g[0]}[{address_text(g[1])}]"
        return f"{text}[0…{g[2] - 1}]" if g[3] and g[2] > 1 else text
    traces = sorted({h[0] for h in groups})
    return f"{'/'.join(traces)}[… {len({(h[0], h[1]) for h in groups}):,} choices]"


def layout(jacobian, collapse: int = 6) -> JacobianLayout:
    """The layout for ``jacobian``: coordinate by coordinate (with the dense matrix) when
    small, else from its groups (:class:`GroupedJacobianLayout`)."""
    rows, cols = jacobian.full_size
    if max(rows, cols) > MAX_DENSE:
        return GroupedJacobianLayout(jacobian)
    return JacobianLayout(jacobian, collapse=collapse)


def _group_label(coords, group) -> str:
    first = coordinate_label(coords[group[0]])
    if len(group) == 1:
        return first
    c = coords[group[0]]
    return f"{c.trace}[{address_text(c.address)}][0…{len(group) - 1}]"


def _fmt(x: float) -> str:
    return "−∞" if x == -math.inf else f"{x:.4g}".replace("-", "−")


def _det(logabsdet: float) -> str:
    """``|det J|`` from its logarithm, as text."""
    if math.isnan(logabsdet):
        return "NaN"
    return "∞" if logabsdet > 700 else f"{math.exp(logabsdet):.4g}"


def _det_text(logabsdet: float) -> str:
    """``log |det J| = 0.6931 (|det J| = 2)``."""
    return f"log |det J| = {_fmt(logabsdet)} (|det J| = {_det(logabsdet)})"


def render_matrix(lay: JacobianLayout, kind: str = "address") -> str:
    """The SVG of the sparsity pattern in ``"address"`` or ``"block"`` order."""
    row_order, col_order = lay.order(kind)
    n_rows, n_cols = len(lay.row_groups), len(lay.col_groups)
    n = max(n_rows, n_cols, 1)
    values = n <= lay.MAX_VALUES      # room to print each partial derivative in its cell
    cell = 50 if values else max(6, min(26, int(520 / n)))
    font = min(12.0, cell - 3.0)
    show_labels = font >= 7.5
    row_labels, col_labels = lay.row_labels, lay.col_labels
    char = font * MONO_CHAR
    left = (max((len(t) for t in row_labels), default=4) * char + 16) if show_labels else 16
    # Column labels at 60 degrees when the cells leave room between their baselines, else vertical.
    angle = 60 if cell * math.sin(math.radians(60)) >= font + 2 else 90
    col_len = max((len(t) for t in col_labels), default=4) * char
    top = (col_len * math.sin(math.radians(angle)) + 18) if show_labels else 16
    top += 40   # the title line
    tags = {}
    for r, elim in lay.row_kind.items():
        c = lay.partner.get(r)
        size = len(lay.row_groups[r])
        times = f" × {size:,}" if size > 1 else ""
        if elim == "copy" and c is not None:
            tags[r] = f"copy of {col_labels[c]}"
        elif elim == "implicit":
            tags[r] = f"kept (implicit copy){times}"
        else:
            tags[r] = f"{elim}{times}"
    tag_font = min(11.5, font)
    right = max((len(t) for t in tags.values()), default=0) * tag_font * MONO_CHAR + 24
    # A label rotated by 60 degrees leans right by its length times cos(60).
    lean = col_len * math.cos(math.radians(angle)) if show_labels else 0
    items = [(NONZERO, NONZERO, "nonzero entry")]
    for k in ("copy", "implicit", "pass-through"):
        if k in lay.row_kind.values():
            items.append((ELIMINATED[k][0], ELIMINATED[k][0], f"unit entry: {ELIMINATED[k][1]}"))
    items.append((LINE, ELIM_BAND, "eliminated row / column"))
    if any(u is None and (r in lay.row_kind or c in lay.col_kind) for (r, c), (_v, u) in lay.cells.items()):
        items.append(("#8c959f", "#ffffff", "nonzero, dropped with its row / column"))
    if lay.blocks:
        items.append((BLOCK_COLOURS[0][0], BLOCK_COLOURS[0][1], "reduced block"))
    height = top + n_rows * cell + 64
    legend, legend_w = legend_svg(14, height - 20, items, size=11)
    title = ("Rows: output coordinates · columns: input coordinates · "
             + ("blocks on the diagonal, eliminated coordinates last" if kind == "block" else "address order"))
    width = max(left + n_cols * cell + max(right, lean) + 20, 560, legend_w + 28, sans_width(title, 12.5) * 1.05 + 28)
    x0, y0 = left, top
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="imcmc-jacobian" data-order="{kind}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
           f'style="max-width:100%;height:auto;background:#ffffff" role="img">',
           f"<title>Jacobian sparsity pattern ({esc(kind)} order)</title>"]
    out.append(svg_text(14, 22, title, size=12.5, fill=MUTED, family=SANS))
    row_pos = {r: p for p, r in enumerate(row_order)}
    col_pos = {c: p for p, c in enumerate(col_order)}
    # Grey bands under eliminated rows and columns; block tints under their cells.
    for r in lay.row_kind:
        out.append(f'<rect x="{x0}" y="{y0 + row_pos[r] * cell}" width="{n_cols * cell}" height="{cell}" fill="{ELIM_BAND}"/>')
    for c in lay.col_kind:
        out.append(f'<rect x="{x0 + col_pos[c] * cell}" y="{y0}" width="{cell}" height="{n_rows * cell}" fill="{ELIM_BAND}"/>')
    gap = 1 if cell >= 8 else 0
    rx = min(3, cell / 6)
    for r in range(n_rows):
        for c in range(n_cols):
            if r in lay.row_kind or c in lay.col_kind:
                continue
            out.append(f'<rect x="{x0 + col_pos[c] * cell + gap / 2}" y="{y0 + row_pos[r] * cell + gap / 2}" '
                       f'width="{cell - gap}" height="{cell - gap}" rx="{rx:.1f}" fill="{PANEL}"/>')
    for b, (brows, bcols, _) in enumerate(lay.block_groups):
        tint = BLOCK_COLOURS[b % len(BLOCK_COLOURS)][1]
        for r in brows:
            for c in bcols:
                out.append(f'<rect x="{x0 + col_pos[c] * cell + gap / 2}" y="{y0 + row_pos[r] * cell + gap / 2}" '
                           f'width="{cell - gap}" height="{cell - gap}" rx="{rx:.1f}" fill="{tint}"/>')
    for (r, c), (value, unit) in sorted(lay.cells.items()):
        x, y = x0 + col_pos[c] * cell, y0 + row_pos[r] * cell
        removed = unit is None and (r in lay.row_kind or c in lay.col_kind)
        fill = ELIMINATED[unit][0] if unit is not None else NONZERO
        shown = f"{value:.6g}" if value is not None else (
            "identity block" if unit else "a reduced block, too large to draw entry by entry")
        tip = (f"∂ {row_labels[r]} / ∂ {col_labels[c]} = {shown}"
               + (f" ({ELIMINATED[unit][1]}, eliminated)" if unit else "")
               + (" (removed with an eliminated row or column)" if removed else ""))
        # An entry removed with an eliminated row or column is drawn hollow: it exists, but the
        # cofactor expansion along the unit entry drops it (paper Sec. 5.1).
        paint = (f'fill="#ffffff" stroke="{NONZERO}" stroke-width="1.3" stroke-opacity="0.55"' if removed
                 else f'fill="{fill}"')
        inset = gap / 2 + (0.65 if removed else 0)
        out.append(f'<rect class="imcmc-cell" data-row="{r}" data-col="{c}" x="{x + inset}" y="{y + inset}" '
                   f'width="{cell - 2 * inset}" height="{cell - 2 * inset}" rx="{rx:.1f}" {paint}>'
                   f"<title>{esc(tip)}</title></rect>")
        if value is None and unit and cell >= 12:   # a collapsed identity block
            out.append(svg_text(x + cell / 2, y + cell / 2 + 4, "I", size=min(11, cell - 4), fill="#ffffff",
                                family=SANS, weight="700", anchor="middle"))
        elif value is not None and values:     # the partial derivative itself
            out.append(svg_text(x + cell / 2, y + cell / 2 + 4, _fmt_cell(value), size=10,
                                fill=NONZERO if removed else "#ffffff", family=MONO, anchor="middle",
                                extra=' class="imcmc-value"'))
    if kind == "block":   # one outline per block, now contiguous
        for b, (brows, bcols, _logdet) in enumerate(lay.block_groups):
            if not brows or not bcols:
                continue
            colour = BLOCK_COLOURS[b % len(BLOCK_COLOURS)][0]
            r0, c0 = min(row_pos[r] for r in brows), min(col_pos[c] for c in bcols)
            out.append(f'<rect class="imcmc-block" x="{x0 + c0 * cell - 1.5}" y="{y0 + r0 * cell - 1.5}" '
                       f'width="{len(bcols) * cell + 3}" height="{len(brows) * cell + 3}" rx="4" fill="none" '
                       f'stroke="{colour}" stroke-width="2"/>')
            out.append(svg_text(x0 + (c0 + len(bcols)) * cell + 6, y0 + r0 * cell + 11, f"B{b + 1}", size=11,
                                fill=colour, family=SANS, weight="700"))
    out.append(f'<rect x="{x0 - 0.5}" y="{y0 - 0.5}" width="{n_cols * cell + 1}" height="{n_rows * cell + 1}" '
               f'fill="none" stroke="{LINE}"/>')
    if show_labels:
        for r in range(n_rows):
            colour = FAINT if r in lay.row_kind else INK
            y = y0 + row_pos[r] * cell + cell / 2
            out.append(svg_text(x0 - 8, y + font * 0.36, row_labels[r], size=font, fill=colour, family=MONO,
                                anchor="end", extra=' class="imcmc-row-label"'))
            if r in tags and not (kind == "block" and any(r in br for br, _, _ in lay.block_groups)):
                out.append(svg_text(x0 + n_cols * cell + 10, y + tag_font * 0.36, tags[r], size=tag_font,
                                    fill=ELIMINATED[lay.row_kind[r]][0], family=MONO))
        for c in range(n_cols):
            colour = FAINT if c in lay.col_kind else INK
            cx, cy = x0 + col_pos[c] * cell + cell / 2 + font * 0.36, y0 - 8
            out.append(f'<text class="imcmc-col-label" x="{cx:.1f}" y="{cy:.1f}" font-size="{font}" fill="{colour}" '
                       f'font-family="{MONO}" transform="rotate(-{angle} {cx:.1f} {cy:.1f})">{esc(col_labels[c])}</text>')
    else:
        out.append(svg_text(x0, y0 + n_rows * cell + 18, f"{n_rows} × {n_cols}: too many to label; hover a cell "
                            "for its coordinates", size=11, fill=MUTED, family=SANS))
    out.append(legend)
    out.append("</svg>")
    return "".join(out)


def _fmt_cell(x: float) -> str:
    return f"{x:.3g}".replace("-", "−")


def _coordinate_list(coords, limit=12) -> str:
    shown = ", ".join(esc(coordinate_label(c)) for c in coords[:limit])
    return shown + (f", … {len(coords) - limit:,} more" if len(coords) > limit else "")


def _block_table(lay: JacobianLayout) -> str:
    """The reduced blocks: size, coordinates, ``log |det|``; and the total."""
    note = f'<div style="font:12px {SANS};color:{MUTED};margin-top:4px">{esc(lay.note)}</div>' if lay.note else ""
    if not lay.blocks:
        return note + (f'<div style="font:12.5px {SANS};color:{MUTED};margin-top:6px">Nothing left after the '
                       f"eliminations: log |det J| = 0 (|det J| = 1).</div>")
    rows = []
    for b, block in enumerate(lay.record.blocks):
        colour, tint = BLOCK_COLOURS[b % len(BLOCK_COLOURS)]
        brows, bcols, logdet = block.rows, block.cols, block.logabsdet
        outs, ins = _coordinate_list(list(brows)), _coordinate_list(list(bcols))
        rows.append(f"<tr><td><span style='display:inline-block;width:11px;height:11px;border-radius:3px;"
                    f"background:{tint};border:2px solid {colour};vertical-align:-1px'></span> B{b + 1}</td>"
                    f"<td style='white-space:nowrap'>{len(brows)} × {len(bcols)}</td><td class='imcmc-mono'>{outs}</td>"
                    f"<td class='imcmc-mono'>{ins}</td><td class='imcmc-num'>{_fmt(logdet)}</td></tr>")
    return (f"<style>.imcmc-jtab{{border-collapse:collapse;font:12.5px {SANS};margin-top:6px;color:{INK}}}"
            f".imcmc-jtab th{{text-align:left;font-weight:600;color:{MUTED};border-bottom:1px solid {LINE};padding:3px 10px}}"
            f".imcmc-jtab td{{padding:3px 10px;border-bottom:1px solid #eef1f4;vertical-align:top}}"
            f".imcmc-jtab .imcmc-mono{{font-family:{MONO};font-size:11.5px}}"
            f".imcmc-jtab .imcmc-num{{text-align:right;font-variant-numeric:tabular-nums}}</style>"
            f"<table class='imcmc-jtab'><tr><th>block</th><th>size</th><th>rows (outputs)</th>"
            f"<th>columns (inputs)</th><th style='text-align:right;white-space:nowrap'>log |det|</th></tr>{''.join(rows)}"
            f"<tr><td colspan='4' style='text-align:right;font-weight:600'>log |det J| (sum over blocks)</td>"
            f"<td class='imcmc-num' style='font-weight:600'>{_fmt(lay.logabsdet)}</td></tr>"
            f"<tr><td colspan='4' style='text-align:right;color:{MUTED}'>|det J|</td>"
            f"<td class='imcmc-num' style='color:{MUTED}'>{_det(lay.logabsdet)}</td></tr>"
            f"</table>{note}")


def jacobian_summary(lay: JacobianLayout) -> str:
    """``full 6 × 6 · 4 eliminated (2 copy, 2 implicit copy) · reduced 2 × 2 in 1 block · log |det J| = 0.69``."""
    n_rows, n_cols = lay.shape
    counts = lay.eliminated_counts()
    elim = sum(counts.values())
    kinds = ", ".join(f"{n:,} {ELIMINATED[k][1]}" for k, n in counts.items())
    red = lay.record.reduced_size
    nb = len(lay.blocks)
    return (f"full {n_rows:,} × {n_cols:,} · {elim:,} eliminated{f' ({kinds})' if kinds else ''} · reduced "
            f"{red[0]} × {red[1]} in {nb} block{'s' if nb != 1 else ''} · {_det_text(lay.logabsdet)}")


class JacobianView(FramePlayer):
    """The Jacobian of one move or transform application (paper Sec. 5.1 figure).

    ``JacobianView(record)`` takes a MoveRecord, an Application or a
    JacobianRecord. Toggle between address order and block order; the table
    lists each reduced block with its size and ``log |det|``.
    """

    def __init__(self, record, title=None, collapse: int = 6):
        jacobian = getattr(record, "jacobian", record)
        if jacobian is None:
            raise ValueError("this move has no Jacobian (its dimension check failed); nothing to draw")
        self.layout_data = layout(jacobian, collapse=collapse)
        name = title
        if name is None:
            app = getattr(record, "application", record)
            run = getattr(app, "run", None)
            name = run.transform.name if run is not None else "transform"
        frames = [render_matrix(self.layout_data, "address"), render_matrix(self.layout_data, "block")]
        header = caption(f"Jacobian — {name}", esc(jacobian_summary(self.layout_data)))
        super().__init__(frames, ["address order", "block order"], header_html=header,
                         footer_html=_block_table(self.layout_data), control="toggle", title=name)
