"""The involution schematic of the paper's Figs. 1f and 2f, drawn from a move record.

Three stages: the pair of traces ``(x, y)`` a move started from, the pair
``(x', y') = f(x, y)`` it proposed, and ``f(x', y')``, which for an involution
is ``(x, y)`` again. The second application is the engine's
:func:`imcmc_lab.transform.checks.round_trip` (the same one the involution
check of Algorithm 4 runs); nothing here recomputes MCMC logic. Each trace is
drawn as its address tree (namespaces nest, paper Fig. 2b), and colours say
what the transform did at each stage: blue = read, orange = written, green =
copied (with a connector from source to destination), grey = kept unchanged
(an implicit copy, paper Sec. 5.2), red = differs from the start. A namespace
whose whole subtree was copied or written (the swapped subtree of Fig. 2f) is
outlined.
"""

from __future__ import annotations

import math

from imcmc_lab.errors import ImcmcError
from imcmc_lab.transform.apply import EMPTY_AUX
from imcmc_lab.transform.checks import compare_choices, round_trip
from imcmc_lab.transform.interpreter import AUX, MODEL

from ._frames import FramePlayer, caption
from ._style import (FAINT, INK, LINE, MONO, MONO_CHAR, MUTED, PANEL, ROLES, SANS, address_text, clip, esc,
                     key_text, legend_svg, sans_width, svg_text, value_names, value_text)

__all__ = ["InvolutionSchematic", "involution_stages", "trace_rows", "Row", "Stages"]

STAGE_LABELS = ["start (x, y)", "after f: (x′, y′)", "after f twice"]
SIDE_NAMES = {MODEL: "model", AUX: "auxiliary"}

ROW_H = 20          # height of one address row
FONT = 12           # row font size
INDENT = 16         # indentation per namespace level
PAD = 10            # inner padding of a card
TITLE_H = 24        # card title bar
CARD_GAP = 14       # between the model card and the auxiliary card
COL_GAP = 84        # between stage columns (room for the f arrow and copy connectors)
HEAD_H = 66         # column headers above the cards
MAX_VALUE_CHARS = 24
MAX_ROWS = 48       # a card longer than this collapses untouched runs of choices (issue 16, item 17)
MAX_TOUCHED = 40    # and draws at most this many touched choices


class Row:
    """One line of a drawn trace: a namespace, a leaf ``key = value``, or (``omitted`` > 0)
    a placeholder for that many untouched choices that are not drawn."""

    __slots__ = ("address", "depth", "key", "_record", "_value", "is_namespace", "last", "omitted", "names")

    def __init__(self, address, depth, record=None, is_namespace=False, omitted=0, names=None):
        self.address, self.depth, self.is_namespace, self.omitted = address, depth, is_namespace, omitted
        self._record, self._value, self.names = record, None, names
        self.key = key_text(address[-1]) if address else "(root)"
        if omitted:
            self.key = f"⋯ {omitted:,} more choice{'s' if omitted != 1 else ''}, not touched"
        self.last = None    # for a namespace: index of its last descendant row

    @property
    def value(self):
        """The leaf's value as text (formatted when first drawn: a large trace has many rows
        that are never drawn); None for a namespace or a placeholder."""
        if self._value is None and self._record is not None:
            self._value = value_text(self._record.value, self.address[-1], self.names)
        return self._value

    def __repr__(self):
        return f"Row({address_text(self.address)}{'' if self.is_namespace else ' = ' + str(self.value)})"


