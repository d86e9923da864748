"""Issue 16 item 1: traces are immutable values, also against in-place edits.

A trace hands out its own tensors (``trace["mu"] is trace.get_choices()["mu"]``, and a
kept value is the same tensor in the traces ``update`` makes). Changing one in place
(``v = trace["mu"]; v += 50``) used to change every trace holding it while their cached
densities stayed: later weights were silently wrong. Now the engine refuses to use a
trace holding a value changed in place (the error rows are in ``tests/bad_input/``);
these tests check what must keep working, and the chain's history.
"""

from __future__ import annotations

import pickle

import pytest
import torch

import imcmc_lab as il


@il.gen
def _two(xs):
    mu = il.normal(0.0, 1.0) @ "mu"
    il.iid(il.normal(mu, 1.0), len(xs)) @ "x"
    return mu


_XS = (0.5, -0.2, 1.0)


def _observed(mu=0.3):
    xs = torch.tensor(_XS, dtype=torch.float64)
    return _two.generate((xs,), {"x": xs, "mu": mu})[0]


def _exact_score(trace):
    return _two.assess(trace.args, {a: v.clone() for a, v in trace.get_choices().items()})


def test_values_are_handed_out_by_identity_and_an_edit_is_refused():
    trace = _observed()
    v = trace["mu"]
    assert v is trace.get_choices()["mu"] is trace.get_retval()
    v += 50
    with pytest.raises(il.errors.TraceChangedError, match=r"'mu'.*changed in place.*clone\(\)"):
        trace.update({"x": torch.zeros(3, dtype=torch.float64)})


def test_a_cloned_value_may_be_changed_and_the_trace_stays_exact():
    trace = _observed()
    v = trace["mu"].clone()
    v += 50
    new, weight, _ = trace.update({"x": torch.zeros(3, dtype=torch.float64)})
    assert trace["mu"].item() == 0.3
    assert weight == pytest.approx(_exact_score(new) - _exact_score(trace), abs=1e-12)


def test_a_changed_value_the_used_trace_no_longer_holds_is_no_error():
    first = _observed()
    second, _, _ = first.update({"mu": 0.5})          # "mu" replaced, "x" shared
    first["mu"].add_(1.0)                             # only ``first`` holds it
    third, weight, _ = second.update({"mu": 0.7})
    assert weight == pytest.approx(_exact_score(third) - _exact_score(second), abs=1e-12)
    with pytest.raises(il.errors.TraceChangedError, match="'mu'"):
        first.update({})                             # ``first`` itself is refused


def test_an_edit_after_the_sharing_trace_was_made_is_refused_there():
    trace = _observed()
    new, _, _ = trace.update({})                      # made before the value was handed out
    trace["x"][1] = 7.0
    with pytest.raises(il.errors.TraceChangedError, match="'x'"):
        new.update({"mu": 0.5})


def test_an_edit_through_a_view_is_refused():
    trace = _observed()
    trace["x"][1:].mul_(2.0)
    with pytest.raises(il.errors.TraceChangedError, match="'x'"):
        trace.regenerate("mu")


def test_the_discard_of_update_is_protected_like_the_trace():
    trace = _observed()
    _, _, discard = trace.update({"mu": 0.9})
    discard["mu"].add_(1.0)                           # the old value: still ``trace``'s
    with pytest.raises(il.errors.TraceChangedError, match="'mu'"):
        trace.update({})


def test_other_traces_are_not_affected():
    first, second = _observed(), _observed()
    first["mu"].add_(1.0)
    new, weight, _ = second.update({"mu": 0.4})
    assert weight == pytest.approx(_exact_score(new) - _exact_score(second), abs=1e-12)


def test_a_long_lineage_keeps_a_bounded_record_of_what_it_handed_out():
    # a user's own chain loop that keeps every value it reads: what the engine checks on
    # each update must not grow with the number of steps (else long chains are quadratic)
    torch.manual_seed(0)
    trace, kept = _observed(), []
    for step in range(2000):
        if step % 2:
            trace, _, _ = trace.update({"mu": 0.01 * step})
        else:
            trace, _ = trace.regenerate("mu")
        kept.append(trace["mu"])
        kept.append(trace["x"])
    assert len(trace._loans) < 100         # 4,000 values lent: dead owners are dropped
    assert all(v.item() == pytest.approx(0.01 * (2 * i + 1)) for i, v in enumerate(kept[2::4]))


