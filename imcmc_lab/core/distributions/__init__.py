"""Primitive distributions, torch-backed.

Each distribution is a small immutable object built by a constructor such as
``normal(0.0, 1.0)`` and used at an address inside a generative function as
``normal(0.0, 1.0) @ "x"``. It declares

* ``discrete`` -- counting measure (``True``) or Lebesgue measure (``False``);
* ``event_shape`` -- ``()`` for a scalar, ``(d,)`` for a vector value, whose
  ``d`` coordinates each enter a Jacobian;
* ``arg_constraints`` -- what each parameter must be (:mod:`.constraints`).

Values follow :mod:`imcmc_lab.core.values`: float64 tensors for continuous
choices, Python ``int`` (``bool`` for :func:`bernoulli`) for discrete scalars.
A value outside the support has log-density ``-inf`` -- never an exception.
``log_prob`` broadcasts over leading batch dimensions (it reduces only the
event dimension), which is what makes :func:`iid` one vectorised call.
A trace stores log-densities as Python floats (:meth:`Distribution.logpdf`):
for plain scalars and short vectors outside autograd they are computed with
``math``, which costs less than the tensor operations it replaces.

**Parameters.** Invalid parameters are reported by :meth:`Distribution.check_params`
(each parameter against its declared constraint, then the relations between them),
which the engine calls when the distribution is used at an address, so the error
names that address and the line. Constructors never truncate or reject: a scalar
distribution given a vector parameter, a non-integer where an integer is meant
(``uniform_discrete(0.5, 3)``, ``iid(d, 2.5)``) or mixture weights that do not sum
to 1 are reported there, as a :class:`~imcmc_lab.errors.DistributionError`.

**Ends of a support.** An end of an interval belongs to the support when the
density's formula is finite there for every valid parameter, and not otherwise:
``uniform`` includes ``lo`` and ``hi``, ``exponential`` includes 0; ``gamma``,
``inv_gamma`` and ``lognormal`` exclude 0, ``beta`` excludes 0 and 1 and
``dirichlet`` excludes every face of the simplex -- even for parameters where the
formula happens to be finite (``beta(1, 1)`` and ``gamma(1, 2)`` give ``-inf`` at 0).
A boundary point has probability zero, so either choice is the same distribution;
this one is what every sampler keeps: **a sample never has log-density -inf**.
Where float64 cannot resolve a draw from an excluded end (``beta(0.01, 0.01)``
puts a third of its mass within 1e-16 of 1), the sample is the nearest float64
inside the support (the smallest normal float above 0, the largest float below 1).

**A distribution of your own.** Subclass :class:`Distribution`, declare its
constraints and implement ``sample`` and ``log_prob`` (see the class docstring)::

    import math, torch
    from imcmc_lab.core.distributions import Distribution, as_param, constraints, where_support

    class Laplace(Distribution):
        \"\"\"Laplace(loc, scale): density exp(-|x - loc| / scale) / (2 scale) on the reals.\"\"\"

        name = "laplace"
        arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
        __slots__ = ("loc", "scale")

        def __init__(self, loc, scale):
            super().__init__(loc, scale)
            self.loc, self.scale = as_param(loc), as_param(scale)

        def sample(self):                       # () -> a 0-d float64 tensor
            u = torch.rand((), dtype=torch.float64) - 0.5
            return self.loc - self.scale * torch.sign(u) * torch.log1p(-2 * u.abs())

        def log_prob(self, x):                  # batch_shape -> batch_shape
            ok = torch.isfinite(x)
            return where_support(ok, -(x - self.loc).abs() / self.scale
                                     - torch.log(2 * self.scale))

``Laplace(0.0, 1.0) @ "x"`` then works in every generative function (simulate,
generate, update, kernels), and ``Laplace(0.0, -1.0) @ "x"`` raises a
``DistributionError`` naming ``'x'``, its line and ``scale``. ``imcmc_lab.examples.coal``
defines three distributions this way.
"""

from __future__ import annotations

from . import constraints
from .base import Distribution, as_integer_param, as_param, is_integer_valued, simplex_float64, where_support
from .continuous import (Beta, Dirichlet, Exponential, Gamma, InvGamma, LogNormal, MvNormal, Normal, Uniform, beta,
                         dirichlet, exponential, gamma, inv_gamma, lognormal, mvnormal, normal, uniform)
from .discrete import (Bernoulli, Categorical, Geometric, NegBinomial, Poisson, PoissonPlusOne, UniformDiscrete,
                       bernoulli, categorical, geometric, neg_binomial, poisson, poisson_plus_one, uniform_discrete)
from .mixtures import IID, MixtureOfNormals, iid, mixture_of_normals

#: the base class and the constructors (``modeling.families`` treats every constructor
#: listed here, and every Distribution subclass, as pure: same arguments, same distribution)
__all__ = [
    "Distribution", "normal", "gamma", "inv_gamma", "beta", "uniform", "uniform_discrete",
    "bernoulli", "categorical", "poisson", "poisson_plus_one", "geometric", "exponential",
    "lognormal", "dirichlet", "mvnormal", "neg_binomial", "mixture_of_normals", "iid",
]

#: what a custom distribution needs besides :class:`Distribution` (not star-exported)
HELPERS = ["constraints", "as_param", "as_integer_param", "where_support", "is_integer_valued", "simplex_float64"]

#: the classes, for isinstance checks and subclassing
CLASSES = ["Normal", "Gamma", "InvGamma", "Beta", "Uniform", "Exponential", "LogNormal", "Dirichlet", "MvNormal",
           "Bernoulli", "UniformDiscrete", "Categorical", "Poisson", "PoissonPlusOne", "Geometric", "NegBinomial",
           "MixtureOfNormals", "IID"]