def trace_rows(trace) -> list[Row]:
    """The address tree of ``trace`` as rows in depth-first order (namespaces first appear
    where their first choice was made); an empty list for no trace."""
    if trace is None or trace is EMPTY_AUX:
        return []
    tree: dict = {}
    for address, record in trace.flat_records().items():
        node = tree
        for key in address[:-1]:
            node = node.setdefault(key, {})
        node[address[-1]] = record
    rows: list[Row] = []
    names = value_names(trace)

    def walk(node, prefix, depth):
        for key, item in node.items():
            address = prefix + (key,)
            if isinstance(item, dict):
                index = len(rows)
                rows.append(Row(address, depth, is_namespace=True))
                walk(item, address, depth + 1)
                rows[index].last = len(rows) - 1
            else:
                rows.append(Row(address, depth, item, names=names))

    walk(tree, (), 0)
    return rows


def collapse_rows(rows, touched, max_rows=MAX_ROWS, max_touched=MAX_TOUCHED) -> list[Row]:
    """``rows`` with every run of untouched choices replaced by one placeholder row, when
    there are more than ``max_rows``; ``touched``: the addresses to keep (at most
    ``max_touched`` of them are drawn), with the namespaces above them."""
    if len(rows) <= max_rows:
        return rows
    keep, shown = set(), 0
    for r in rows:
        if not r.is_namespace and r.address in touched and shown < max_touched:
            shown += 1
            keep.update(r.address[:n] for n in range(1, len(r.address) + 1))
    out: list[Row] = []
    run = []

    def flush():
        if run:
            out.append(Row(run[0].address, run[0].depth, omitted=sum(not r.is_namespace for r in run)))
            run.clear()

    for r in rows:
        if r.address in keep:
            flush()
            out.append(Row(r.address, r.depth, r._record, r.is_namespace, names=r.names))
        else:
            run.append(r)
    flush()
    for i, r in enumerate(out):     # a namespace's last descendant, among the rows drawn
        if r.is_namespace:
            j = i
            while j + 1 < len(out) and out[j + 1].address[: len(r.address)] == r.address:
                j += 1
            r.last = j
    return out


def _input_roles(app) -> dict:
    """``(side, address) -> role`` on the inputs of one application: read, or copied (source)."""
    roles = {key: "read" for key in app.run.reads}
    for c in app.run.copies:
        roles[(c.src_side, c.src_address)] = "copied"
    return roles


def _output_roles(app, model_rows) -> dict:
    """``(side, address) -> role`` on the outputs: written, copied (destination), or kept."""
    roles = {key: "written" for key in app.run.writes}
    for c in app.run.copies:
        roles[(c.dst_side, c.dst_address)] = "copied"
    for row in model_rows:
        if not row.is_namespace and _lookup(roles, MODEL, row.address) is None:
            roles[(MODEL, row.address)] = "kept"
    return roles


def _lookup(roles, side, address):
    """The role of ``address`` itself. (A read of a namespace reads a sub-call's return value,
    not the choices under it; copies of namespaces are recorded leaf by leaf.)"""
    return roles.get((side, address))


def _connectors(app) -> list:
    """Copy connectors ``((side, src address), (side, dst address))``. A namespace copied
    whole (every leaf, same relative layout) gets one connector between the namespaces."""
    groups: dict = {}
    for c in app.run.copies:
        s, d = c.src_address, c.dst_address
        common = 0
        while common < min(len(s), len(d)) and s[len(s) - 1 - common] == d[len(d) - 1 - common]:
            common += 1
        common = min(common, len(s) - 1, len(d) - 1) if common else 0
        key = ((c.src_side, s[: len(s) - common]), (c.dst_side, d[: len(d) - common]))
        groups.setdefault(key, []).append(c)
    out = []
    for (src, dst), copies in groups.items():
        source = app.run.model_in if src[0] == MODEL else app.run.aux_in
        under = [a for a in (source.flat_records() if source is not None else {}) if a[: len(src[1])] == src[1]]
        if len(copies) > 1 and src[1] != copies[0].src_address and len(under) == len(copies):
            out.append((src, dst))
        else:
            out.extend(((c.src_side, c.src_address), (c.dst_side, c.dst_address)) for c in copies)
    return out


