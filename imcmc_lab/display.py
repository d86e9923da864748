"""The HTML renderings now live in :mod:`imcmc_lab.core.display` (the lowest layer, which
choice maps and traces render through); this name is kept for the views that import it."""

from .core.display import choicemap_html, trace_html

__all__ = ["choicemap_html", "trace_html"]
