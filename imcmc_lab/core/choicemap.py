"""Choice maps and selections.

A :class:`ChoiceMap` is an immutable dictionary from addresses (tuples) to
values. It is stored flat -- ``{("mu", 1): v1, ("mu", 2): v2, ("k",): 3}`` --
and viewed hierarchically: ``cm["mu"]`` is the sub-choice-map of namespace
``"mu"`` and ``cm["mu", 2]`` the value at leaf ``("mu", 2)``. A path is a leaf
or a namespace, never both.

Wherever the engine expects a choice map, a plain ``dict`` ``{address: value}``
is accepted too (:func:`as_choicemap`).
"""

from __future__ import annotations

import html
from typing import Iterator

from ..errors import AddressError
from .address import did_you_mean, format_address, normalize_address
from .values import format_value, values_close, values_equal

__all__ = ["ChoiceMap", "Selection", "as_choicemap", "as_selection", "choicemap", "select",
           "select_all", "EMPTY"]


class ChoiceMap:
    """An immutable hierarchical map from addresses to values.

    >>> cm = ChoiceMap({"k": 2, ("mu", 1): 0.5, ("mu", 2): -1.0})
    >>> cm["k"], sorted(cm["mu"].addresses())
    (2, [(1,), (2,)])
    """

    __slots__ = ("_leaves", "_namespaces")

    def __init__(self, leaves=None):
        flat = {}
        if leaves:
            items = leaves.items() if not isinstance(leaves, ChoiceMap) else leaves._leaves.items()
            for address, value in items:
                address = normalize_address(address)
                if address in flat:
                    raise AddressError(f"address {format_address(address)} given twice")
                flat[address] = value
        self._leaves = flat
        self._namespaces = None
        if len(flat) > 1:
            self._check_leaf_namespace_conflicts()

    @classmethod
    def _from_flat(cls, flat: dict, check: bool = False) -> "ChoiceMap":
        """Build from an already-normalised dict, without copying; with ``check``, a leaf
        that is also a namespace is still an error (as for ``ChoiceMap(flat)``)."""
        cm = cls.__new__(cls)
        cm._leaves = flat
        cm._namespaces = None
        if check and len(flat) > 1:
            cm._check_leaf_namespace_conflicts()
        return cm

    def _check_leaf_namespace_conflicts(self):
        spaces = self._namespace_set()
        if spaces.isdisjoint(self._leaves):       # the common case, in one C call
            return
        for address in self._leaves:
            if address in spaces:
                raise AddressError(
                    f"address {format_address(address)} is used both as a value and as a "
                    f"namespace; a path is a leaf or a namespace, never both"
                )

    def _namespace_set(self) -> set:
        if self._namespaces is None:
            spaces = set()
            for address in self._leaves:
                if len(address) > 1:
                    for i in range(1, len(address)):
                        spaces.add(address[:i])
            self._namespaces = spaces
        return self._namespaces

    # -- access ---------------------------------------------------------
    def has_value(self, address) -> bool:
        return normalize_address(address) in self._leaves

    def has_submap(self, address) -> bool:
        address = normalize_address(address)
        return address == () or address in self._namespace_set()

    def get_value(self, address):
        address = normalize_address(address)
        try:
            return self._leaves[address]
        except KeyError:
            raise AddressError(
                f"no value at address {format_address(address)} in this choice map."
                + did_you_mean(address, self._leaves)
            ) from None

    def get_submap(self, address) -> "ChoiceMap":
        """The choices under namespace ``address``, with that prefix removed (empty if none)."""
        address = normalize_address(address)
        if not address:
            return self
        n = len(address)
        return ChoiceMap._from_flat(
            {a[n:]: v for a, v in self._leaves.items() if len(a) > n and a[:n] == address}
        )

    def __getitem__(self, address):
        address = normalize_address(address)
        if address in self._leaves:
            return self._leaves[address]
        if address == () or address in self._namespace_set():
            return self.get_submap(address)
        raise AddressError(
            f"no address {format_address(address)} in this choice map."
            + did_you_mean(address, self._leaves)
        )

    def __contains__(self, address) -> bool:
        address = normalize_address(address)
        return address in self._leaves or address in self._namespace_set()

    def get(self, address, default=None):
        return self._leaves.get(normalize_address(address), default)

    # -- iteration ------------------------------------------------------
    def addresses(self):
        """Leaf addresses, in insertion (execution) order."""
        return self._leaves.keys()

    def items(self):
        """``(address, value)`` pairs of every leaf."""
        return self._leaves.items()

    def values(self):
        return self._leaves.values()

    def __iter__(self) -> Iterator[tuple]:
        return iter(self._leaves)

    def __len__(self) -> int:
        return len(self._leaves)

    def __bool__(self) -> bool:
        return bool(self._leaves)

    def shallow(self):
        """The top-level keys, each with a value (leaf) or a ChoiceMap (namespace)."""
        seen = {}
        for address in self._leaves:
            head = address[0]
            if head not in seen:
                seen[head] = self[(head,)]
        return seen

    # -- algebra --------------------------------------------------------
    def merge(self, other) -> "ChoiceMap":
        """The union of two choice maps with disjoint addresses."""
        other = as_choicemap(other)
        clash = self._leaves.keys() & other._leaves.keys()
        if clash:
            raise AddressError(
                "cannot merge choice maps that both have "
                + ", ".join(format_address(a) for a in sorted(clash, key=str))
            )
        merged = dict(self._leaves)
        merged.update(other._leaves)
        return ChoiceMap(merged)

    def set(self, address, value) -> "ChoiceMap":
        """A copy with ``address`` set to ``value``."""
        leaves = dict(self._leaves)
        leaves[normalize_address(address)] = value
        return ChoiceMap(leaves)

    def prefixed(self, prefix) -> "ChoiceMap":
        """The same choices mounted under namespace ``prefix``."""
        prefix = normalize_address(prefix)
        return ChoiceMap._from_flat({prefix + a: v for a, v in self._leaves.items()})

    def to_dict(self) -> dict:
        return dict(self._leaves)

    def __eq__(self, other):
        if isinstance(other, dict):
            other = as_choicemap(other)
        if not isinstance(other, ChoiceMap):
            return NotImplemented
        if self._leaves.keys() != other._leaves.keys():
            return False
        return all(values_equal(v, other._leaves[a]) for a, v in self._leaves.items())

    __hash__ = None

    def allclose(self, other, rtol=1e-6, atol=1e-8) -> bool:
        other = as_choicemap(other)
        if self._leaves.keys() != other._leaves.keys():
            return False
        return all(values_close(v, other._leaves[a], rtol, atol) for a, v in self._leaves.items())

    # -- display --------------------------------------------------------
    def _tree_lines(self, indent=""):
        lines = []
        for key, sub in self.shallow().items():
            if isinstance(sub, ChoiceMap) and not (len(sub) == 1 and () in sub._leaves):
                lines.append(f"{indent}{key!r}")
                lines.extend(sub._tree_lines(indent + "  "))
            else:
                lines.append(f"{indent}{key!r}: {format_value(sub)}")
        return lines

    def __repr__(self):
        if not self._leaves:
            return "ChoiceMap({})"
        if len(self._leaves) <= 4 and all(len(a) == 1 for a in self._leaves):
            body = ", ".join(f"{a[0]!r}: {format_value(v)}" for a, v in self._leaves.items())
            return f"ChoiceMap({{{body}}})"
        return "ChoiceMap\n" + "\n".join(self._tree_lines("  "))

    def _repr_html_(self):
        from .display import choicemap_html  # local: only when shown

        return choicemap_html(self)