class Stages:
    """What the schematic draws, as data (tests inspect it; the SVG is made from it).

    ``pairs``: three ``(model rows, aux rows)``; ``names``: (model, aux) program
    names; ``first``/``second``: the engine's Applications of f; ``roles[frame][column]``:
    ``(side, address) -> role`` maps (None = column not reached); ``connectors[frame]``:
    copy connectors of the transition shown; ``difference``: how stage 3 differs from
    stage 1 (a ChoiceDifference per side); ``error``: why the second application failed.
    """

    def __init__(self, record, undo=None):
        app = record.application
        f = app.run.transform
        aux_in = record.aux_in
        q = getattr(record, "q", None)
        q_args = tuple(getattr(record, "q_args", ()))
        if q is None and aux_in is not EMPTY_AUX and aux_in is not None:   # a record built by hand
            q, q_args = aux_in.gen_fn, tuple(aux_in.args[1:])
        self.record, self.transform = record, f
        self.names = (record.model_in.gen_fn.name, q.name if q is not None else None)
        self.first, self.second, self.error = app, None, None
        try:
            self.second = round_trip(f, app, q, q_args, undo=undo or getattr(f, "inverse", None))
        except ImcmcError as exc:   # a broken involution may fail on the way back
            self.error = f"{type(exc).__name__}: {exc}"
        traces = [(record.model_in, aux_in), (record.model_out, record.aux_out)]
        if self.second is not None:
            traces.append((self.second.new_model, self.second.new_aux))
        self.pairs = [(trace_rows(m), trace_rows(a)) for m, a in traces]
        self.difference = None
        if self.second is not None:
            self.difference = (
                compare_choices(record.model_in.get_choices(), self.second.new_model.get_choices()),
                compare_choices(_choices(aux_in), _choices(self.second.new_aux)))
        in1 = _input_roles(app)
        out1 = _output_roles(app, self.pairs[1][0])
        self.roles = [[in1, None, None], [in1, out1, None]]
        self.connectors = [[], _connectors(app)]
        if self.second is not None:
            out2 = _output_roles(self.second, self.pairs[2][0])
            for side, diff in zip((MODEL, AUX), self.difference):
                for address in diff.added:
                    out2[(side, address)] = "differs"
                for address, _before, _after in diff.differ:
                    out2[(side, address)] = "differs"
            self.roles.append([{}, _input_roles(self.second), out2])
            self.connectors.append(_connectors(self.second))
        else:
            self.roles.append([{}, {}, None])
            self.connectors.append([])
        touched = {key for frame in self.roles for roles in frame if roles
                   for key, role in roles.items() if role != "kept"}
        touched |= {key for frame in self.connectors for pair in frame for key in pair}
        self.pairs = [tuple(collapse_rows(rows, {a for s, a in touched if s == side})
                            for rows, side in zip(pair, (MODEL, AUX))) for pair in self.pairs]

    @property
    def n_frames(self) -> int:
        return len(self.roles)

    @property
    def returns_to_start(self):
        """True if ``f(f(x, y)) == (x, y)`` (None if the second application failed)."""
        if self.difference is None:
            return None
        return not any(self.difference)

    def summary(self, app, output: bool, roles=None) -> str:
        """One line on what an application did: to its inputs (read, copied) or outputs
        (written, copied, kept)."""
        if output:
            kept = sum(1 for role in (roles or {}).values() if role == "kept")
            return f"{len(app.run.writes)} written · {len(app.run.copies)} copied · {kept} kept"
        reads = [key for key in app.run.reads if key != (AUX, ())]
        text = f"f reads {len(reads)} · copies {len(app.run.copies)}"
        if (AUX, ()) in app.run.reads:   # f read q's return value (e.g. the picked node, Fig. 2e)
            text += " · reads q's return value"
        return text


def _choices(trace):
    from imcmc_lab.core.choicemap import as_choicemap

    return as_choicemap(None) if trace is None or trace is EMPTY_AUX else trace.get_choices()


