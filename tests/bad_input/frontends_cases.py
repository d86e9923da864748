"""Bad input for the frontends layer: what the user does, the error they must see."""

from __future__ import annotations

from . import Case

CASES: list[Case] = [
]
