"""Core layer: addresses, choice maps, selections, distributions."""

from .address import format_address, normalize_address
from .choicemap import ChoiceMap, Selection, as_choicemap, select, select_all
from .distributions import *  # noqa: F401,F403  (the public constructors)
from .distributions import Distribution
