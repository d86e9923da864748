"""imcmc-lab: automated involutive MCMC you can write, check, see and teach.

The engine is importable without IPython or widgets; ``%load_ext imcmc_lab``
registers the notebook magics (``%%gen``, ``%%transform``).
"""

from .core.address import format_address, normalize_address
from .core.choicemap import ChoiceMap, Selection, as_choicemap, choicemap, select, select_all
from .core.distributions import (Distribution, bernoulli, beta, categorical, dirichlet,
                                 exponential, gamma, geometric, iid, inv_gamma, lognormal,
                                 mixture_of_normals, mvnormal, neg_binomial, normal, poisson,
                                 poisson_plus_one, uniform, uniform_discrete)
from .errors import (AddressError, ConstraintError, DimensionError, DistributionError,
                     DuplicateAddressError, ImcmcError, InvolutionCheckError, LabelError,
                     TraceChangedError, TransformError)
from .modeling import (GenerativeFunction, Map, Trace, Unfold, count_work, gen)
from .transform import (Transform, apply_transform, check_involution, continuous, copy, discrete, exists,
                        involution_from_bijections, pair_bijections, read, tcall, transform, write)
from .inference import (HMC, MH, Chain, InvolutiveKernel, Kernel, MoveRecord, cycle, hmc,
                        involutive_mcmc, involutive_move, mh, mixture, repeat, run_chain)
from .inference.distributed import ChainsFailed, run_chains
from .inference.nphmc import NPHMC, check_nphmc, nphmc
from .inference.smc import PG, PGAS, ParticleFilter, ParticleState, Steps, resample, smc
from .inference.stationarity import StationarityResult, check_stationarity
from .inference.rj_proposal import ProposalError, RJProposalKernel, rj_proposal
from .modeling.runtime import differentiable_score
from .modeling.families import choice_family as _choice_family   # called by compiled %%gen cells

__version__ = "0.1.0"


def __getattr__(name):
    # ``il.widgets`` imports the views (and ipywidgets) on first use, never with the engine.
    if name == "widgets":
        import importlib

        return importlib.import_module("imcmc_lab.widgets")
    raise AttributeError(f"module 'imcmc_lab' has no attribute {name!r}")


def load_ipython_extension(ipython):
    """``%load_ext imcmc_lab``: register the ``%%gen`` and ``%%transform`` magics."""
    import sys

    from imcmc_lab.magics import load_ipython_extension as _load

    _load(ipython, engine=sys.modules[__name__])   # the magics get the engine; they never import it


def unload_ipython_extension(ipython):
    """``%unload_ext imcmc_lab``: remove the magics and the names they injected."""
    from imcmc_lab.magics import unload_ipython_extension as _unload

    _unload(ipython)
