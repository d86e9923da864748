"""``transform.compiled``: what the compiled path of one transform did (a small report)."""

from __future__ import annotations


class CompileReport:
    """``keys``: branch keys compiled; ``hits``: moves served by generated code; ``misses``:
    moves the interpreter ran while compilation was on; ``refusals``: why a key (or the whole
    transform) was not compiled, one short line per distinct reason, in the order met."""

    __slots__ = ("keys", "hits", "misses", "refusals", "learning")

    def __init__(self):
        self.keys, self.hits, self.misses, self.refusals, self.learning = 0, 0, 0, [], True

    def refuse(self, reason):
        if reason not in self.refusals:
            self.refusals.append(reason)

    def __repr__(self):
        why = f"; not compiled: {'; '.join(self.refusals)}" if self.refusals else ""
        state = "" if self.learning else " (no longer learning)"
        return f"<compiled: {self.keys} keys, {self.hits} hits, {self.misses} misses{state}{why}>"

    def _repr_html_(self):
        from html import escape
        return f"<code>{escape(repr(self))}</code>"
