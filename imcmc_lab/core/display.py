"""HTML renderings of choice maps and traces (user text always escaped).

Traces and choice maps show as an address tree (paper Fig. 2b): namespaces
nest, each random choice shows its value and, for traces, its distribution
(discrete in purple, continuous in teal) and log-density. This module has no
IPython or widget import; ``imcmc_lab.widgets.trace_tree`` draws the same tree
with Graphviz.
"""

from __future__ import annotations

import html

from .values import format_value

_STYLE = (
    "<style>"
    ".il-box{font-family:system-ui,-apple-system,'Segoe UI',Roboto,Arial,sans-serif;font-size:13px;color:#1f2328}"
    ".il-box .il-head{margin:2px 0 6px}.il-box .il-sub{color:#656d76;margin-left:8px}"
    ".il-tree{font-family:var(--jp-code-font-family,'SFMono-Regular',Menlo,Consolas,monospace);font-size:12px;"
    "border-collapse:collapse;color:#1f2328}"
    ".il-tree th{font-family:system-ui,-apple-system,'Segoe UI',Roboto,Arial,sans-serif;font-weight:600;"
    "color:#656d76;text-align:left;padding:2px 10px;border-bottom:1px solid #d0d7de}"
    ".il-tree td{padding:1px 10px;border-bottom:1px solid #eef1f4;text-align:left;white-space:nowrap}"
    ".il-tree .il-ns{color:#656d76;font-weight:600}"
    ".il-tree .il-key{border-left:1px solid #d0d7de}"
    ".il-tree .il-d{color:#8250df}.il-tree .il-c{color:#0a7ea4}"
    ".il-tree .il-lp{color:#656d76;text-align:right;font-variant-numeric:tabular-nums}"
    ".il-tree .il-kind{font-size:10.5px;opacity:.8}"
    "</style>"
)


def _esc(x) -> str:
    return html.escape(str(x), quote=True)


def _key(key) -> str:
    """A key as shown: ``mu``, ``2``; strings that look like ints keep their quotes."""
    if isinstance(key, str) and key and key.strip() == key and not key.lstrip("-").isdigit():
        return key
    return repr(key)


def _key_cell(address, namespace: bool) -> str:
    depth = len(address) - 1
    guide = " class='il-key'" if depth else ""
    style = f" style='padding-left:{8 + depth * 16}px'"
    text = _esc(_key(address[-1])) + (" /" if namespace else "")
    cls = " il-ns" if namespace else ""
    return f"<td{guide}{style}><span class='{cls.strip()}'>{text}</span></td>"


def _tree_order(items):
    """Items regrouped so that every namespace's choices are contiguous (first-seen order)."""
    tree: dict = {}
    for address, item in items:
        node = tree
        for key in address[:-1]:
            node = node.setdefault(("ns", key), {})
        node[("leaf", address[-1])] = (address, item)
    out = []

    def walk(node):
        for (kind, _key), value in node.items():
            if kind == "ns":
                walk(value)
            else:
                out.append(value)

    walk(tree)
    return out


def _rows_from_flat(items, with_records=False):
    rows = []
    last = ()
    for address, item in _tree_order(items):
        # Print namespace headers when the path prefix changes.
        common = 0
        while common < min(len(last), len(address) - 1) and last[common] == address[common]:
            common += 1
        for depth in range(common, len(address) - 1):
            cells = "<td></td><td></td><td></td>" if with_records else "<td></td>"
            rows.append(f"<tr>{_key_cell(address[:depth + 1], True)}{cells}</tr>")
        if with_records:
            rec = item
            kind = "discrete" if rec.dist.discrete else "continuous"
            cls = "il-d" if rec.dist.discrete else "il-c"
            rows.append(f"<tr>{_key_cell(address, False)}"
                        f"<td class='{cls}'>{_esc(format_value(rec.value))}</td>"
                        f"<td>{_esc(repr(rec.dist))} <span class='{cls} il-kind'>{kind}</span></td>"
                        f"<td class='il-lp'>{rec.logpdf:.3f}</td></tr>")
        else:
            rows.append(f"<tr>{_key_cell(address, False)}<td>{_esc(format_value(item))}</td></tr>")
        last = address
    return rows


def choicemap_html(cm, limit: int = 200) -> str:
    items = list(cm.items())
    rows = _rows_from_flat(items[:limit])
    more = f"<div class='il-sub'>… {len(items) - limit} more</div>" if len(items) > limit else ""
    return (f"{_STYLE}<div class='il-box'><div class='il-head'><b>ChoiceMap</b><span class='il-sub'>"
            f"{len(items)} choice{'s' if len(items) != 1 else ''}</span></div>"
            f"<table class='il-tree'><tr><th>address</th><th>value</th></tr>{''.join(rows)}</table>{more}</div>")


def trace_html(trace, limit: int = 200) -> str:
    items = list(trace.flat_records().items())
    rows = _rows_from_flat(items[:limit], with_records=True)
    more = f"<div class='il-sub'>… {len(items) - limit} more</div>" if len(items) > limit else ""
    args = ", ".join(format_value(a) for a in trace.args)
    if len(args) > 80:
        args = args[:77] + "…"
    head = (f"<b>Trace of {_esc(trace.gen_fn.name)}</b>({_esc(args)})<span class='il-sub'>{len(items)} "
            f"choice{'s' if len(items) != 1 else ''} · score {trace.score:.4f} · return value "
            f"{_esc(format_value(trace.retval))}</span>")
    return (f"{_STYLE}<div class='il-box'><div class='il-head'>{head}</div><table class='il-tree'><tr>"
            f"<th>address</th><th>value</th><th>distribution</th><th style='text-align:right'>log p</th></tr>"
            f"{''.join(rows)}</table>{more}</div>")
