"""Shared look of the views: one colour legend, fonts, and escaped SVG/HTML helpers.

Every view uses the same roles and colours, so a reader learns them once:
read = blue, written = orange, copied = green, kept / eliminated = grey,
differs = red. All user text (addresses, values, names) goes through
:func:`esc` before it reaches HTML or SVG.
"""

from __future__ import annotations

import html

from imcmc_lab.core.address import normalize_address
from imcmc_lab.core.values import format_value

SANS = ("system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif")
MONO = "'JetBrains Mono', 'SFMono-Regular', Menlo, Consolas, 'DejaVu Sans Mono', monospace"

INK = "#1f2328"          # main text
MUTED = "#656d76"        # secondary text
FAINT = "#8c959f"        # tertiary text, tree connectors
LINE = "#d0d7de"         # card borders
PANEL = "#f6f8fa"        # card title bars, zero cells

# role -> (strong colour, light tint, legend text)
ROLES = {
    "read": ("#0969da", "#ddf4ff", "read"),
    "written": ("#bc4c00", "#fff1e5", "written"),
    "copied": ("#1a7f37", "#dafbe1", "copied"),
    "kept": ("#6e7781", "#f6f8fa", "kept (implicit copy)"),
    "differs": ("#cf222e", "#ffebe9", "differs from the start"),
}

# Kinds of eliminated Jacobian coordinates (JacobianRecord.eliminated) -> colour, legend text.
ELIMINATED = {
    "copy": ("#1a7f37", "copy"),
    "implicit": ("#8c959f", "implicit copy"),
    "pass-through": ("#4d9e9e", "pass-through"),
}

# Independent blocks of a reduced Jacobian: outline colour, tint.
BLOCK_COLOURS = [("#8250df", "#f5efff"), ("#bf3989", "#ffeff7"), ("#0a7ea4", "#e6f6fb"),
                 ("#9a6700", "#fff8c5"), ("#6639ba", "#efe8ff"), ("#1b7c83", "#e0f5f5")]

MONO_CHAR = 0.61        # width of a monospace character, in font sizes
SANS_CHAR = 0.56        # average width of a sans-serif character, in font sizes


def esc(text) -> str:
    """HTML/SVG-escape any text (quotes too, so it is safe inside attributes)."""
    return html.escape(str(text), quote=True)


def key_text(key) -> str:
    """One address key as shown in views: ``mu``, ``2``; a string that looks like an
    int keeps its quotes (``'2'``) so it is not confused with the int key."""
    if isinstance(key, str) and not key.lstrip("-").isdigit() and key.strip() == key and key:
        return key
    return repr(key)


def address_text(address) -> str:
    """``mu, 2`` for ``("mu", 2)``; ``k`` for ``("k",)``; ``(root)`` for ``()``."""
    address = normalize_address(address)
    return ", ".join(key_text(k) for k in address) if address else "(root)"


def value_names(trace) -> dict:
    """The names a trace's generative function gives to choice values, for display: its
    ``value_names`` attribute, ``{choice key: names}`` (``names``: a sequence or a mapping
    from the value, e.g. ``{"node_type": ("constant", "linear", ...)}``), applied to every
    choice whose address ends in that key, sub-calls included. ``{}`` when none."""
    return getattr(getattr(trace, "gen_fn", None), "value_names", None) or {}


def value_text(value, key, names) -> str:
    """``value`` as text; ``"name (value)"`` when ``names`` (see :func:`value_names`) names it."""
    text = format_value(value)
    table = names.get(key) if names else None
    if table is None:
        return text
    try:
        return f"{table[int(value)]} ({text})"
    except (TypeError, ValueError, IndexError, KeyError, RuntimeError):   # not a named value
        return text


def clip(text: str, max_chars: int) -> str:
    """``text`` shortened with an ellipsis to at most ``max_chars`` characters."""
    if max_chars < 2:
        return "…"
    if len(text) <= max_chars:
        return text
    return text[: max_chars - 1].rstrip("…, ") + "…"


def mono_width(text: str, size: float) -> float:
    return len(text) * size * MONO_CHAR


def sans_width(text: str, size: float) -> float:
    return len(text) * size * SANS_CHAR


def svg_text(x, y, text, size=12, fill=INK, family=MONO, weight=None, anchor=None, extra="") -> str:
    """An escaped SVG ``<text>`` element."""
    attrs = f'x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}" font-family="{family}"'
    if weight:
        attrs += f' font-weight="{weight}"'
    if anchor:
        attrs += f' text-anchor="{anchor}"'
    return f"<text {attrs}{extra}>{esc(text)}</text>"


def legend_svg(x, y, items, size=11.5) -> tuple[str, float]:
    """A one-line legend of ``(colour, tint, label)`` swatches; returns (svg, width)."""
    parts, cx = [], x
    for colour, tint, label in items:
        parts.append(f'<rect x="{cx:.1f}" y="{y - size + 1:.1f}" width="{size + 2}" height="{size + 2}" rx="3" '
                     f'fill="{tint}" stroke="{colour}" stroke-width="1.5"/>')
        parts.append(svg_text(cx + size + 8, y + 1, label, size=size, fill=MUTED, family=SANS))
        cx += size + 8 + sans_width(label, size) + 22
    return "".join(parts), cx - x


def legend_html(items) -> str:
    """The same legend as HTML (for captions outside SVG)."""
    spans = [f"<span style='display:inline-flex;align-items:center;margin-right:14px'>"
             f"<span style='display:inline-block;width:12px;height:12px;border-radius:3px;background:{tint};"
             f"border:1.5px solid {colour};margin-right:6px'></span>{esc(label)}</span>"
             for colour, tint, label in items]
    return f'<div style="font:12px {SANS};color:{MUTED}">{"".join(spans)}</div>'
