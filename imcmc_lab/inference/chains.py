"""Running chains: progress, several chains, nothing lost, ArviZ conversion.

``run_chain(kernel, trace, steps, record=...)`` applies a kernel ``steps``
times and records chosen quantities after each kept step. Nothing a user
computed is lost:

* Ctrl-C (KeyboardInterrupt) stops the run and returns every sample collected
  so far (``chain.interrupted`` says so);
* any other exception is re-raised with the partial :class:`Chain` attached as
  ``err.chain`` (and a note saying so);
* ``chain.to_arviz()`` converts what every chain finished: chains of different
  lengths (an interrupted run) are truncated to the shortest non-empty one, with
  a warning, while ``chain.samples`` keeps everything.

Quantities whose shape varies (trans-dimensional models) are NaN-padded to the
largest shape seen, as ArviZ users expect, next to a model indicator you record.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import socket
import time
import warnings
from typing import NamedTuple

import numpy as np
import torch

from ..core.address import did_you_mean, format_address, normalize_address
from ..core.choicemap import ChoiceMap
from ..errors import AddressError
from ..modeling.runtime import owned
from ..modeling.trace import Trace
from .kernels import as_kernel

__all__ = ["Chain", "ChainTiming", "run_chain", "recorder", "Recorder"]


def _to_numpy(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
        return np.array([float(v) for v in value])
    return np.asarray(value, dtype=float) if not isinstance(value, np.ndarray) else value


class Recorder:
    """``trace -> {name: value}`` for a ``record`` argument (see :func:`recorder`).

    Remembers which address entries it has found in a trace, so a run can tell an
    address that is in no sample (a typo: an error) from one that is missing in
    some states of a trans-dimensional model (NaN there, as ArviZ expects).
    """

    def __init__(self, record):
        if record is None:
            items = []
        elif callable(record):
            items = None
            self._function = record
        elif isinstance(record, dict):
            items = list(record.items())
        else:
            items = [(_name(a), a) for a in record]
        self.items = None if items is None else [
            (name, what if callable(what) else normalize_address(what)) for name, what in items]
        self.found = set()

    def __call__(self, trace) -> dict:
        """What to record of ``trace``: copies (a sample's tensors are its own, so changing
        one in place changes no other sample and no trace)."""
        if self.items is None:
            return {name: _own(value) for name, value in self._function(trace).items()}
        out = {}
        for name, what in self.items:
            if callable(what):
                out[name] = _own(what(trace))
                continue
            record = trace.choice_record(what)      # a choice: copied, so not lent (see Trace)
            if record is not None:
                out[name] = _own(record.value)
            elif what in trace:
                out[name] = _own(trace[what])
            else:
                out[name] = math.nan
                continue
            self.found.add(name)
        return out

    def never_found(self) -> list:
        """``(name, address)`` of the address entries found in no trace so far."""
        return [(n, a) for n, a in self.items or () if not callable(a) and n not in self.found]


def _own(value):
    if type(value) is torch.Tensor:
        return value.clone()
    if isinstance(value, ChoiceMap):
        return ChoiceMap._from_flat({address: owned(v) for address, v in value.items()})
    return owned(value)


def recorder(record) -> Recorder:
    """Normalize ``record`` to a function ``trace -> {name: value}``.

    ``record`` may be such a function, a list of addresses (each recorded under
    its spelling, NaN when the trace lacks it), a dict ``{name: address or
    function}``, or None (record the score only).
    """
    return Recorder(record)


def _name(address):
    address = normalize_address(address)
    return "_".join(str(k) for k in address) if len(address) > 1 else str(address[0])


class ChainTiming(NamedTuple):
    """What one chain's last run cost: ``wall`` seconds, ``cpu`` seconds of the whole process
    that ran it (``time.process_time``; on a Dask worker this includes the worker's own
    threads while the chain ran), ``thread_cpu`` seconds of the thread that ran it, and the
    ``process`` (``host:pid``). CPU time does not grow when other programs load the
    machine, so it compares where chains ran better than wall time does."""

    wall: float
    cpu: float
    thread_cpu: float
    process: str

    @staticmethod
    def clock() -> tuple:
        return time.perf_counter(), time.process_time(), time.thread_time()

    @classmethod
    def since(cls, clock) -> "ChainTiming":
        """The cost from ``clock`` (a :meth:`clock` reading) until now."""
        spent = (now - then for then, now in zip(clock, cls.clock()))
        return cls(*spent, f"{socket.gethostname()}:{os.getpid()}")


class Chain:
    """Samples of one or more chains.

    ``samples[c]`` is a list of dicts (one per kept step) for chain ``c``;
    ``scores[c]`` the log joint after each kept step; ``traces[c]`` the last
    trace; ``steps_done[c]`` the steps chain ``c`` made; ``acceptance`` per basic
    kernel ``{name: (accepted, proposed)}``; ``interrupted`` whether a run ended
    early (Ctrl-C, a stop, or an error); ``finished[c]`` whether chain ``c`` ran all
    the steps of its last run; ``errors`` ``{chain index: traceback text}`` of chains
    that raised (``run_chains``); ``seed`` the seed the chains were run with (None
    when the caller seeded torch); ``timings[c]`` a :class:`ChainTiming` of chain
    ``c``'s last run (None if it did not run). ``len(chain)`` is the length of the shortest chain.
    """

    def __init__(self, n_chains=1):
        self.samples = [[] for _ in range(n_chains)]
        self.scores = [[] for _ in range(n_chains)]
        self.traces = [None] * n_chains
        self.acceptance = {}
        self.interrupted = False
        self.steps_done = [0] * n_chains
        self.finished = [False] * n_chains
        self.errors = {}
        self.seed = None
        self.timings = [None] * n_chains

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
        try:
            return [s[name] for c in chains for s in self.samples[c]]
        except KeyError:
            names = list(dict.fromkeys(k for samples in self.samples for s in samples[:1] for k in s))
            raise AddressError(
                f"chain.values({name!r}): nothing was recorded under that name; the recorded names are "
                f"{', '.join(map(repr, names)) or '(none)'}.{did_you_mean(name, names)} Record it with "
                f"run_chain(..., record={{'name': address}}).") from None

    def acceptance_rates(self) -> dict:
        return {k: (a / p if p else math.nan) for k, (a, p) in self.acceptance.items()}

    def _arviz_chains(self):
        """The chains to convert and their common length; warns about what is left out."""
        lengths = [len(s) for s in self.samples]
        kept = [c for c, n in enumerate(lengths) if n > 0] or list(range(self.n_chains))
        n_draws = min(lengths[c] for c in kept) if kept else 0
        empty = [c for c in range(self.n_chains) if c not in kept]
        if empty:
            warnings.warn(f"to_arviz: chain {', '.join(map(str, empty))} has no samples and is left out",
                          stacklevel=3)
        if any(lengths[c] > n_draws for c in kept):
            warnings.warn(f"to_arviz: the chains have {[lengths[c] for c in kept]} samples; ArviZ needs equal "
                          f"lengths, so each is truncated to the shortest ({n_draws}). chain.samples keeps "
                          f"them all.", stacklevel=3)
        return kept, n_draws

    def to_arviz(self):
        """An ``arviz.InferenceData`` with a posterior group (chain, draw, *shape); ragged
        quantities are NaN-padded, and the log joint is in ``sample_stats.lp``. Chains of
        different lengths are truncated to the shortest non-empty one (with a warning)."""
        import arviz as az

        chains, n_draws = self._arviz_chains()
        draws = [self.samples[c][:n_draws] for c in chains]
        names = list(dict.fromkeys(k for chain_draws in draws for s in chain_draws for k in s))
        posterior = {name: _padded([[_to_numpy(s.get(name, math.nan)) for s in d] for d in draws])
                     for name in names}
        lp = np.array([self.scores[c][:n_draws] for c in chains], dtype=float)
        return az.from_dict(posterior=posterior, sample_stats={"lp": lp})

    def summary(self, var_names=None):
        """R-hat, bulk and tail ESS (and mean, sd, MCSE, HDI) of every recorded quantity and
        of the log joint ``lp``: ``arviz.summary`` of :meth:`to_arviz`, as a pandas DataFrame
        (one row per quantity, or per element of a vector quantity). ``var_names``: only
        these recorded quantities (``lp`` is always included)."""
        import arviz as az
        import pandas as pd

        idata = self.to_arviz()
        tables = []
        if "posterior" in idata.groups():
            tables.append(az.summary(idata, var_names=var_names))
        tables.append(az.summary(idata, group="sample_stats", var_names=["lp"]))
        return pd.concat(tables)

    def __repr__(self):
        rates = ", ".join(f"{k}: {v:.2f}" for k, v in self.acceptance_rates().items())
        flag = " (interrupted)" if self.interrupted else ""
        lengths = [len(s) for s in self.samples]
        shown = lengths[0] if len(set(lengths)) <= 1 and lengths else lengths
        return f"<Chain: {self.n_chains} chain(s) x {shown} samples{flag}; acceptance {rates}>"


def _progress_bar(total, name):
    """tqdm's bar described by the kernel's name: whole in a notebook, where the bar is a
    widget whose row wraps to make room for it (tests/test_browser_reopen.py looks); in a terminal
    cut at 32 characters, so the bar keeps its line. In a notebook tqdm's bar is a widget
    whose saved text reads "0/5000" (its state when first shown): it is shown with a
    display id, which ``run_chain`` updates when it closes."""
    from tqdm.auto import tqdm
    from tqdm.notebook import tqdm_notebook

    if not issubclass(tqdm, tqdm_notebook):
        return tqdm(total=total, desc=name if len(name) <= 32 else name[:31] + "…", leave=True)
    from IPython.display import display

    bar = tqdm(total=total, desc=name, leave=True, display=False)
    # a long name would squeeze the bar to nothing: the bar keeps a width, wrapping to a new line
    bar.container.layout.flex_flow = "row wrap"
    bar.container.children[1].layout.min_width = "200px"
    bar.saved_display = display(bar.container, display_id=True)
    return bar


def _padded(arrays):
    """``arrays[c][d]`` (numpy values) as one array (chain, draw, *shape), NaN-padded to the largest
    shape of the highest dimension seen; a value of lower dimension (a missing value's NaN) stays NaN."""
    flat = [np.asarray(a, dtype=float) for chain_arrays in arrays for a in chain_arrays]
    ndim = max((a.ndim for a in flat), default=0)
    shape = tuple(max(a.shape[i] for a in flat if a.ndim == ndim) for i in range(ndim))
    out = np.full((len(arrays), len(arrays[0]) if arrays else 0) + shape, np.nan)
    for c, chain_arrays in enumerate(arrays):
        for d, a in enumerate(chain_arrays):
            a = np.asarray(a, dtype=float)
            if a.ndim == ndim:
                out[(c, d) + tuple(slice(0, n) for n in a.shape)] = a
    return out


# -- running -------------------------------------------------------------------------------------

def run_chain(kernel, trace, steps: int, record=None, chains=None, thin: int = 1,
              progress: bool = True, callback=None, chain=None, threads: int | None = 1) -> Chain:
    """Run ``kernel`` for ``steps`` steps from ``trace`` (or from each trace in a list).

    ``record``: what to record after each kept step (see :func:`recorder`); an
    address that is in no sample of the run is an error (with the nearest addresses
    suggested), one missing in some samples is NaN there. ``chains``: run this many
    chains, each from ``trace`` (or pass a list of initial traces as ``trace``).
    ``thin``: keep every ``thin``-th step. ``callback(chain_index, step, trace)`` is
    called after each step (live views use it). ``chain``: an existing
    :class:`Chain` to extend (continuing a run from its last traces,
    ``chain.traces``; ``trace`` is then ignored); its kernel statistics keep
    accumulating.

    ``threads``: torch's intra-op threads during the run, restored afterwards. The
    default, 1, is deliberate: the engine's tensors are small, and on a busy
    machine torch's default (one thread per core) made a split/merge chain 40x
    slower than one thread. Pass a number for models with large tensor
    operations, or None to leave torch's setting alone.

    A KeyboardInterrupt stops the run and returns what was collected; any other
    exception is re-raised with the partial chain as ``err.chain``.
    """
    _check_arguments(trace, steps, chains, thin, threads, chain)
    kernel = as_kernel(kernel)
    if chain is not None:
        starts = list(chain.traces)
    else:
        starts = list(trace) if isinstance(trace, (list, tuple)) else [trace] * (chains or 1)
        chain = Chain(len(starts))
        kernel.reset_stats()
    read = Recorder(record)
    with _torch_threads(threads), _Progress(progress, steps * len(starts), kernel) as bar:
        try:
            for c, state in enumerate(starts):
                _run_one(kernel, chain, c, state, steps, thin, read, callback, bar)
        except KeyboardInterrupt:
            chain.interrupted = True
            warnings.warn(f"run_chain interrupted: keeping {sum(map(len, chain.samples))} samples collected "
                          f"so far", stacklevel=2)
        except Exception as exc:
            chain.interrupted = True
            raise _with_chain(exc, chain) from None
        finally:
            chain.acceptance = kernel.acceptance()
    if not chain.interrupted:
        _check_recorded(read, chain)
    return chain


def _run_one(kernel, chain, c, state, steps, thin, read, callback, bar):
    """Chain ``c``: ``steps`` steps from ``state``, recording every ``thin``-th."""
    chain.traces[c] = state
    chain.finished[c] = False
    done_before, began = chain.steps_done[c], ChainTiming.clock()
    try:
        for step in range(1, steps + 1):
            state, _ = kernel(state)
            chain.traces[c] = state
            chain.steps_done[c] = done_before + step
            if step % thin == 0:
                chain.samples[c].append(read(state))
                chain.scores[c].append(state.score)
            if callback is not None:
                callback(c, step, state)
            bar.step(step)
    finally:
        chain.timings[c] = ChainTiming.since(began)
    chain.finished[c] = True


def _with_chain(exc, chain):
    """``exc`` with the partial chain attached as ``exc.chain`` and a note saying so."""
    n = sum(map(len, chain.samples))
    try:
        exc.chain = chain
    except AttributeError:     # an exception class that takes no attributes: say so instead
        exc.add_note(f"run_chain: {n} samples were collected before this error; they could not be attached.")
        return exc
    steps = chain.steps_done[0] if chain.n_chains == 1 else f"{chain.steps_done} (per chain)"
    exc.add_note(f"run_chain stopped by this error after {steps} step(s); the {n} samples collected so far "
                 f"are kept in err.chain (a Chain; err.chain.traces to continue).")
    return exc


def _check_recorded(read, chain):
    """An address entry of ``record`` in no sample of the run is an error (a typo, most likely)."""
    missing = read.never_found()
    if not missing or not any(chain.samples):
        return
    name, address = missing[0]
    last = next(t for t in chain.traces if t is not None)
    label = "" if name == _name(address) else f" (recorded as {name!r})"
    error = AddressError(
        f"run_chain: the record entry {format_address(address)}{label} is in no sample of this run: "
        f"no trace of {last.gen_fn.name} had it, and every recorded value is NaN."
        + did_you_mean(address, last.flat_records())
        + " Fix the address (an address missing only in some states of a trans-dimensional model is "
          "fine: it is NaN there). The samples are kept in err.chain.")
    error.chain = chain
    raise error


def _check_arguments(trace, steps, chains, thin, threads, chain):
    _check_count("steps", steps, minimum=0)
    _check_count("thin", thin, minimum=1)
    if chains is not None:
        _check_count("chains", chains, minimum=1)
    if threads is not None:
        _check_count("threads", threads, minimum=1)
    if chain is not None:
        return
    starts = list(trace) if isinstance(trace, (list, tuple)) else [trace]
    for start in starts:
        if not isinstance(start, Trace):
            raise TypeError(
                f"run_chain needs a start trace (a trace of the model), got {type(start).__name__} "
                f"{start!r:.60}: make one with model.simulate(*args) or, with observations, "
                f"trace, _ = model.generate(args, observations).")
    if isinstance(trace, (list, tuple)) and chains is not None and chains != len(starts):
        raise ValueError(f"run_chain got {len(starts)} start traces and chains={chains}; pass one or the other")


def _check_count(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"run_chain: {name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"run_chain: {name} must be at least {minimum}, got {name}={value}")


@contextlib.contextmanager
def _torch_threads(n):
    """torch's intra-op thread count set to ``n`` for the block (None: unchanged), then restored."""
    before = torch.get_num_threads()
    if n is not None and n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


class _Progress:
    """A tqdm bar over all steps of all chains, with acceptance rates every 50 steps (or nothing)."""

    def __init__(self, enabled, total, kernel):
        self.kernel, self.bar = kernel, None
        if enabled:
            self.bar = _progress_bar(total, kernel.name)

    def step(self, step):
        if self.bar is None:
            return
        self.bar.update(1)
        if step % 50 == 0:
            acc = self.kernel.acceptance()
            self.bar.set_postfix({k[:18]: f"{a / p:.2f}" for k, (a, p) in acc.items() if p}, refresh=False)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
            if getattr(self.bar, "saved_display", None) is not None:   # the final state, for the saved notebook
                self.bar.saved_display.update(self.bar.container)
