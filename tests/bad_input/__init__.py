"""Tables of bad input and the error a user must see, one module per layer.

Each module defines ``CASES``: a list of :class:`Case`. ``tests/test_bad_input.py``
runs them all, so the next finding becomes one row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Case:
    """``run()`` must raise ``raises`` (or warn, for a ``Warning`` subclass) with every
    string of ``words`` in its message (case-insensitive)."""

    id: str
    run: Callable[[], object]
    raises: type
    words: tuple[str, ...] = field(default_factory=tuple)
