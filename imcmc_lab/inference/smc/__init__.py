"""Sequential Monte Carlo on traces: resampling, particle filters, particle Gibbs and PGAS."""

from .resampling import effective_sample_size, log_sum_exp, resample
from .steps import Steps, extend
from .filter import ParticleFilter, ParticleState, smc
from .conditional import PG, PGAS, conditional_smc