def test_a_trace_that_handed_out_values_pickles_and_keeps_checking():
    trace = _observed()
    trace["mu"]
    copy = pickle.loads(pickle.dumps(trace))
    copy["mu"].add_(1.0)
    with pytest.raises(il.errors.TraceChangedError, match="'mu'"):
        copy.update({})
    trace.update({})                                  # the original is untouched


@il.gen
def _mean(n):
    mu = il.normal(0.0, 2.0) @ "mu"
    il.iid(il.normal(mu, 1.0), n) @ "x"


def test_editing_a_sample_of_the_chain_history_changes_no_other_sample_nor_the_chain():
    trace, _ = _mean.generate((3,), {"x": torch.tensor([0.5, 1.0, 1.5], dtype=torch.float64)})
    torch.manual_seed(1)
    chain = il.run_chain(il.MH(il.select("mu")), trace, 200, record=["mu"], progress=False)
    samples = chain.samples[0]
    repeated = [i for i in range(len(samples) - 1) if samples[i]["mu"].item() == samples[i + 1]["mu"].item()]
    assert repeated                                   # rejected moves: the same value twice
    before = [s["mu"].item() for s in samples]
    for i in repeated[:5] + [len(samples) - 1]:
        samples[i]["mu"] += 50.0                      # the user edits their history
    for i, s in enumerate(samples):
        if i not in repeated[:5] + [len(samples) - 1]:
            assert s["mu"].item() == before[i]
    last = chain.traces[0]
    assert last["mu"].item() == before[-1]           # the chain's state is untouched
    assert last.score == pytest.approx(_mean.assess((3,), last.get_choices()), abs=1e-12)
    il.run_chain(il.MH(il.select("mu")), None, 20, chain=chain, progress=False)
    assert chain.scores[0][-1] == pytest.approx(_mean.assess((3,), chain.traces[0].get_choices()),
                                                abs=1e-12)


def test_an_involutive_move_refuses_a_changed_trace_and_a_clean_one_moves():
    @il.transform
    def negate(t_in, t_out):
        il.write(t_out["mu"], -il.read(t_in["mu"], il.continuous), il.continuous)

    trace = _observed()
    new, _ = il.involutive_mcmc(trace, None, (), negate)
    assert new.score == pytest.approx(_exact_score(new), abs=1e-12)
    new["mu"].mul_(3.0)
    with pytest.raises(il.errors.TraceChangedError, match="'mu'"):
        il.involutive_mcmc(new, None, (), negate)


@il.gen
def _element(x, slope):
    return il.normal(slope * x, 1.0) @ "y"


@il.gen
def _regression(xs):
    slope = il.normal(0.0, 2.0) @ "slope"
    return il.Map(_element)(xs, [slope] * len(xs)) @ "data"


def test_a_map_element_value_edited_through_a_return_value_list_is_refused():
    torch.manual_seed(0)
    trace = _regression.simulate([0.5, 1.0, 2.0])
    new, _, _ = trace.update({"slope": 0.3})          # the elements keep their "y"
    ys = new["data"]                                  # the Map's return value: a list of tensors
    ys[1] += 10.0                                     # in place on element 1's "y"
    for used in (trace, new):
        with pytest.raises(il.errors.TraceChangedError, match=r"\('data', 1, 'y'\)"):
            used.update({"slope": 0.1})


def test_a_value_re_scored_by_update_stays_protected_after_the_lending_trace_is_gone():
    import gc
    torch.manual_seed(0)
    trace = _regression.simulate([0.5, 1.0, 2.0])
    y = trace["data", 1, "y"]                         # lent by ``trace``
    new, _, _ = trace.update({"slope": 0.3})          # re-scores "y": a new record, same tensor
    del trace
    gc.collect()                                      # the lending record is gone
    y.add_(10.0)
    with pytest.raises(il.errors.TraceChangedError, match=r"\('data', 1, 'y'\)"):
        new.update({"slope": 0.1})


@il.gen
def _centred(n):
    xs = il.iid(il.normal(0.0, 1.0), n) @ "xs"
    xs -= xs.mean()                  # the mistake: changes the drawn value after it was scored
    return xs


@il.gen
def _centred_kept(n):
    mu = il.normal(0.0, 1.0) @ "mu"
    if n > 2:
        mu += 1.0                    # the same mistake on a value update keeps from the old trace
    return mu