def involution_stages(record) -> Stages:
    """The data of the schematic for one :class:`~imcmc_lab.inference.involutive.MoveRecord`."""
    return Stages(record)


# ---------------------------------------------------------------------------------------------
# SVG drawing

def _row_widths(rows):
    key_w = max((PAD + r.depth * INDENT + len(r.key) * FONT * MONO_CHAR for r in rows), default=60)
    val_w = max((min(len(r.value), MAX_VALUE_CHARS) * FONT * MONO_CHAR for r in rows if r.value), default=0)
    return key_w, val_w


class _Layout:
    """Positions shared by every frame, so nothing jumps while the animation plays."""

    def __init__(self, stages: Stages):
        n_cols = 3
        widths = []
        for model_rows, aux_rows in stages.pairs:
            k, v = _row_widths(model_rows + aux_rows)
            widths.append(k + v + 26 + PAD)
        self.col_w = max(240, min(360, max(widths)))
        self.value_chars = int((self.col_w - PAD - 26) / (FONT * MONO_CHAR))
        self.x0 = 14
        self.col_x = [self.x0 + i * (self.col_w + COL_GAP) for i in range(n_cols)]
        self.top = 44 + HEAD_H
        self.card_h = {}
        heights = []
        for i, (model_rows, aux_rows) in enumerate(stages.pairs):
            hm = TITLE_H + max(1, len(model_rows)) * ROW_H + 8
            ha = TITLE_H + max(1, len(aux_rows)) * ROW_H + 8
            self.card_h[i] = (hm, ha)
            heights.append(hm + CARD_GAP + ha)
        self.body_h = max(heights + [160])
        self.width = self.col_x[-1] + self.col_w + 14
        self.height = self.top + self.body_h + 64


