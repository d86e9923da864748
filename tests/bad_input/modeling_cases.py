"""Bad input for the modeling layer: what the user does, the error they must see."""

from __future__ import annotations

import functools

from imcmc_lab.modeling.trace import TraceChangedError

from . import Case

CASES: list[Case] = [
]


def _gen_on_lru_cache():
    import imcmc_lab as il

    @functools.lru_cache(maxsize=None)
    def cached(n):
        return il.normal(0.0, 1.0) @ "x"

    return il.gen(cached)


def _gen_on_builtin():
    import imcmc_lab as il

    return il.gen(len)


CASES += [
    # issue 16 item 20: a cached body would skip its choices on repeated calls
    Case("gen-on-lru-cache", _gen_on_lru_cache, TypeError, ("lru_cache", "cached", "plain function")),
    Case("gen-on-builtin", _gen_on_builtin, TypeError, ("len", "python function")),
]


def _edit_a_read_value_then_update():
    import torch

    import imcmc_lab as il

    @il.gen
    def model():
        il.normal(0.0, 1.0) @ ("mu", 1)

    trace, _ = model.generate((), {("mu", 1): torch.tensor(0.5, dtype=torch.float64)})
    v = trace["mu", 1]
    v += 50                     # in place: the trace's own tensor
    trace.update({})


CASES += [
    # issue 16 item 1: an in-place edit of a value a trace handed out used to change the trace silently
    Case("in-place-edit-of-a-trace-value", _edit_a_read_value_then_update, TraceChangedError,
         ("changed in place", "('mu', 1)", "trace.update", "clone()")),
]
