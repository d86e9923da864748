"""Inference layer: involutive MCMC, MH, HMC, kernel combinators, chains."""

from .involutive import InvolutiveKernel, MoveRecord, involutive_mcmc, involutive_move
from .chains import Chain, recorder, run_chain
from .hmc import HMC, hmc
from .kernels import Kernel, as_kernel, cycle, mixture, repeat
from .mh import MH, mh
from .nphmc import NPHMC, NPRecord, check_nphmc, nphmc
from .smc import PG, PGAS, ParticleFilter, ParticleState, Steps, resample, smc
from .stationarity import StationarityResult, check_stationarity
