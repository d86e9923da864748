"""Each error class of the transform language (DESIGN.md, "Errors, not silent wrong
answers") raises, and its message names the addresses involved.

Every broken transform below is a one-line variation of ``split_merge``, which
is checked to work on the same traces, so each test fails if the error is not
raised, is raised for another reason, or does not name the addresses.
"""

from __future__ import annotations

import pytest
import torch

import imcmc_lab as il
from imcmc_lab import continuous, copy, discrete, read, write


@il.gen
def model():
    k = il.uniform_discrete(1, 2) @ "k"
    for j in range(1, k + 1):
        il.normal(0.0, 10.0) @ ("mu", j)
    il.gamma(2.0, 1.0) @ "scale"


@il.gen
def aux(trace):
    if trace["k"] == 1:
        il.normal(0.0, 2.0) @ "u"


@il.gen
def aux_uv(trace):
    if trace["k"] == 1:
        il.normal(0.0, 2.0) @ "u"
        il.normal(0.0, 2.0) @ "v"


def make(split=None, merge=None):
    """The paper's split/merge (Sec. 4.2) with the split or merge branch replaced."""

    def good_split(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 2, discrete)
        mu = read(model_in["mu", 1], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["mu", 1], mu - u, continuous)
        write(model_out["mu", 2], mu + u, continuous)

    def good_merge(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 1, discrete)
        mu1 = read(model_in["mu", 1], continuous)
        mu2 = read(model_in["mu", 2], continuous)
        write(model_out["mu", 1], (mu1 + mu2) / 2, continuous)
        write(aux_out["u"], (mu2 - mu1) / 2, continuous)

    split, merge = split or good_split, merge or good_merge

    @il.transform
    def split_merge(model_in, aux_in, model_out, aux_out):
        k = read(model_in["k"], discrete)
        (split if k == 1 else merge)(model_in, aux_in, model_out, aux_out)

    return split_merge


def traces(k, q=aux, seed=0):
    torch.manual_seed(seed)
    x, _ = model.generate((), {"k": k})
    return x, q.simulate(x)


def raises(exc_type, f, k, *fragments, q=aux):
    x, y = traces(k, q)
    with pytest.raises(exc_type) as info:
        il.apply_transform(f, x, y, q)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in: {message}"
    return message


def test_reference_transform_works_both_ways():
    f = make()
    for k in (1, 2):
        x, y = traces(k)
        app = il.apply_transform(f, x, y, aux)
        assert app.problem is None and app.new_model["k"] == 3 - k
    il.check_involution(model, (), aux, f, trials=20, seed=0)


# ---------------------------------------------------------------------------
# labels
# ---------------------------------------------------------------------------
def test_continuous_choice_read_as_discrete():
    def merge(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 1, discrete)
        mu1 = read(model_in["mu", 1], continuous)
        mu2 = read(model_in["mu", 2], discrete)        # wrong label
        write(model_out["mu", 1], (mu1 + mu2) / 2, continuous)
        write(aux_out["u"], (mu2 - mu1) / 2, continuous)

    msg = raises(il.LabelError, make(merge=merge), 2, "model_in[('mu', 2)]", "read as discrete",
                 "is continuous", "il.continuous")
    assert "derivative would be lost" in msg


def test_discrete_choice_read_as_continuous():
    @il.transform
    def f(model_in, aux_in, model_out, aux_out):
        k = read(model_in["k"], continuous)            # wrong label
        write(model_out["k"], k, discrete)

    raises(il.LabelError, f, 1, "model_in['k']", "read as continuous", "is discrete", "il.discrete")


def test_same_address_read_with_two_labels():
    @il.transform
    def f(model_in, aux_in, model_out, aux_out):
        read(model_in["mu", 1], continuous)
        read(model_in["mu", 1], discrete)

    raises(il.LabelError, f, 1, "model_in[('mu', 1)]", "read as discrete", "read as continuous before")


def test_namespace_read_as_continuous():
    @il.transform
    def f(model_in, aux_in, model_out, aux_out):
        read(model_in["mu"], continuous)

    raises(il.LabelError, f, 2, "model_in['mu']", "not a single random choice")


def test_continuous_choice_written_as_discrete():
    def split(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 2, discrete)
        mu = read(model_in["mu", 1], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["mu", 1], mu - u, continuous)
        write(model_out["mu", 2], mu + u, discrete)     # wrong label

    raises(il.LabelError, make(split=split), 1, "model_out[('mu', 2)]", "written as discrete",
           "is continuous", "il.continuous")


