"""Running chains: progress, several chains, interrupt safety, ArviZ conversion.

``run_chain(kernel, trace, steps, record=...)`` applies a kernel ``steps``
times and records chosen quantities after each step. Ctrl-C (KeyboardInterrupt)
stops the run and keeps every sample collected so far (``chain.interrupted``
says so). ``chain.to_arviz()`` gives an ``arviz.InferenceData``; quantities
whose shape varies (trans-dimensional models) are NaN-padded to the largest
shape seen, as ArviZ users expect, next to a model indicator you record.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from ..core.address import normalize_address
from .kernels import as_kernel

__all__ = ["Chain", "run_chain", "recorder"]


def _to_numpy(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
        return np.array([float(v) for v in value])
    return np.asarray(value, dtype=float) if not isinstance(value, np.ndarray) else value


def recorder(record):
    """Normalize ``record`` to a function ``trace -> {name: value}``.

    ``record`` may be such a function, a list of addresses (each recorded under
    its spelling, NaN when the trace lacks it), a dict ``{name: address or
    function}``, or None (record the score only).
    """
    if record is None:
        return lambda trace: {}
    if callable(record):
        return record
    if isinstance(record, dict):
        items = list(record.items())
    else:
        items = [(_name(a), a) for a in record]

    def read_all(trace):
        out = {}
        for name, what in items:
            if callable(what):
                out[name] = what(trace)
            else:
                address = normalize_address(what)
                out[name] = trace[address] if address in trace else math.nan
        return out

    return read_all


def _name(address):
    address = normalize_address(address)
    return "_".join(str(k) for k in address) if len(address) > 1 else str(address[0])


class Chain:
    """Samples of one or more chains.

    ``samples[c]`` is a list of dicts (one per kept step) for chain ``c``;
    ``scores[c]`` the log joint after each kept step; ``traces[c]`` the last
    trace; ``acceptance`` per basic kernel ``{name: (accepted, proposed)}``.
    """

    def __init__(self, n_chains=1):
        self.samples = [[] for _ in range(n_chains)]
        self.scores = [[] for _ in range(n_chains)]
        self.traces = [None] * n_chains
        self.acceptance = {}
        self.interrupted = False
        self.steps_done = [0] * n_chains

    @property
    def n_chains(self):
        return len(self.samples)

    @property
    def trace(self):
        """The last trace of the first chain (to continue from)."""
        return self.traces[0]

    def __len__(self):
        return min(len(s) for s in self.samples) if self.samples else 0

    def values(self, name, chain=None):
        """A list of the recorded values of ``name`` (all chains concatenated by default)."""
        chains = range(self.n_chains) if chain is None else [chain]
        return [s[name] for c in chains for s in self.samples[c]]

    def acceptance_rates(self) -> dict:
        return {k: (a / p if p else math.nan) for k, (a, p) in self.acceptance.items()}

    def to_arviz(self):
        """An ``arviz.InferenceData`` with a posterior group (chain, draw, *shape); ragged
        quantities are NaN-padded, and the log joint is in ``sample_stats.lp``."""
        import arviz as az

        n_draws = len(self)
        names = []
        for c in range(self.n_chains):
            for s in self.samples[c][:n_draws]:
                for k in s:
                    if k not in names:
                        names.append(k)
        posterior = {}
        for name in names:
            arrays = [[_to_numpy(s.get(name, math.nan)) for s in self.samples[c][:n_draws]]
                      for c in range(self.n_chains)]
            flat = [np.asarray(a, dtype=float) for chain_arrays in arrays for a in chain_arrays]
            ndim = max(a.ndim for a in flat)
            shape = tuple(max(a.shape[i] for a in flat if a.ndim == ndim) for i in range(ndim))
            out = np.full((self.n_chains, n_draws) + shape, np.nan)
            for c, chain_arrays in enumerate(arrays):
                for d, a in enumerate(chain_arrays):
                    a = np.asarray(a, dtype=float)
                    if a.ndim == ndim:  # a missing value (NaN scalar) stays NaN-padded
                        out[(c, d) + tuple(slice(0, n) for n in a.shape)] = a
            posterior[name] = out
        lp = np.array([self.scores[c][:n_draws] for c in range(self.n_chains)], dtype=float)
        return az.from_dict(posterior=posterior, sample_stats={"lp": lp})

    def __repr__(self):
        rates = ", ".join(f"{k}: {v:.2f}" for k, v in self.acceptance_rates().items())
        flag = " (interrupted)" if self.interrupted else ""
        return f"<Chain: {self.n_chains} chain(s) x {len(self)} samples{flag}; acceptance {rates}>"


def _progress_bar(total, name):
    """tqdm's bar, its description at most 32 characters (a widget cuts longer ones). In a
    notebook tqdm's bar is a widget whose saved text reads "0/5000" (its state when first
    shown): it is shown with a display id, which ``run_chain`` updates when it closes."""
    from tqdm.auto import tqdm
    from tqdm.notebook import tqdm_notebook

    desc = name if len(name) <= 32 else name[:31] + "…"
    if not issubclass(tqdm, tqdm_notebook):
        return tqdm(total=total, desc=desc, leave=True)
    from IPython.display import display

    bar = tqdm(total=total, desc=desc, leave=True, display=False)
    bar.saved_display = display(bar.container, display_id=True)
    return bar


def run_chain(kernel, trace, steps: int, record=None, chains=None, thin: int = 1,
              progress: bool = True, callback=None, chain=None) -> Chain:
    """Run ``kernel`` for ``steps`` steps from ``trace`` (or from each trace in a list).

    ``record``: what to record after each kept step (see :func:`recorder`).
    ``chains``: run this many chains, each from ``trace`` (or pass a list of
    initial traces as ``trace``). ``thin``: keep every ``thin``-th step.
    ``callback(chain_index, step, trace)`` is called after each step (live views
    use it). A KeyboardInterrupt stops the run and returns what was collected.
    ``chain``: an existing :class:`Chain` to extend (continuing a run from its last
    traces, ``chain.traces``); its kernel statistics keep accumulating.
    """
    kernel = as_kernel(kernel)
    if chain is not None:
        starts = list(chain.traces)
    else:
        starts = list(trace) if isinstance(trace, (list, tuple)) else [trace] * (chains or 1)
        chain = Chain(len(starts))
        kernel.reset_stats()
    read = recorder(record)
    bar = None
    if progress:
        bar = _progress_bar(steps * len(starts), kernel.name)
    try:
        for c, state in enumerate(starts):
            chain.traces[c] = state
            done_before = chain.steps_done[c]
            for step in range(1, steps + 1):
                state, _ = kernel(state)
                chain.traces[c] = state
                chain.steps_done[c] = done_before + step
                if step % thin == 0:
                    chain.samples[c].append(read(state))
                    chain.scores[c].append(state.score)
                if callback is not None:
                    callback(c, step, state)
                if bar is not None:
                    bar.update(1)
                    if step % 50 == 0:
                        acc = kernel.acceptance()
                        bar.set_postfix({k[:18]: f"{a / p:.2f}" for k, (a, p) in acc.items() if p}, refresh=False)
    except KeyboardInterrupt:
        chain.interrupted = True
        warnings.warn(f"run_chain interrupted: keeping {sum(map(len, chain.samples))} samples collected so far",
                      stacklevel=2)
    finally:
        if bar is not None:
            bar.close()
            if getattr(bar, "saved_display", None) is not None:   # the final state, for the saved notebook
                bar.saved_display.update(bar.container)
        chain.acceptance = kernel.acceptance()
    return chain