@pytest.mark.parametrize("run", [
    lambda: _centred.simulate(3),
    lambda: _centred.generate((3,), {"xs": [0.5, 1.0, 3.0]}),
    lambda: _centred_kept.generate((2,), {"mu": 0.2})[0].update(None, (3,)),
])
def test_a_body_that_changes_a_drawn_value_in_place_is_an_error_naming_the_address_and_line(run):
    """The trace would keep the changed value with the density of the drawn one (silently
    wrong scores and weights: simulate's score disagreed with assess)."""
    with pytest.raises(il.TraceChangedError) as err:
        run()
    message = str(err.value)
    assert ("'xs'" in message or "'mu'" in message) and "line" in message and "in place" in message
    assert "xs = xs - " in message or "mu = mu + " in message or "out-of-place" in message


def test_a_body_that_changes_a_copy_of_a_drawn_value_is_fine():
    @il.gen
    def centred_copy(n):
        xs = il.iid(il.normal(0.0, 1.0), n) @ "xs"
        ys = xs.clone()
        ys -= ys.mean()
        return ys

    trace = centred_copy.simulate(4)
    assert trace.get_score() == pytest.approx(centred_copy.assess((4,), trace.get_choices()), abs=1e-12)


# ---------------------------------------------------------------------------
# what was still not caught (issue 16 item 1, second round): the arguments a trace keeps,
# writes through a NumPy view, a lowered family's values, a sub-call's return value and
# update_detailed's discard
# ---------------------------------------------------------------------------
@il.gen
def _line(xs):
    slope = il.normal(0.0, 2.0) @ "slope"
    for i in range(len(xs)):
        il.normal(slope * xs[i], 1.0) @ ("y", i)


def _line_trace(xs):
    return _line.generate((xs,), {("y", i): 0.1 * i for i in range(len(xs))} | {"slope": 0.3})[0]


@pytest.mark.parametrize("get", [lambda t: t.args, lambda t: t.get_args()])
def test_an_edit_of_the_arguments_a_trace_keeps_is_refused(get):
    """``trace.args[0][1] = 100`` changed the data of every trace sharing the arguments while
    their cached densities stayed: the next weight was that of other data."""
    trace = _line_trace(torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64))
    get(trace)[0][1] = 100.0
    with pytest.raises(il.TraceChangedError, match=r"argument 0 .*changed in place.*clone\(\)"):
        trace.update({"slope": 0.5})


def test_an_edit_of_a_numpy_argument_a_trace_keeps_is_refused():
    import numpy as np

    trace = _line_trace(np.array([0.5, 1.0, 2.0]))
    trace.args[0][1] = 100.0                          # NumPy: no version counter
    with pytest.raises(il.TraceChangedError, match=r"argument 0 .*changed in place.*copy\(\)"):
        trace.update({"slope": 0.5})


def test_reading_the_arguments_costs_no_error_and_the_weight_stays_exact():
    xs = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    trace = _line_trace(xs)
    mine = trace.args[0].clone()
    mine[1] = 100.0
    new, weight, _ = trace.update({"slope": 0.5})
    exact = (_line.assess(trace.args, new.get_choices()) - _line.assess(trace.args, trace.get_choices()))
    assert weight == pytest.approx(exact, abs=1e-12)


@pytest.mark.parametrize("write", [
    lambda t: t["x"].numpy().__setitem__(0, 5.0),
    lambda t: t["x"].numpy().sort(),
    lambda t: t["mu"].numpy().__setitem__((), 5.0),
    lambda t: t.get_choices()["x"].numpy().__imul__(2.0),
])
def test_a_write_through_a_numpy_view_of_a_handed_out_value_is_refused(write):
    """``.numpy()`` shares the tensor's memory without bumping torch's version counter."""
    trace = _two.generate((torch.tensor([0.5, -0.2, 1.0], dtype=torch.float64),),
                          {"x": torch.tensor([1.0, -0.2, 0.5], dtype=torch.float64), "mu": 0.3})[0]
    write(trace)
    with pytest.raises(il.TraceChangedError, match=r"changed in place"):
        trace.update({"mu": 0.5})


@il.gen
def _family(k, bad):
    ms = [il.normal(0.0, 1.0) @ ("m", j) for j in range(k)]
    if bad == "iadd":
        ms[1] += 1.0
    elif bad == "loop":
        for j, m in enumerate(ms):
            if j == 1:
                m.mul_(2.0)
    elif bad == "slice":
        ms[1:][0].sub_(1.0)
    return il.normal(ms[0], 1.0) @ "y"


