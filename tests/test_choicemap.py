"""Addresses, choice maps and selections."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import imcmc_lab as il
from imcmc_lab.core.address import normalize_address


# ---------------------------------------------------------------------------
# addresses
# ---------------------------------------------------------------------------
def test_address_normalisation():
    assert normalize_address("k") == ("k",)
    assert normalize_address(3) == (3,)
    assert normalize_address(("mu", 2)) == ("mu", 2)
    assert normalize_address(["mu", 2]) == ("mu", 2)
    # Integer keys from numpy and torch loops become Python ints (so they hash alike).
    key = normalize_address(("mu", np.int64(2)))
    assert key == ("mu", 2) and type(key[1]) is int
    key = normalize_address(("mu", torch.tensor(2)))
    assert key == ("mu", 2) and type(key[1]) is int
    assert normalize_address(()) == ()


@pytest.mark.parametrize("bad", [("mu", 2.0), ("mu", True), 1.5, ("mu", torch.tensor(2.0)), None])
def test_address_keys_must_be_str_or_int(bad):
    with pytest.raises(TypeError, match="str or an int"):
        normalize_address(bad)


def test_format_address():
    assert il.format_address("k") == "'k'"
    assert il.format_address(("mu", 2)) == "('mu', 2)"
    assert il.format_address(("k",)) == "'k'"


# ---------------------------------------------------------------------------
# choice maps
# ---------------------------------------------------------------------------
def make_cm():
    return il.choicemap({"k": 2, ("mu", 1): torch.tensor(0.5, dtype=torch.float64),
                         ("mu", 2): torch.tensor(-1.0, dtype=torch.float64),
                         ("data", 0, "y"): torch.tensor(3.0, dtype=torch.float64)})


def test_leaf_and_namespace_access():
    cm = make_cm()
    assert cm["k"] == 2 and cm[("k",)] == 2
    assert cm["mu", 2] is cm[("mu", 2)]
    assert float(cm["mu", 1]) == 0.5
    sub = cm["mu"]
    assert isinstance(sub, il.ChoiceMap)
    assert list(sub.addresses()) == [(1,), (2,)]
    assert float(sub[2]) == -1.0
    assert float(cm["data"][0]["y"]) == 3.0 and float(cm["data", 0]["y"]) == 3.0
    assert cm.has_value("k") and not cm.has_value("mu")
    assert cm.has_submap("mu") and cm.has_submap(("data", 0)) and not cm.has_submap("k")
    assert "k" in cm and "mu" in cm and ("mu", 2) in cm and ("mu", 3) not in cm
    assert cm.get(("mu", 3), "default") == "default"
    assert cm[()] is cm


def test_iteration_is_in_insertion_order_over_leaves():
    cm = make_cm()
    expected = [("k",), ("mu", 1), ("mu", 2), ("data", 0, "y")]
    assert list(cm) == expected
    assert list(cm.addresses()) == expected
    assert [a for a, _ in cm.items()] == expected
    assert len(cm) == 4 and bool(cm) and not bool(il.choicemap({}))
    shallow = cm.shallow()
    assert list(shallow) == ["k", "mu", "data"]
    assert shallow["k"] == 2 and isinstance(shallow["mu"], il.ChoiceMap)


def test_equality():
    a, b = make_cm(), make_cm()
    assert a == b
    assert a == {"k": 2, ("mu", 1): 0.5, ("mu", 2): -1.0, ("data", 0, "y"): 3.0}
    assert a != a.set("k", 3)
    assert a != a.set(("mu", 1), torch.tensor(0.5000001, dtype=torch.float64))
    assert a != il.choicemap({"k": 2})
    assert a.set(("mu", 1), torch.tensor(0.5 + 1e-12, dtype=torch.float64)).allclose(a)
    assert not a.set(("mu", 1), torch.tensor(0.6, dtype=torch.float64)).allclose(a)
    assert il.choicemap({"v": torch.tensor([1.0, 2.0])}) != il.choicemap({"v": torch.tensor([1.0, 3.0])})
    with pytest.raises(TypeError):
        hash(a)


def test_algebra_returns_new_maps_and_leaves_the_old_unchanged():
    cm = make_cm()
    merged = cm.merge({"slope": 1.0})
    assert "slope" in merged and "slope" not in cm
    with pytest.raises(il.AddressError, match="'k'"):
        cm.merge({"k": 1})
    changed = cm.set("k", 5)
    assert changed["k"] == 5 and cm["k"] == 2
    mounted = cm["mu"].prefixed("theta")
    assert list(mounted.addresses()) == [("theta", 1), ("theta", 2)]
    assert cm.to_dict()[("mu", 1)] is cm["mu", 1]


def test_a_path_is_a_leaf_or_a_namespace_never_both():
    with pytest.raises(il.AddressError, match="'mu'.*both"):
        il.choicemap({"mu": 1.0, ("mu", 1): 2.0})
    with pytest.raises(il.AddressError, match="given twice"):
        il.ChoiceMap({"k": 1, ("k",): 2})


def test_repr_shows_addresses_and_values():
    flat = il.choicemap({"a": 1, "b": torch.tensor(2.5, dtype=torch.float64)})
    assert repr(flat) == "ChoiceMap({'a': 1, 'b': 2.5})"
    text = repr(make_cm())
    for piece in ["'k': 2", "'mu'", "1: 0.5", "2: -1", "'data'", "'y': 3"]:
        assert piece in text
    assert repr(il.choicemap({})) == "ChoiceMap({})"


def test_html_repr_escapes_addresses_and_values():
    evil = "<script>alert('x')</script>"
    cm = il.choicemap({(evil, 1): 1.0, "label": evil, evil + "!": 2})
    html = cm._repr_html_()
    assert "<script>" not in html
    assert "&lt;script&gt;" in html
    assert "3 choices" in html


def test_trace_html_repr_escapes_addresses():
    evil = "<script>alert(1)</script>"

    @il.gen
    def model():
        il.normal(0.0, 1.0) @ (evil, 0)
        il.bernoulli(0.5) @ (evil + "2")

    html = model.simulate()._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "continuous" in html and "discrete" in html


def test_as_choicemap_accepts_dicts_traces_and_none():
    @il.gen
    def model():
        il.normal(0.0, 1.0) @ ("mu", 2)

    trace = model.simulate()
    assert il.as_choicemap(trace) == trace.get_choices()
    assert len(il.as_choicemap(None)) == 0
    assert il.as_choicemap({"k": 1})["k"] == 1
    with pytest.raises(TypeError, match="ChoiceMap or a dict"):
        il.as_choicemap([("k", 1)])


def test_trace_addresses_tuple_and_varargs_forms_agree():
    @il.gen
    def model():
        k = il.poisson_plus_one(2.0) @ "k"
        for j in range(1, k + 1):
            il.normal(0.0, 1.0) @ ("mu", j)
        return k

    torch.manual_seed(0)
    trace, _ = model.generate((), {"k": 3})
    assert trace["mu", 2] is trace[("mu", 2)]
    assert trace["mu", 2] is trace.get_choices()["mu", 2]
    assert trace["k"] == trace[("k",)] == 3
    assert trace[()] == 3
    assert ("mu", 3) in trace and ("mu", 4) not in trace and "mu" in trace
    sub = trace["mu"]
    assert isinstance(sub, il.ChoiceMap) and list(sub.addresses()) == [(1,), (2,), (3,)]


# ---------------------------------------------------------------------------
# selections
# ---------------------------------------------------------------------------
def test_selection_of_a_namespace_selects_everything_under_it():
    s = il.select("k", "mu")
    assert "k" in s and ("mu", 3) in s and ("mu", 3, "x") in s
    assert ("var", 1) not in s and "kk" not in s
    pair = il.select(("mu", 2))
    assert ("mu", 2) in pair and ("mu", 1) not in pair and "mu" not in pair


def test_subselection_and_all():
    s = il.select(("mu", 2), ("data", 1, "y"))
    assert 2 in s.subselection("mu") and 1 not in s.subselection("mu")
    assert (1, "y") in s.subselection("data")
    assert s.subselection("k").is_empty()
    assert s.subselection(("mu", 2)) is il.select_all()
    everything = il.select_all()
    assert ("anything", 7) in everything and not everything.is_empty()
    assert il.select().is_empty()


def test_selection_repr():
    assert repr(il.select("k", ("mu", 2))) == "select('k', ('mu', 2))"
    assert repr(il.select_all()) == "select_all()"
    assert "&lt;" in il.select("<b>")._repr_html_()


def test_selection_coercion_treats_a_tuple_as_one_address():
    @il.gen
    def model():
        il.normal(0.0, 1.0) @ ("mu", 1)
        il.normal(0.0, 1.0) @ ("mu", 2)
        il.normal(0.0, 1.0) @ "m"
        il.normal(0.0, 1.0) @ "u"

    torch.manual_seed(0)
    trace = model.simulate()
    lp = {a: r.logpdf for a, r in trace.flat_records().items()}
    assert trace.project("mu") == pytest.approx(lp["mu", 1] + lp["mu", 2])   # not "m" + "u"
    assert trace.project(("mu", 2)) == pytest.approx(lp["mu", 2])
    assert trace.project(["m", ("mu", 1)]) == pytest.approx(lp["m",] + lp["mu", 1])
    assert trace.project(il.select_all()) == pytest.approx(trace.score)
    new, _ = trace.regenerate(("mu", 1))
    changed = {a for a in trace.get_choices().addresses() if not torch.equal(new[a], trace[a])}
    assert changed == {("mu", 1)}
    new, _ = trace.regenerate(["m", "u"])
    changed = {a for a in trace.get_choices().addresses() if not torch.equal(new[a], trace[a])}
    assert changed == {("m",), ("u",)}
