"""Addresses: hierarchical paths of ``str``/``int`` keys.

``"k"`` is shorthand for ``("k",)``; ``("mu", 2)`` is key ``2`` inside the
namespace ``"mu"``. Every address is normalised to a tuple once, at the API
boundary, so the engine can use plain tuples as dictionary keys.
"""

from __future__ import annotations

import difflib
import numbers

Address = tuple

__all__ = ["Address", "normalize_address", "format_address", "suggest_addresses"]


def _normalize_key(key):
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        raise TypeError(f"an address key must be a str or an int, not the bool {key!r}")
    if isinstance(key, numbers.Integral):
        return int(key)
    # 0-d integer tensors and numpy integers arrive from user loops.
    if hasattr(key, "item") and getattr(key, "ndim", 1) == 0:
        value = key.item()
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    raise TypeError(
        f"an address key must be a str or an int, got {key!r} of type {type(key).__name__}"
    )


def normalize_address(address) -> tuple:
    """Return ``address`` as a tuple of keys (``"k"`` -> ``("k",)``)."""
    if type(address) is tuple:
        for k in address:      # a loop, not all(...): this runs once per random choice
            if type(k) is not str and type(k) is not int:
                return tuple(_normalize_key(k) for k in address)
        return address
    if type(address) is str or type(address) is int:
        return (address,)
    if isinstance(address, list):
        return tuple(_normalize_key(k) for k in address)
    return (_normalize_key(address),)


def format_address(address) -> str:
    """A readable spelling of an address: ``"k"``, ``("mu", 2)``, ``()`` for the root."""
    address = normalize_address(address)
    if len(address) == 1:
        return repr(address[0])
    return repr(address)


def suggest_addresses(missing, existing, n: int = 3) -> list:
    """The existing addresses whose spelling is closest to ``missing``."""
    missing_text = format_address(missing)
    by_text = {format_address(a): a for a in existing}
    close = difflib.get_close_matches(missing_text, list(by_text), n=n, cutoff=0.5)
    if not close:
        # A wrong index inside a right namespace: suggest siblings.
        missing = normalize_address(missing)
        siblings = [a for a in existing if a[:1] == missing[:1]]
        close = [format_address(a) for a in siblings[:n]]
    return [by_text[c] for c in close]


def did_you_mean(missing, existing) -> str:
    """A ' Did you mean ...?' sentence, or '' when nothing is close."""
    close = suggest_addresses(missing, existing)
    if not close:
        return ""
    return " Did you mean " + " or ".join(format_address(a) for a in close) + "?"