@pytest.mark.parametrize("k", [3, 10])
@pytest.mark.parametrize("bad", ["iadd", "loop", "slice"])
@pytest.mark.usefixtures("compact_families_from_8")     # k = 10: a compact family
def test_a_body_that_changes_a_lowered_familys_value_in_place_is_an_error(k, bad):
    assert _family.lowered
    torch.manual_seed(0)
    with pytest.raises(il.TraceChangedError, match=r"\('m', 1\).*in place"):
        _family.simulate(k, bad)
    trace = _family.simulate(k, None)
    with pytest.raises(il.TraceChangedError, match=r"\('m', 1\).*in place"):
        trace.update(None, (k, bad))                  # the kept values of the family


@il.gen
def _inner():
    return il.normal(0.0, 1.0) @ "z"


@il.gen
def _outer(bad):
    r = _inner() @ "s"
    if bad:
        r += 1.0                     # the sub-trace's own value ("s", "z")
    return il.normal(r, 1.0) @ "y"


@il.gen
def _point(x):
    return il.normal(x, 1.0) @ "y"


@il.gen
def _mapped(bad):
    ys = il.Map(_point)(torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)) @ "data"
    if bad:
        ys[2].add_(1.0)
    return ys


def test_the_discard_of_update_detailed_is_protected_like_the_trace():
    trace = _observed()
    result = trace.update_detailed({"mu": 0.9})
    result.discard[("mu",)].add_(1.0)                 # the old value: still ``trace``'s
    with pytest.raises(il.TraceChangedError, match="'mu'"):
        trace.update({})


@il.gen
def _shifts_its_argument(xs):
    xs -= 1.0
    return il.normal(xs.sum(), 1.0) @ "y"


@il.gen
def _calls_a_shifter(xs):
    return _shifts_its_argument(xs) @ "inner"


@pytest.mark.parametrize("model", [_shifts_its_argument, _calls_a_shifter])
def test_a_body_that_changes_its_argument_in_place_is_an_error(model):
    """Before: each update ran the body again on the trace's (already shifted) argument, so
    the argument and the score drifted (-1, -2, -3, ...; score -18.9 where assess gave -5.4)."""
    with pytest.raises(il.TraceChangedError, match=r"argument 'xs' \(argument 0\) in place.*xs = xs.clone\(\)"):
        model.simulate(torch.zeros(3, dtype=torch.float64))
    xs = torch.zeros(3, dtype=torch.float64)
    with pytest.raises(il.TraceChangedError, match=r"argument 'xs'"):
        model.generate((xs,), {})
    assert torch.equal(xs, torch.zeros(3, dtype=torch.float64))      # the user's tensor is untouched


@il.gen
def _short_family(k, bad):
    ms = [il.normal(0.0, 1.0) @ ("m", j) for j in range(k)]
    if bad:
        torch._foreach_mul_(ms[:1] + ms[1:], 2.0)     # C code writing to every element at once
    return il.normal(ms[0], 1.0) @ "y"


@il.gen
def _pair():
    return il.normal(0.0, 1.0) @ "a", il.normal(0.0, 1.0) @ "b"


@il.gen
def _uses_pair(bad):
    a, b = _pair() @ "p"
    if bad:
        b.mul_(2.0)                  # the sub-trace's value ("p", "b"), returned in a tuple
    return il.normal(a, 1.0) @ "y"


@pytest.mark.parametrize("run, where", [
    (lambda: _outer.simulate(True), r"\('s', 'z'\)"),
    (lambda: _outer.simulate(False).update(None, (True,)), r"\('s', 'z'\)"),
    (lambda: _mapped.simulate(True), r"\('data', 2, 'y'\)"),
    (lambda: _mapped.simulate(False).update(None, (True,)), r"\('data', 2, 'y'\)"),
    # a short family's values and a tuple returned by a sub-call are noted as one entry
    # (the tensors and their versions); a change to any of them is found and named
    (lambda: _short_family.simulate(3, True), r"\('m', 0\)"),
    (lambda: _short_family.simulate(3, False).update(None, (3, True)), r"\('m', 0\)"),
    (lambda: _uses_pair.simulate(True), r"\('p', 'b'\)"),
    (lambda: _uses_pair.simulate(False).update(None, (True,)), r"\('p', 'b'\)"),
])
def test_a_body_that_changes_a_value_handed_to_it_in_place_is_an_error(run, where):
    """A sub-call's return value (alone or in a tuple), or a short family's values."""
    torch.manual_seed(0)
    with pytest.raises(il.TraceChangedError, match=where + ".*in place"):
        run()


def test_bodies_that_leave_the_handed_values_alone_run():
    torch.manual_seed(0)
    _short_family.simulate(3, False)
    _uses_pair.simulate(False)