def _draw_card(x, y, w, h, title, subtitle, rows, side, roles, lay, anchors, value_chars):
    """One trace as a card: a title bar and its address tree with role colours."""
    out = [f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="8" fill="#ffffff" stroke="{LINE}"/>',
           f'<path d="M{x} {y + 8} a8 8 0 0 1 8 -8 h{w - 16} a8 8 0 0 1 8 8 v{TITLE_H - 8} h{-w} z" fill="{PANEL}"/>',
           f'<line x1="{x}" y1="{y + TITLE_H}" x2="{x + w}" y2="{y + TITLE_H}" stroke="{LINE}"/>',
           svg_text(x + PAD, y + 16, title, size=12, fill=INK, family=SANS, weight="600")]
    if subtitle:
        out.append(svg_text(x + PAD + sans_width(title, 12) + 14, y + 16, subtitle, size=11, fill=MUTED, family=MONO))
    if not rows:
        out.append(svg_text(x + PAD, y + TITLE_H + 14, "(no choices)", size=FONT, fill=FAINT, family=SANS,
                            extra=' font-style="italic"'))
        return "".join(out)
    row_roles = [(_lookup(roles, side, r.address) if roles is not None and not r.omitted else None) for r in rows]
    # A namespace whose whole subtree was copied or written takes that role; the outermost
    # copied one (a swapped subtree, paper Fig. 2f) is outlined.
    outlined = set()
    for i, r in enumerate(rows):
        if r.is_namespace and roles is not None and row_roles[i] is None:
            sub = {row_roles[j] for j in range(i + 1, r.last + 1) if not rows[j].is_namespace}
            if len(sub) == 1 and next(iter(sub)) in ("copied", "written"):
                row_roles[i] = next(iter(sub))
                if row_roles[i] == "copied" and not any(p in outlined and rows[p].last >= r.last for p in range(i)):
                    outlined.add(i)
    for i, r in enumerate(rows):
        ry = y + TITLE_H + 4 + i * ROW_H
        role = row_roles[i]
        tx = x + PAD + r.depth * INDENT
        if r.omitted:
            out.append(f'<g class="imcmc-omitted" data-count="{r.omitted}">'
                       + svg_text(tx, ry + ROW_H / 2 + FONT * 0.36, r.key, size=FONT - 0.5, fill=FAINT, family=SANS,
                                  extra=' font-style="italic"') + "</g>")
            continue
        anchors[(side, r.address)] = (x, x + w, ry + ROW_H / 2)
        label = f"{'model' if side == MODEL else 'aux'}[{address_text(r.address)}]"
        tip = label + ("" if r.is_namespace else f" = {r.value}") + (f" ({role})" if role else "")
        g = [f'<g class="imcmc-row" data-address="{esc(address_text(r.address))}" data-side="{side}" '
             f'data-role="{role or ""}"><title>{esc(tip)}</title>']
        if role is not None and role != "kept":
            colour, tint, _ = ROLES[role]
            g.append(f'<rect x="{x + 1}" y="{ry}" width="{w - 2}" height="{ROW_H}" fill="{tint}"/>')
            g.append(f'<rect x="{x + 1}" y="{ry}" width="3" height="{ROW_H}" fill="{colour}"/>')
        if r.depth > 0:   # elbow connector from the parent namespace
            px = x + PAD + (r.depth - 1) * INDENT + 4
            g.append(f'<path d="M{px} {ry - 4} V{ry + ROW_H / 2} H{tx - 3}" fill="none" stroke="{LINE}" stroke-width="1.2"/>')
        base = ry + ROW_H / 2 + FONT * 0.36
        key_colour = MUTED if r.is_namespace else INK
        if role == "kept":
            key_colour = FAINT
        g.append(svg_text(tx, base, r.key + ("" if not r.is_namespace else " /"), size=FONT, fill=key_colour,
                          family=MONO, weight="600" if r.is_namespace else None))
        if r.value is not None:
            colour = INK
            if role in ("written", "differs"):
                colour = ROLES[role][0]
            elif role == "kept":
                colour = FAINT
            key_end = tx + len(r.key) * FONT * MONO_CHAR + 14
            room = int((x + w - PAD - key_end) / (FONT * MONO_CHAR))
            g.append(svg_text(x + w - PAD, base, clip(r.value, max(4, min(room, value_chars))), size=FONT,
                              fill=colour, family=MONO, anchor="end",
                              weight="600" if role in ("written", "differs") else None))
        g.append("</g>")
        out.append("".join(g))
    for i in sorted(outlined):
        r = rows[i]
        colour = ROLES[row_roles[i]][0]
        y1 = y + TITLE_H + 4 + i * ROW_H + 1
        y2 = y + TITLE_H + 4 + (r.last + 1) * ROW_H - 1
        out.append(f'<rect class="imcmc-subtree" x="{x + 4}" y="{y1}" width="{w - 8}" height="{y2 - y1}" rx="5" '
                   f'fill="none" stroke="{colour}" stroke-width="1.6" stroke-dasharray="5 3"/>')
    return "".join(out)


def _arrow(x1, x2, y, label, active):
    colour = INK if active else LINE
    return (f'<g opacity="{1 if active else 0.6}"><line x1="{x1}" y1="{y}" x2="{x2 - 7}" y2="{y}" stroke="{colour}" '
            f'stroke-width="2"/><path d="M{x2} {y} l-9 -5 v10 z" fill="{colour}"/>'
            + svg_text((x1 + x2) / 2, y - 8, label, size=15, fill=colour, family="Georgia, 'Times New Roman', serif",
                       anchor="middle", extra=' font-style="italic"') + "</g>")


def _pill(x, y, text, colour, tint):
    w = sans_width(text, 11.5) * 1.08 + 18   # bold text runs wider
    return (f'<rect x="{x}" y="{y - 13}" width="{w:.1f}" height="19" rx="9.5" fill="{tint}" stroke="{colour}"/>'
            + svg_text(x + 9, y + 1, text, size=11.5, fill=colour, family=SANS, weight="600"))


