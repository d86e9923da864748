"""How the engine's named objects pickle: by name where the name finds them, else by value.

``@gen`` and ``@transform`` replace a module's function with a wrapper that keeps the
function; pickle's default (the function by its qualified name) then finds the wrapper,
not the function, and refuses. A wrapper that a module attribute names pickles as that
name (standard ``pickle`` and ``cloudpickle`` alike: the copy *is* the original in this
process, and the same object in another one that imports the module); any other one
(defined in a notebook, ``__main__``, a function body, or a module registered with
``cloudpickle.register_pickle_by_value``) pickles by value, which ``cloudpickle`` can do.

The same rule keeps objects the engine compares by identity (``label is discrete``)
themselves after a round trip.
"""

from __future__ import annotations

import sys

__all__ = ["importable_name", "reduce_by_name"]


def importable_name(obj):
    """The qualified name under which another process finds ``obj`` itself by importing
    its module, or None (notebook, ``__main__``, local, or pickled by value on request)."""
    module_name = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module_name or not qualname or module_name == "__main__" or "<locals>" in qualname:
        return None
    module = sys.modules.get(module_name)
    if module is None or _pickled_by_value(module):
        return None
    target = module
    for part in qualname.split("."):
        target = getattr(target, part, None)
    return qualname if target is obj else None


def _pickled_by_value(module) -> bool:
    """Whether ``cloudpickle.register_pickle_by_value`` named the module (or its package)."""
    cloudpickle = sys.modules.get("cloudpickle")
    if cloudpickle is None:
        return False
    name = module.__name__
    return any(name == n or name.startswith(n + ".") for n in cloudpickle.list_registry_pickle_by_value())


def reduce_by_name(obj, protocol, by_value):
    """``__reduce_ex__`` of a named object: its qualified name (pickle then saves a global
    reference and checks it finds ``obj``), else ``by_value(protocol)``."""
    return importable_name(obj) or by_value(protocol)