EMPTY = ChoiceMap._from_flat({})


def as_choicemap(choices) -> ChoiceMap:
    """Accept a ChoiceMap, a dict ``{address: value}``, a trace, or None."""
    if choices is None:
        return EMPTY
    if isinstance(choices, ChoiceMap):
        return choices
    if isinstance(choices, dict):
        return ChoiceMap(choices)
    get_choices = getattr(choices, "get_choices", None)
    if get_choices is not None:
        return get_choices()
    raise TypeError(
        f"expected a ChoiceMap or a dict {{address: value}}, got {type(choices).__name__}"
    )


class Selection:
    """A set of addresses; selecting a namespace selects everything under it.

    >>> s = select("k", "mu")       # "k" and every ("mu", ...) address
    >>> ("mu", 3) in s, ("var", 1) in s
    (True, False)
    """

    __slots__ = ("_addresses", "_all")

    def __init__(self, addresses=(), all_addresses=False):
        self._addresses = frozenset(normalize_address(a) for a in addresses)
        self._all = all_addresses

    def __contains__(self, address) -> bool:
        if self._all:
            return True
        address = normalize_address(address)
        for i in range(1, len(address) + 1):
            if address[:i] in self._addresses:
                return True
        return False

    def subselection(self, prefix) -> "Selection":
        """The selection inside namespace ``prefix`` (prefix removed)."""
        if self._all:
            return self
        prefix = normalize_address(prefix)
        if prefix in self:
            return ALL
        n = len(prefix)
        return Selection([a[n:] for a in self._addresses if len(a) > n and a[:n] == prefix])

    def is_empty(self) -> bool:
        return not self._all and not self._addresses

    def addresses(self):
        return self._addresses

    def __repr__(self):
        if self._all:
            return "select_all()"
        return "select(" + ", ".join(format_address(a) for a in sorted(self._addresses, key=str)) + ")"

    def _repr_html_(self):
        return f"<code>{html.escape(repr(self))}</code>"


ALL = Selection(all_addresses=True)


def as_selection(selection) -> Selection:
    """Accept a Selection, one address (``"k"``, ``("mu", 2)``) or a list/set of addresses."""
    if isinstance(selection, Selection):
        return selection
    if isinstance(selection, (list, set, frozenset)):
        return Selection(selection)
    return Selection([selection])


def select(*addresses) -> Selection:
    """A selection of the given addresses (each a leaf or a namespace)."""
    return Selection(addresses)


def select_all() -> Selection:
    return ALL


def choicemap(*pairs, **named) -> ChoiceMap:
    """``choicemap({"k": 2, ("mu", 1): 0.3})`` or ``choicemap(("k", 2), (("mu", 1), 0.3))``."""
    if len(pairs) == 1 and isinstance(pairs[0], (dict, ChoiceMap)):
        leaves = dict(as_choicemap(pairs[0]).items())
    else:
        leaves = dict(pairs)
    leaves.update(named)
    return ChoiceMap(leaves)