def render_frame(stages: Stages, frame: int, lay: _Layout = None) -> str:
    """The SVG of one stage (``frame`` 0, 1 or 2)."""
    lay = lay or _Layout(stages)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="imcmc-schematic" data-stage="{frame}" '
             f'viewBox="0 0 {lay.width:.0f} {lay.height:.0f}" width="{lay.width:.0f}" '
             f'style="max-width:100%;height:auto;background:#ffffff" role="img">',
             f"<title>Involution schematic, stage {frame + 1} of 3: {esc(STAGE_LABELS[frame])}</title>"]
    titles = [("start", "(x, y)"), ("after f", "(x′, y′) = f(x, y)"), ("after f twice", "f(x′, y′)")]
    captions = [
        "Start: the model trace x and the auxiliary trace y ~ q(x); blue marks what f will read.",
        "f wrote the orange choices, copied the green ones, and left the grey ones of x as they were.",
        "f applied again: an involution gives back the starting pair (x, y).",
    ]
    parts.append(svg_text(lay.x0, 22, f"Stage {frame + 1} of {stages.n_frames}", size=14, fill=INK, family=SANS,
                          weight="700"))
    if frame == 2 and stages.error:
        captions[2] = "f applied again failed, so f is not an involution on this pair of traces."
    parts.append(svg_text(lay.x0 + 104, 22, captions[frame], size=13, fill=MUTED, family=SANS))
    anchors: dict = {}
    columns = []
    for col in range(3):
        x = lay.col_x[col]
        reached = col <= frame
        opacity = 1.0 if reached else 0.13
        if frame == 2 and col == 0:
            opacity = 0.55      # the start, kept in view to compare with the end
        head, formula = titles[col]
        g = [f'<g class="imcmc-column" data-column="{col}" opacity="{opacity}">',
             svg_text(x, 58, head, size=13.5, fill=INK, family=SANS, weight="700"),
             svg_text(x + sans_width(head, 13.5) + 10, 58, formula, size=13.5, fill=MUTED,
                      family="Georgia, 'Times New Roman', serif", extra=' font-style="italic"')]
        roles = stages.roles[frame][col] if reached else None
        sub = ""
        if frame > 0 and col == frame:
            app = stages.first if col == 1 else stages.second
            sub = stages.summary(app, output=True, roles=roles) if app is not None else ""
        elif col == frame or (frame > 0 and col == frame - 1 and col < 2):
            app = stages.first if col == 0 else stages.second
            sub = stages.summary(app, output=False) if app is not None else ""
        if sub:
            g.append(svg_text(x, 78, sub, size=11.5, fill=MUTED, family=SANS))
        if col == 1 and reached:    # what the chain did with the proposal (a rejected one teaches the wrong picture)
            accepted = getattr(stages.record, "accepted", None)
            if accepted is not None:
                text, role = (("accepted: the chain moves to x′", "copied") if accepted
                              else ("rejected: the chain stays at x", "differs"))
                g.append(f'<g class="imcmc-verdict" data-accepted="{str(bool(accepted)).lower()}">'
                         + _pill(x, 98, text, ROLES[role][0], ROLES[role][1]) + "</g>")
        if col == 2 and reached:
            ok = stages.returns_to_start
            text, role = ("= (x, y)  ✓ involution", "copied") if ok else ("≠ (x, y)  ✗ not an involution", "differs")
            if ok is None:
                text = "✗ f cannot be applied again"
            g.append(_pill(x, 98, text, ROLES[role][0], ROLES[role][1]))
        if col < len(stages.pairs):
            model_rows, aux_rows = stages.pairs[col]
            hm, ha = lay.card_h[col]
            model_name, aux_name = stages.names
            g.append(_draw_card(x, lay.top, lay.col_w, hm, "model", model_name, model_rows, MODEL, roles, lay,
                                anchors.setdefault(col, {}), lay.value_chars))
            g.append(_draw_card(x, lay.top + hm + CARD_GAP, lay.col_w, ha, "auxiliary", aux_name or "(none)",
                                aux_rows, AUX, roles, lay, anchors[col], lay.value_chars))
        elif col == 2 and stages.error:
            g.append(f'<foreignObject class="imcmc-error" x="{x}" y="{lay.top}" width="{lay.col_w}" height="{lay.body_h}">'
                     f'<div xmlns="http://www.w3.org/1999/xhtml" style="font:12px {SANS};color:{ROLES["differs"][0]};'
                     f'white-space:pre-wrap">The second application of f failed:\n{esc(stages.error)}</div>'
                     f"</foreignObject>")
        g.append("</g>")
        columns.append("".join(g))
    parts.extend(columns)
    for col in range(2):
        x1 = lay.col_x[col] + lay.col_w + 10
        x2 = lay.col_x[col + 1] - 10
        parts.append(_arrow(x1, x2, 54, "f", active=frame == col + 1))
    # Copy connectors of the transition shown: source row -> destination row.
    if frame > 0:
        src_col, dst_col = frame - 1, frame
        for (ss, sa), (ds, da) in stages.connectors[frame]:
            a = anchors.get(src_col, {}).get((ss, sa))
            b = anchors.get(dst_col, {}).get((ds, da))
            if a is None or b is None:
                continue
            xa, ya, xb, yb = a[1], a[2], b[0], b[2]
            mid = (xa + xb) / 2
            colour = ROLES["copied"][0]
            parts.append(f'<path class="imcmc-copy" d="M{xa} {ya} C{mid} {ya} {mid} {yb} {xb - 6} {yb}" fill="none" '
                         f'stroke="{colour}" stroke-width="1.6" opacity="0.85"/>'
                         f'<path d="M{xb} {yb} l-7 -4 v8 z" fill="{colour}"/>')
    items = [ROLES[r] for r in ("read", "written", "copied", "kept")]
    if frame == 2 and stages.returns_to_start is False:
        items.append(ROLES["differs"])
    legend, _ = legend_svg(lay.x0, lay.height - 22, items)
    parts.append(legend)
    parts.append("</svg>")
    return "".join(parts)


