"""Shared pytest configuration (keep generic: fixtures for many test files go here)."""

import pytest

import torch

# The engine's tensors are tiny (scalars, short vectors, small matrices): one
# intra-op thread is fastest, and on a busy machine a second OpenMP thread can make
# each LAPACK call (cholesky, solve) take milliseconds instead of microseconds.
torch.set_num_threads(1)


@pytest.fixture
def compact_families_from_8(monkeypatch):
    """Hold lowered families compact from 8 elements on (the default threshold is 64, for
    speed), so that tests of the compact representation stay small and fast."""
    from imcmc_lab.modeling import family_update
    monkeypatch.setattr(family_update, "COMPACT_FAMILY", 8)