def test_discrete_choice_written_as_continuous():
    def split(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 2, continuous)              # wrong label
        mu = read(model_in["mu", 1], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["mu", 1], mu - u, continuous)
        write(model_out["mu", 2], mu + u, continuous)

    raises(il.LabelError, make(split=split), 1, "model_out['k']", "written as continuous", "is discrete")


def test_auxiliary_choice_written_with_wrong_label():
    def merge(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 1, discrete)
        mu1 = read(model_in["mu", 1], continuous)
        mu2 = read(model_in["mu", 2], continuous)
        write(model_out["mu", 1], (mu1 + mu2) / 2, continuous)
        write(aux_out["u"], (mu2 - mu1) / 2, discrete)     # wrong label

    raises(il.LabelError, make(merge=merge), 2, "aux_out['u']", "written as discrete")


# ---------------------------------------------------------------------------
# reads from inputs only, writes to outputs only, once each
# ---------------------------------------------------------------------------
def test_write_to_an_input_trace():
    # Fig. 1 of the paper has this typo: @write(aux_in[:split], true, :discrete)
    def merge(model_in, aux_in, model_out, aux_out):
        write(aux_in["u"], 0.0, continuous)

    raises(il.TransformError, make(merge=merge), 2, "write to aux_in['u']", "aux_in is an input trace",
           "aux_out[...]")

    def merge2(model_in, aux_in, model_out, aux_out):
        write(model_in["k"], 1, discrete)

    raises(il.TransformError, make(merge=merge2), 2, "write to model_in['k']", "model_out[...]")


def test_copy_to_an_input_trace():
    def split(model_in, aux_in, model_out, aux_out):
        copy(aux_in["u"], model_in["mu", 2])

    raises(il.TransformError, make(split=split), 1, "copy to model_in[('mu', 2)]", "input trace")


def test_read_of_an_output_trace():
    def split(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 2, discrete)
        read(model_out["k"], discrete)

    raises(il.TransformError, make(split=split), 1, "read of model_out['k']", "output trace",
           "model_in[...]")


def test_two_writes_to_one_address():
    def split(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 2, discrete)
        mu = read(model_in["mu", 1], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["mu", 1], mu - u, continuous)
        write(model_out["mu", 1], mu + u, continuous)   # should be ("mu", 2)

    msg = raises(il.TransformError, make(split=split), 1, "model_out[('mu', 1)] is written twice")
    assert msg.count("line ") == 2   # both places


def test_two_writes_name_their_exact_lines():
    # lines are resolved from call sites only when a message is made (core.effects.resolve_line)
    def split(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 2, discrete)
        mu = read(model_in["mu", 1], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["mu", 1], mu - u, continuous)
        write(model_out["mu", 1],
              mu + u, continuous)

    first = split.__code__.co_firstlineno + 4
    msg = raises(il.TransformError, make(split=split), 1, "model_out[('mu', 1)] is written twice")
    assert f'at line {first}: write(model_out["mu", 1], mu - u, continuous) and again at line {first + 1}: ' \
           f'write(model_out["mu", 1],' in msg, msg


def test_copy_then_write_to_one_address():
    def split(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 2, discrete)
        copy(model_in["mu", 1], model_out["mu", 2])
        u = read(aux_in["u"], continuous)
        write(model_out["mu", 2], u, continuous)

    raises(il.TransformError, make(split=split), 1, "model_out[('mu', 2)] is written twice")


def test_write_then_copy_to_one_address():
    def split(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 2, discrete)
        u = read(aux_in["u"], continuous)
        write(model_out["mu", 2], u, continuous)
        copy(model_in["mu", 1], model_out["mu", 2])

    raises(il.TransformError, make(split=split), 1, "model_out[('mu', 2)] is written twice",
           "copy(model_in[\"mu\", 1]")


def test_namespace_copy_onto_a_written_leaf():
    def merge(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 1, discrete)
        mu1 = read(model_in["mu", 1], continuous)
        write(model_out["mu", 1], mu1, continuous)
        copy(model_in["mu"], model_out["mu"])

    raises(il.TransformError, make(merge=merge), 2, "model_out[('mu', 1)] is written twice")


def test_one_value_copied_to_two_outputs():
    # ("mu", 1) is kept by the model (implicit copy) and copied to ("mu", 2) as well
    def split(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 2, discrete)
        copy(model_in["mu", 1], model_out["mu", 2])
        read(aux_in["u"], continuous)

    raises(il.TransformError, make(split=split), 1, "model_in[('mu', 1)] reaches two outputs",
           "model_out[('mu', 1)]", "model_out[('mu', 2)]")


