"""A trace's address tree as a Graphviz drawing (paper Fig. 2b).

The root is the generative function; namespaces (sub-calls, ``("mu", j)``
prefixes) are rounded boxes; each random choice is a leaf showing its key and
value. Optional ``highlight`` colours addresses by role (the legend of the
other views: read, written, copied, kept, differs). Labels are Graphviz
HTML-like labels with every piece of user text escaped; the SVG comes from the
``dot`` program (Debian/Ubuntu package ``graphviz``).
"""

from __future__ import annotations

import html
import shutil


from ._style import FAINT, INK, LINE, MUTED, PANEL, ROLES, clip, key_text, value_names, value_text

__all__ = ["trace_tree", "TraceTree", "DotNotFound"]

DISCRETE = "#8250df"
CONTINUOUS = "#0a7ea4"


class DotNotFound(RuntimeError):
    """Graphviz's ``dot`` program is missing."""


def _h(text) -> str:
    # Graphviz HTML-like labels understand the XML entities html.escape produces.
    return html.escape(str(text), quote=True)


def trace_tree(trace, highlight=None, rankdir="LR", max_value_chars=28, max_leaves=400) -> "TraceTree":
    """The address tree of ``trace`` (a Trace or ChoiceMap) as a :class:`TraceTree`.

    ``highlight``: ``{address: role}`` with roles ``read``, ``written``,
    ``copied``, ``kept``, ``differs`` (e.g. the written addresses of a move).
    ``rankdir``: ``"LR"`` (left to right, compact for deep trees) or ``"TB"``.
    """
    import graphviz

    from imcmc_lab.core.address import normalize_address

    highlight = {normalize_address(a): r for a, r in (highlight or {}).items()}
    if hasattr(trace, "flat_records"):
        items = [(a, r.value, r.dist.discrete) for a, r in trace.flat_records().items()]
        root_label = f"{trace.gen_fn.name}"
        score = f"score {trace.score:.4g}"
    else:   # a ChoiceMap
        items = [(a, v, None) for a, v in trace.items()]
        root_label, score = "choice map", ""
    graph = graphviz.Digraph("trace", graph_attr={
        "rankdir": rankdir, "bgcolor": "white", "nodesep": "0.12", "ranksep": "0.35",
        "fontname": "Helvetica"})
    # Nodes exactly the size of their HTML labels, so edges meet the boxes.
    graph.attr("node", shape="none", fontname="Helvetica", fontsize="11", margin="0", width="0", height="0")
    graph.attr("edge", color=LINE, arrowhead="none", penwidth="1.2")
    graph.node("root", label=(f'<<table border="1" cellborder="0" cellpadding="5" bgcolor="{PANEL}" color="{LINE}" '
                              f'style="rounded"><tr><td><b>{_h(root_label)}</b></td></tr>'
                              + (f'<tr><td><font point-size="9" color="{MUTED}">{_h(score)}</font></td></tr>' if score else "")
                              + "</table>>"))
    ids = {(): "root"}
    names = value_names(trace)
    shown = items[:max_leaves]
    for n, (address, value, discrete) in enumerate(shown):
        for depth in range(1, len(address)):
            prefix = address[:depth]
            if prefix in ids:
                continue
            node_id = f"n{len(ids)}"
            ids[prefix] = node_id
            colour, tint = _role_colours(highlight.get(prefix), LINE, "white")
            graph.node(node_id, label=(f'<<table border="1" cellborder="0" cellpadding="4" bgcolor="{tint}" '
                                       f'color="{colour}" style="rounded"><tr><td><font color="{MUTED}">'
                                       f'<b>{_h(key_text(prefix[-1]))}</b></font></td></tr></table>>'))
            graph.edge(ids[prefix[:-1]], node_id)
        node_id = f"n{len(ids)}"
        ids[address] = node_id
        kind_colour = INK if discrete is None else (DISCRETE if discrete else CONTINUOUS)
        colour, tint = _role_colours(highlight.get(address), LINE, "white")
        text = clip(value_text(value, address[-1], names), max_value_chars)
        graph.node(node_id, label=(f'<<table border="1" cellborder="0" cellpadding="4" cellspacing="0" '
                                   f'bgcolor="{tint}" color="{colour}"><tr><td align="left"><b>{_h(key_text(address[-1]))}'
                                   f'</b></td><td align="right"><font face="Courier" color="{kind_colour}">{_h(text)}'
                                   f"</font></td></tr></table>>"))
        graph.edge(ids[address[:-1]] if len(address) > 1 else "root", node_id)
    if len(items) > max_leaves:
        graph.node("more", label=f"<<font color=\"{FAINT}\">… {len(items) - max_leaves} more choices</font>>")
        graph.edge("root", "more", style="dashed")
    return TraceTree(graph, trace)


def _role_colours(role, default_colour, default_tint):
    if role is None:
        return default_colour, default_tint
    colour, tint, _ = ROLES[role]
    return colour, tint


class TraceTree:
    """A Graphviz drawing of a trace's address tree; shows as SVG in notebooks.

    ``digraph``: the :class:`graphviz.Digraph`; ``svg()``: the SVG text
    (raises :class:`DotNotFound` with install instructions if ``dot`` is missing).
    """

    def __init__(self, digraph, trace):
        self.digraph, self.trace = digraph, trace
        self._svg = None

    def svg(self) -> str:
        if self._svg is None:
            if shutil.which("dot") is None:
                raise DotNotFound("drawing a trace tree needs Graphviz's `dot` program, which is not installed "
                                  "(Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz; "
                                  "conda: conda install graphviz)")
            self._svg = self.digraph.pipe(format="svg", encoding="utf-8")
        return self._svg

    def _repr_mimebundle_(self, include=None, exclude=None):
        try:
            svg = self.svg()
        except DotNotFound as exc:
            # Without dot, fall back to the HTML table of the trace, with the reason.
            from imcmc_lab.core.display import choicemap_html, trace_html

            table = trace_html(self.trace) if hasattr(self.trace, "flat_records") else choicemap_html(self.trace)
            return {"text/html": f"<div style='color:#9a6700'>{html.escape(str(exc))}</div>{table}",
                    "text/plain": repr(self)}
        return {"image/svg+xml": svg, "text/plain": repr(self)}

    def __repr__(self):
        return f"<TraceTree: {self.digraph.source.count('->')} edges>"
