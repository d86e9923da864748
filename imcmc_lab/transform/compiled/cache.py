"""The compiled keys of one transform: learning (tiered, bounded) and serving.

A move's interpreter run is followed by :meth:`CompiledTransform.learn` (while learning is
on): the transform is traced on the same traces (:mod:`.tracer`), and a key seen for the
second time is added to the trie (:mod:`.codegen`). Its first two hits (then one in 64) are
also run on the interpreter and compared bit for bit (:meth:`should_check`): a disagreement
drops every key, and the move gets the interpreter's result. The trie's function is rebuilt when the keys waiting for it number at
least half of those compiled (so the total compile work stays a small multiple of the
final code's size); at most ``MAX_KEYS`` keys are compiled, and learning stops for good
after too many refusals or ``LEARNING_STEPS`` steps of tracing (counted, not timed: what
compiles is the same on every machine). Nothing raised while learning reaches the user: it is a refusal.

:meth:`CompiledTransform.lookup` serves a move: the environment guard
(:mod:`.environment`), then the generated function (None: a miss).
"""

from __future__ import annotations

import threading

from .codegen import Node, build, insert
from .environment import Environment
from .symbolic import TooCostly, Unsupported
from .tracer import trace_once

MAX_KEYS = 64
LEARNING_STEPS = 30_000     # tracing steps (statements and decisions) a transform may spend
                            # learning, in all (the mixture cycle at K = 8 uses at most 9,000)
MAX_REFUSALS = 24           # traces refused with no key compiled: learning stops
TRACES_PER_KEY = 8          # traces (beyond 32) per compiled key before learning stops: keys
                            # that are seen once and never again would cost a trace a move


class CompiledTransform:
    """The compiled keys of transform ``f`` (its report is ``f.compiled``)."""

    def __init__(self, f):
        self.f, self.report = f, f.compiled
        self._lock = threading.Lock()
        self.meter = [0, LEARNING_STEPS]
        self._reset()

    def _reset(self):
        self.serving = (None, {}, None)     # (function, key kinds, environment): one tuple, for threads
        self.env, self.root = None, Node()
        self.checked = {}               # key index -> hits checked against the interpreter
        self.keys = {}          # key index -> (model kinds, aux kinds, number of aux addresses)
        self.next_index = 0
        self.seen, self.waiting, self.compiled_items, self.refused, self.traces = {}, [], [], 0, 0
        self.report.keys = 0

    def lookup(self, x_flat, y_flat):
        """``(the generated code's answer, its key's kinds)`` for ``(x_flat, y_flat)``, or None
        (a miss)."""
        fn, keys, env = self.serving
        if fn is None or not env.ok():
            return None
        out = fn(x_flat, y_flat)
        return None if out is None else (out, keys[out[-1]])

    def should_check(self, key):
        """Whether this hit of ``key`` is also run on the interpreter and compared: its first
        two hits, then one in 64 (a residual tracer bug then costs a key, not a wrong chain)."""
        n = self.checked.get(key, 0)
        self.checked[key] = n + 1
        return n < 2 or n % 64 == 0

    def disagreed(self):
        """A checked hit disagreed with the interpreter: this transform is not compiled again."""
        self.serving, self.waiting = (None, {}, None), []
        self.report.refuse("generated code disagreed with the interpreter on a move (all keys dropped)")
        self.report.learning = False

    def learn(self, x, y, app):
        """Learn from the interpreter's application ``app`` on ``(x, y)``. Never raises."""
        report = self.report
        if not report.learning or not self._lock.acquire(blocking=False):
            return
        try:
            self._learn(x, y, app)
        except (Exception, Unsupported) as exc:
            self._refuse(f"{type(exc).__name__} while tracing: {exc}"[:120])
        finally:
            if not report.learning and self.waiting:
                self._flush()
            self._lock.release()

    def _flush(self):
        """Learning stopped: the keys waiting for a rebuild are compiled now (once)."""
        try:
            self._rebuild()
        except (Exception, Unsupported) as exc:
            self.waiting = []
            self.report.refuse(f"{type(exc).__name__} while compiling: {exc}"[:120])

    def _refuse(self, reason):
        self.report.refuse(reason)
        self.refused += 1
        if self.refused >= MAX_REFUSALS + 4 * len(self.keys):
            self.report.learning = False

    def _learn(self, x, y, app):
        if self.env is not None and not self.env.ok():
            self._reset()           # a global, closure or default changed: start over
        if self.env is None:
            self.env = Environment()
            try:
                self.env.record_transform(self.f)
            except Unsupported as exc:
                self.report.refuse(str(exc))
                self.report.learning = False
                return
        try:
            tr = trace_once(self.f, x, y, app, self.env, self.meter)
        except TooCostly as exc:
            self.report.refuse(f"{exc} (learning stopped)")
            self.report.learning = False
            return
        except Unsupported as exc:
            self._refuse(str(exc))
            return
        self.traces += 1
        if self.traces > 32 + TRACES_PER_KEY * len(self.keys):
            self.report.refuse("branch keys that rarely repeat (learning stopped)")
            self.report.learning = False
        signature = tuple(it[1:3] for it in tr.items if it[0] == "g")
        state = self.seen.get(signature)
        if state is None:
            self.seen[signature] = "seen"        # first visit: compile on the second
        elif state == "seen":
            self.seen[signature] = "compiled"
            self._add(tr)
        elif self.waiting:
            self._rebuild()         # a waiting key met again: it waits no longer

    def _add(self, tr):
        index = self.next_index
        self.next_index += 1
        items = [it if it[0] != "r" else ("r", it[1].replace(", KEY)", f", {index})"), it[2]) for it in tr.items]
        self.waiting.append((items, index, (tuple(tr.kinds["model"]), tuple(tr.kinds["aux"]), tr.n_aux)))
        if len(self.waiting) * 2 >= len(self.keys) or len(self.keys) + len(self.waiting) >= MAX_KEYS:
            self._rebuild()

    def _rebuild(self):
        """Add the waiting keys to the trie (one that does not fit the trie is refused; the
        trie is then rebuilt from the keys kept) and make its function."""
        for items, index, kinds in self.waiting:
            try:
                insert(self.root, items)
            except Unsupported as exc:
                self._refuse(str(exc))
                self.root = Node()
                for kept in self.compiled_items:
                    insert(self.root, kept)
                continue
            self.compiled_items.append(items)
            self.keys[index] = kinds
        self.waiting = []
        fn, self.source = build(self.root, self.f.name)
        self.serving = (fn, dict(self.keys), self.env)
        self.report.keys = len(self.keys)
        if len(self.keys) >= MAX_KEYS:
            self.report.learning = False
