"""Nonparametric HMC (NP-HMC, NP-DHMC; persistent and look-ahead) on ``@gen`` programs.

Thesis: "Nonparametric Involutive Markov Chain Monte Carlo" (Carol Mak), Ch. 7, and
"Nonparametric Hamiltonian Monte Carlo" (Mak, Zaiser, Ong), with the extension rule of
:mod:`.coordinates` (replayed from time 0), which keeps every move an exact involution.
"""

from .check import NPCheckReport, check_nphmc
from .kernel import NPHMC, NPRecord, nphmc

__all__ = ["NPHMC", "NPRecord", "nphmc", "check_nphmc", "NPCheckReport"]
