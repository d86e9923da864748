"""Bad input for the modeling layer: what the user does, the error they must see."""

from __future__ import annotations

import functools

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
