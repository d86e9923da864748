"""Shared pytest configuration (keep generic: fixtures for many test files go here)."""

import torch

# The engine's tensors are tiny (scalars, short vectors, small matrices): one
# intra-op thread is fastest, and on a busy machine a second OpenMP thread can make
# each LAPACK call (cholesky, solve) take milliseconds instead of microseconds.
torch.set_num_threads(1)