def _move_caption(record) -> str:
    status = ("<span style='color:#1a7f37'>accepted</span>" if record.accepted
              else "<span style='color:#cf222e'>rejected</span>")
    terms = []
    if record.log_alpha is not None and not math.isnan(record.log_alpha):
        terms.append(f"log α = {record.log_alpha:.4g}")
    if record.jacobian is not None:
        terms.append(f"log |det J| = {record.logabsdet:.4g}")
    why = f" — {esc(record.check_failure.splitlines()[0])}" if record.check_failure else ""
    return f"{status} · {' · '.join(terms)}{why}"


class InvolutionSchematic(FramePlayer):
    """Animated schematic of one involutive move (paper Figs. 1f, 2f).

    ``InvolutionSchematic(record)`` with a
    :class:`~imcmc_lab.inference.involutive.MoveRecord`: Play (or drag the
    slider) to step through ``(x, y)``, ``f(x, y)`` and ``f(f(x, y))``. The
    frames are SVG made once in Python and switched in the browser.
    ``stages`` holds the data drawn (see :class:`Stages`).
    """

    def __init__(self, record, interval_ms: int = 1800):
        self.record = record
        self.stages = Stages(record)
        lay = _Layout(self.stages)
        frames = [render_frame(self.stages, i, lay) for i in range(self.stages.n_frames)]
        name = self.stages.transform.name
        header = caption(f"Involution schematic — {name}", _move_caption(record))
        super().__init__(frames, STAGE_LABELS[: len(frames)], header_html=header, control="play",
                         interval_ms=interval_ms, title=name)
