"""Bad input for the core layer: what the user does, the error they must see."""

from __future__ import annotations

import math

import torch

import imcmc_lab as il
from imcmc_lab.errors import DistributionError

from . import Case


def _at_x(make):
    """Run a model whose one choice is ``make() @ "x"``: the error must name ``'x'`` and a line."""
    def run():
        @il.gen
        def model():
            return make() @ "x"

        return model.simulate()

    return run


def _vec(*values):
    return torch.tensor(values, dtype=torch.float64)


_AT_X = ("address 'x'", "line")


@il.gen
def _one_iid_poisson():
    return il.iid(il.poisson(2.0), 2) @ "xs"

CASES: list[Case] = [
    # issue 16, item 2: mixture weights that do not sum to 1 (the density would integrate to their sum)
    Case("mixture-weights-sum-0.6", _at_x(lambda: il.mixture_of_normals(_vec(0.3, 0.3), _vec(0.0, 1.0), _vec(1.0, 1.0))),
         DistributionError, _AT_X + ("weights", "sum to 1")),
    Case("mixture-weights-sum-2", _at_x(lambda: il.mixture_of_normals([1.0, 1.0], [0.0, 1.0], [1.0, 1.0])),
         DistributionError, _AT_X + ("weights", "sum to 1")),
    # issue 16, item 19: weights [0, 0] raised torch's multinomial error, no address
    Case("mixture-weights-all-zero", _at_x(lambda: il.mixture_of_normals(_vec(0.0, 0.0), _vec(0.0, 1.0), _vec(1.0, 1.0))),
         DistributionError, _AT_X + ("weights", "sum to 1")),
    # issue 16, item 11: non-integers where integers are meant were truncated
    Case("uniform-discrete-non-integer-ends", _at_x(lambda: il.uniform_discrete(0.5, 2.7)),
         DistributionError, _AT_X + ("lo must be an integer", "0.5")),
    Case("uniform-discrete-non-integer-hi", _at_x(lambda: il.uniform_discrete(0, 2.7)),
         DistributionError, _AT_X + ("hi must be an integer", "2.7")),
    Case("iid-non-integer-count", _at_x(lambda: il.iid(il.normal(0.0, 1.0), 2.5)),
         DistributionError, _AT_X + ("n must be an integer", "2.5")),
    Case("iid-negative-count", _at_x(lambda: il.iid(il.normal(0.0, 1.0), -1)),
         DistributionError, _AT_X + ("n must be an integer >= 0",)),
    # issue 16, item 19: uniform_discrete(nan, 1) raised Python's "cannot convert float NaN to integer"
    Case("uniform-discrete-nan", _at_x(lambda: il.uniform_discrete(math.nan, 1)),
         DistributionError, _AT_X + ("lo must be an integer", "nan")),
    # issue 16, items 11 and 19: a scalar distribution given a vector parameter returned a vector
    # value (shape (1,)) or failed inside torch without an address
    Case("normal-shape-1-mean", _at_x(lambda: il.normal(torch.zeros(1, dtype=torch.float64), 1.0)),
         DistributionError, _AT_X + ("mean must be a scalar", "shape (1,)")),
    Case("gamma-vector-shape", _at_x(lambda: il.gamma(torch.ones(3), 1.0)),
         DistributionError, _AT_X + ("shape must be a scalar", "(3,)")),
    Case("bernoulli-vector-p", _at_x(lambda: il.bernoulli(_vec(0.5, 0.5))),
         DistributionError, _AT_X + ("p must be a scalar",)),
    Case("poisson-vector-rate", _at_x(lambda: il.poisson([1.0, 2.0])),
         DistributionError, _AT_X + ("rate must be a scalar",)),
    Case("uniform-vector-ends", _at_x(lambda: il.uniform(torch.zeros(2), torch.ones(2))),
         DistributionError, _AT_X + ("lo must be a scalar",)),
    Case("beta-vector-b", _at_x(lambda: il.beta(1.0, _vec(1.0, 2.0))),
         DistributionError, _AT_X + ("b must be a scalar",)),
    Case("dirichlet-matrix-alpha", _at_x(lambda: il.dirichlet(torch.ones(2, 2))),
         DistributionError, _AT_X + ("alpha must be a non-empty vector", "(2, 2)")),
    Case("categorical-scalar-probs", _at_x(lambda: il.categorical(1.0)),
         DistributionError, _AT_X + ("probs must be a non-empty vector",)),
    Case("mvnormal-non-square-cov", _at_x(lambda: il.mvnormal(torch.zeros(2), torch.ones(2, 3))),
         DistributionError, _AT_X + ("cov must be a square matrix",)),
    # a non-integer constraint for discrete iid values was truncated silently ([1.5, 2] became [1, 2])
    Case("iid-discrete-non-integer-constraint",
         lambda: _one_iid_poisson.generate((), {"xs": [1.5, 2.0]}),
         DistributionError, ("address 'xs'", "discrete", "integers", "1.5")),
]
