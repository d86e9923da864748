"""HTML renderings of choice maps and traces (user text always escaped)."""

from __future__ import annotations

import html

from .core.values import format_value

_STYLE = (
    "<style>.il-tree{font-family:var(--jp-code-font-family,monospace);font-size:12px;"
    "border-collapse:collapse}.il-tree td{padding:1px 8px;border-bottom:1px solid #eee;"
    "text-align:left}.il-tree .il-ns{color:#555;font-weight:600}.il-tree .il-d{color:#8250df}"
    ".il-tree .il-c{color:#0969da}.il-tree .il-lp{color:#888}</style>"
)


def _esc(x) -> str:
    return html.escape(str(x), quote=True)


def _rows_from_flat(items, with_records=False):
    rows = []
    last = ()
    for address, item in items:
        # Print namespace headers when the path prefix changes.
        common = 0
        while common < min(len(last), len(address) - 1) and last[common] == address[common]:
            common += 1
        for depth in range(common, len(address) - 1):
            pad = depth * 16
            rows.append(f"<tr><td style='padding-left:{pad}px' class='il-ns'>{_esc(repr(address[depth]))}</td>"
                        f"<td></td><td></td><td></td></tr>")
        pad = (len(address) - 1) * 16
        key = _esc(repr(address[-1]))
        if with_records:
            rec = item
            kind = "discrete" if rec.dist.discrete else "continuous"
            cls = "il-d" if rec.dist.discrete else "il-c"
            rows.append(f"<tr><td style='padding-left:{pad}px'>{key}</td>"
                        f"<td class='{cls}'>{_esc(format_value(rec.value))}</td>"
                        f"<td>{_esc(repr(rec.dist))} <span class='{cls}'>({kind})</span></td>"
                        f"<td class='il-lp'>{rec.logpdf:.3f}</td></tr>")
        else:
            rows.append(f"<tr><td style='padding-left:{pad}px'>{key}</td>"
                        f"<td>{_esc(format_value(item))}</td><td></td><td></td></tr>")
        last = address
    return rows


def choicemap_html(cm, limit: int = 200) -> str:
    items = list(cm.items())
    rows = _rows_from_flat(items[:limit])
    more = f"<div>… {len(items) - limit} more</div>" if len(items) > limit else ""
    return (f"{_STYLE}<div><b>ChoiceMap</b> ({len(items)} choices)"
            f"<table class='il-tree'>{''.join(rows)}</table>{more}</div>")


def trace_html(trace, limit: int = 200) -> str:
    items = list(trace.flat_records().items())
    rows = _rows_from_flat(items[:limit], with_records=True)
    more = f"<div>… {len(items) - limit} more</div>" if len(items) > limit else ""
    args = ", ".join(format_value(a) for a in trace.args)
    head = (f"<b>Trace of {_esc(trace.gen_fn.name)}</b>({_esc(args)}) — {len(items)} choices, "
            f"score {trace.score:.4f}, return value {_esc(format_value(trace.retval))}")
    return (f"{_STYLE}<div>{head}<table class='il-tree'><tr><th>address</th><th>value</th>"
            f"<th>distribution</th><th>log p</th></tr>{''.join(rows)}</table>{more}</div>")