# ---------------------------------------------------------------------------
# addresses that do not exist
# ---------------------------------------------------------------------------
def test_read_of_a_missing_address_suggests_the_nearest():
    @il.transform
    def f(model_in, aux_in, model_out, aux_out):
        read(model_in["scael"], continuous)

    raises(il.AddressError, f, 1, "model_in trace has no address 'scael'", "Did you mean 'scale'?")


def test_read_of_a_missing_index_suggests_siblings():
    def split(model_in, aux_in, model_out, aux_out):
        read(model_in["mu", 2], continuous)          # k == 1: only ("mu", 1) exists

    raises(il.AddressError, make(split=split), 1, "no address ('mu', 2)", "Did you mean ('mu', 1)?")


def test_misspelled_auxiliary_read():
    def split(model_in, aux_in, model_out, aux_out):
        read(aux_in["uu"], continuous)

    raises(il.AddressError, make(split=split), 1, "aux_in trace has no address 'uu'", "Did you mean 'u'?")


def test_copy_from_a_missing_namespace():
    @il.transform
    def f(model_in, aux_in, model_out, aux_out):
        copy(model_in["mus"], aux_out["mu"])

    raises(il.AddressError, f, 2, "copy from model_in['mus']", "no address or namespace 'mus'",
           "Did you mean")


def test_misspelled_model_write():
    def split(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 2, discrete)
        mu = read(model_in["mu", 1], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["mu", 1], mu - u, continuous)
        write(model_out["mu", 2], mu + u, continuous)
        write(model_out["scael"], 1.0, continuous)

    raises(il.TransformError, make(split=split), 1, "writes model_out['scael']",
           "does not have that address", "Did you mean 'scale'?")


def test_misspelled_auxiliary_write():
    def merge(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 1, discrete)
        mu1 = read(model_in["mu", 1], continuous)
        mu2 = read(model_in["mu", 2], continuous)
        write(model_out["mu", 1], (mu1 + mu2) / 2, continuous)
        write(aux_out["uu"], (mu2 - mu1) / 2, continuous)

    raises(il.TransformError, make(merge=merge), 2, "aux_out['uu']", "not an address that aux visits",
           "Did you mean 'u'?")


# ---------------------------------------------------------------------------
# the new traces must be fully determined by the transform
# ---------------------------------------------------------------------------
def test_new_model_address_not_provided():
    def split(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 2, discrete)
        mu = read(model_in["mu", 1], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["mu", 1], mu - u, continuous)      # forgot ("mu", 2)

    raises(il.TransformError, make(split=split), 1, "new model trace needs ('mu', 2)",
           "did not provide", "silently sample")


def test_new_auxiliary_choice_not_provided():
    def merge(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 1, discrete)
        mu1 = read(model_in["mu", 1], continuous)
        mu2 = read(model_in["mu", 2], continuous)
        write(model_out["mu", 1], (mu1 + mu2) / 2, continuous)   # forgot aux_out["u"]

    raises(il.TransformError, make(merge=merge), 2, "needs 'u'", "aux_out")


def test_continuous_model_address_disappears_unread():
    def merge(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 1, discrete)
        mu1 = read(model_in["mu", 1], continuous)            # ("mu", 2) never read
        write(model_out["mu", 1], mu1, continuous)
        write(aux_out["u"], mu1 / 2, continuous)

    raises(il.TransformError, make(merge=merge), 2, "continuous model address ('mu', 2) disappears",
           "without having been read or copied")


def test_overwritten_model_address_never_read():
    def split(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 2, discrete)
        mu = read(model_in["mu", 1], continuous)
        u = read(aux_in["u"], continuous)
        write(model_out["mu", 1], mu - u, continuous)
        write(model_out["mu", 2], mu + u, continuous)
        write(model_out["scale"], 1.0, continuous)            # old scale is lost

    raises(il.TransformError, make(split=split), 1, "model address 'scale' is overwritten",
           "without its old value having been read or copied")


def test_auxiliary_choice_never_read():
    def split(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 2, discrete)
        mu = read(model_in["mu", 1], continuous)              # aux_in["u"] unused
        write(model_out["mu", 1], mu - 1.0, continuous)
        write(model_out["mu", 2], mu + 1.0, continuous)

    raises(il.TransformError, make(split=split), 1, "auxiliary choice 'u'", "neither read nor copied")


# ---------------------------------------------------------------------------
# dimension
# ---------------------------------------------------------------------------
def test_dimension_mismatch_lists_both_sides():
    def split(model_in, aux_in, model_out, aux_out):
        write(model_out["k"], 2, discrete)
        mu = read(model_in["mu", 1], continuous)
        u = read(aux_in["u"], continuous)
        v = read(aux_in["v"], continuous)                      # 3 in, 2 out
        write(model_out["mu", 1], mu - u * v, continuous)
        write(model_out["mu", 2], mu + u, continuous)

    raises(il.DimensionError, make(split=split), 1, "maps 3 continuous input coordinate(s) to 2",
           "Inputs read: model_in[('mu', 1)], aux_in['u'], aux_in['v']",
           "Outputs written: model_out[('mu', 1)], model_out[('mu', 2)]", q=aux_uv)
    # without the dimension check the application records the problem instead
    x, y = traces(1, aux_uv)
    app = il.apply_transform(make(split=split), x, y, aux_uv, check_dimension=False)
    assert app.problem.startswith("dimension") and "aux_in['v']" in app.problem


def test_dimension_mismatch_counts_vector_coordinates():
    @il.gen
    def weighted():
        k = il.uniform_discrete(2, 3) @ "k"
        il.dirichlet(torch.full((k,), 1.0)) @ "w"

    @il.transform
    def drop_last(model_in, aux_in, model_out, aux_out):
        # k = 3 -> 2 without an auxiliary choice to absorb the lost weight coordinate
        # (a dirichlet value has k - 1 free coordinates: 2 in, 1 out)
        write(model_out["k"], 2, discrete)
        w = read(model_in["w"], continuous)
        write(model_out["w"], w[:2] / w[:2].sum(), continuous)

    torch.manual_seed(0)
    x, _ = weighted.generate((), {"k": 3})
    with pytest.raises(il.DimensionError) as info:
        il.apply_transform(drop_last, x)
    msg = str(info.value)
    assert "maps 2 continuous input coordinate(s) to 1" in msg
    assert "Inputs read: model_in['w'][0], model_in['w'][1]." in msg
    assert "Outputs written: model_out['w'][0]." in msg


# ---------------------------------------------------------------------------
# a kept value whose distribution changes kind
# ---------------------------------------------------------------------------
def _kind_switching_model(n_extra):
    """``z`` is a count when ``k`` and a real number otherwise; ``n_extra`` untouched
    choices (above 40 addresses _account visits only the touched ones)."""
    @il.gen
    def kind_switch():
        k = il.bernoulli(0.5) @ "k"
        if k:
            il.poisson(3.0) @ "z"
        else:
            il.normal(0.0, 1.0) @ "z"
        for i in range(n_extra):
            il.normal(0.0, 1.0) @ ("e", i)
    return kind_switch


@il.transform
def flip_k_only(model_in, aux_in, model_out, aux_out):
    write(model_out["k"], not read(model_in["k"], discrete), discrete)


@pytest.mark.parametrize("n_extra", [0, 45])
@pytest.mark.parametrize("k, z, old, new", [(False, 2.0, "continuous", "discrete"),
                                            (True, 2, "discrete", "continuous")])
def test_a_kept_value_whose_distribution_changes_kind_must_be_written(n_extra, k, z, old, new):
    """Kept, one value would count once under a density and once as a probability mass:
    before, the continuous -> discrete case was accepted silently above 40 addresses and
    the discrete -> continuous case crashed with an AttributeError."""
    trace, _ = _kind_switching_model(n_extra).generate((), {"k": k, "z": z})
    with pytest.raises(il.errors.TransformError) as info:
        il.involutive_mcmc(trace, None, (), flip_k_only)
    message = str(info.value)
    assert f"model address 'z' is {old}" in message and f"and {new}" in message
    assert "neither writes nor copies model_out['z']" in message and "flip_k_only" in message


def test_update_scores_a_kept_value_as_the_new_kind():
    """trace.update keeps the value (Gen's semantics) and scores it as a value of the new kind."""
    model = _kind_switching_model(0)
    count, _ = model.generate((), {"k": True, "z": 2})
    real, weight, _ = count.update({"k": False})
    assert isinstance(real["z"], torch.Tensor) and real["z"].dtype == torch.float64 and float(real["z"]) == 2.0
    normal = torch.distributions.Normal(0.0, 1.0).log_prob(torch.tensor(2.0, dtype=torch.float64))
    poisson = torch.distributions.Poisson(3.0).log_prob(torch.tensor(2.0, dtype=torch.float64))
    assert weight == pytest.approx(float(normal - poisson), rel=1e-12)    # bernoulli(0.5) terms cancel
    back, weight_back, _ = real.update({"k": True})
    assert back["z"] == 2 and weight_back == pytest.approx(-weight, rel=1e-12)
    off, _ = model.generate((), {"k": False, "z": 2.5})
    assert off.update({"k": True})[1] == float("-inf")      # 2.5 is no count
