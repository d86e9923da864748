"""Many chains at once: on Dask (an embedded ``LocalCluster`` by default), on any
``concurrent.futures`` executor, or in this process.

``run_chains(kernel, trace, steps, chains=4)`` runs each chain as one task that
calls :func:`~imcmc_lab.inference.chains.run_chain`. What a task needs (kernel,
start trace, ``record``) travels as cloudpickle bytes, so models, kernels and
lambdas defined in a notebook reach other processes; the per-chain results come
back the same way.

Reproducibility: chain ``c`` gets its own seed from one
``numpy.random.SeedSequence(seed)`` (child ``c``), seeds torch's global generator
(and numpy's and Python's) with it, runs with one torch thread, and starts from
its own unpickled copy of the kernel. So the same ``seed`` gives the same chains
in this process, on 2 workers or on 50. Chains in one process run one at a time:
they share torch's global generator.

Nothing computed is lost: Ctrl-C asks running chains to stop and keeps what every
chain collected; an exception in one chain lets the others finish and raises
:class:`ChainsFailed` with the whole :class:`~imcmc_lab.inference.chains.Chain`
(the failed chain's samples up to its failure included) as ``err.chain``.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import functools
import io
import os
import pickle
import random
import sys
import threading
import time
import traceback
import uuid
import warnings

import numpy as np
import torch

from ..errors import ImcmcError
from .chains import Chain, run_chain
from .involutive import MoveRecord
from .kernels import as_kernel

__all__ = ["run_chains", "summary", "local_client", "close_local_client", "chain_seeds", "dumps",
           "ChainsFailed"]

DEFAULT_CHAINS = 4
#: seconds between progress reports (and stop checks) of a running chain
REPORT_EVERY = 0.25
#: after Ctrl-C, how long to wait for running chains to hand back what they have
STOP_GRACE = 30.0

_CHAIN_LOCK = threading.Lock()      # chains in one process share torch's global generator


class ChainsFailed(ImcmcError):
    """One or more chains raised. ``chain``: every chain's samples (a failed chain's up to
    its failure); ``chain.errors``: ``{chain index: traceback text}``."""

    def __init__(self, message, chain):
        super().__init__(message)
        self.chain = chain


# ---------------------------------------------------------------------------
# seeds and pickling
# ---------------------------------------------------------------------------
def chain_seeds(seed, n: int) -> list[int]:
    """One 64-bit seed per chain: child ``c`` of ``numpy.random.SeedSequence(seed)``.
    Chain ``c``'s seed depends on ``seed`` and ``c`` only, not on ``n``."""
    return [int(child.generate_state(1, np.uint64)[0]) for child in np.random.SeedSequence(seed).spawn(n)]


@contextlib.contextmanager
def _seeded(seed: int):
    """Seed torch, numpy and ``random`` for one chain; give the caller's generators back after."""
    np_state, py_state = np.random.get_state(), random.getstate()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        np.random.seed(seed % 2**32)
        random.seed(seed)
        try:
            yield
        finally:
            np.random.set_state(np_state)
            random.setstate(py_state)


@contextlib.contextmanager
def _one_torch_thread():
    # k chains on k cores must not oversubscribe; one thread also makes results independent
    # of the machine (multi-threaded reductions may sum in another order).
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _nothing():
    return None


@functools.cache
def _pickler_class():
    import cloudpickle

    class Pickler(cloudpickle.CloudPickler):
        """cloudpickle; with ``drop_records``, move records (a kernel's ``last_record``)
        become None: a task needs none, and they hold four traces each."""

        drop_records = False

        def reducer_override(self, obj):
            if self.drop_records and isinstance(obj, MoveRecord):
                return _nothing, ()
            return super().reducer_override(obj)

    return Pickler


def dumps(obj, drop_records=False) -> bytes:
    """``obj`` as bytes that ``pickle.loads`` reads back in another process (cloudpickle:
    notebook-defined functions and lambdas travel by value)."""
    buffer = io.BytesIO()
    pickler = _pickler_class()(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.drop_records = drop_records
    pickler.dump(obj)
    return buffer.getvalue()


def _payload(kernel, start, record) -> bytes:
    try:
        return dumps((kernel, start, record), drop_records=True)
    except Exception as exc:
        raise TypeError(
            f"run_chains could not pickle the kernel, start trace or record to send them to other "
            f"processes ({type(exc).__name__}: {exc}). Run in this process with executor=\"serial\", "
            f"or make the object picklable.") from exc


# ---------------------------------------------------------------------------
# one chain: the task that runs on a worker (or here)
# ---------------------------------------------------------------------------
class _Reporter:
    """``run_chain``'s callback: every ``REPORT_EVERY`` s, tell ``sink(index, step)`` how far
    the chain got; ``sink`` returning True asks the chain to stop (as Ctrl-C would)."""

    def __init__(self, index, sink):
        self.index, self.sink, self.last = index, sink, time.monotonic()

    def __call__(self, _chain, step, _trace):
        now = time.monotonic()
        if self.sink is not None and now - self.last >= REPORT_EVERY:
            self.last = now
            if self.sink(self.index, step):
                raise KeyboardInterrupt


class _DaskSink:
    """Reports progress from a Dask worker as events on ``topic``; stops when the client
    sets the ``distributed.Event`` named ``stop``."""

    def __init__(self, topic, stop):
        self.topic, self.stop = topic, stop

    def __call__(self, index, step):
        from distributed import Event, get_worker

        get_worker().log_event(self.topic, [index, step])
        return Event(self.stop).is_set()


def _run_one(payload: bytes, index: int, seed: int, steps: int, thin: int, sink=None) -> bytes:
    """Run chain ``index`` from its payload; return ``dumps({"chain": ..., "error": ...})``.

    Module-level so that every executor finds it by name. The chain is built in
    place (``run_chain(chain=...)``) so an exception keeps what it collected.
    """
    with _CHAIN_LOCK, _seeded(seed), _one_torch_thread():
        kernel, start, record = pickle.loads(payload)
        kernel = as_kernel(kernel)
        kernel.reset_stats()
        part = Chain(1)
        part.traces[0] = start
        error = None
        try:
            if sink is not None and sink(index, 0):
                raise KeyboardInterrupt
            run_chain(kernel, start, steps, record=record, thin=thin, progress=False,
                      callback=_Reporter(index, sink), chain=part)
        except KeyboardInterrupt:
            part.interrupted = True
        except Exception as exc:       # kept and re-raised by the client, with every chain's samples
            error = {"text": traceback.format_exc(), "exception": _picklable(exc)}
        part.acceptance = kernel.acceptance()
        return dumps({"chain": part, "error": error})


def _picklable(exc):
    try:
        pickle.loads(dumps(exc))
        return exc
    except Exception:
        return None


# ---------------------------------------------------------------------------
# executors
# ---------------------------------------------------------------------------
_LOCAL_CLIENT = None


def _warm_up():
    """Run once on each worker at start-up: finding this function imports the engine (and
    torch) there, so that the first chain does not pay for it."""
    torch.set_num_threads(1)


def local_client(n_workers=None, **cluster_options):
    """The embedded Dask client that ``run_chains(executor=None)`` uses: a ``LocalCluster``
    of processes with one thread each, one per available core unless ``n_workers`` says
    otherwise; started on first use, reused, closed at interpreter exit."""
    global _LOCAL_CLIENT
    if _LOCAL_CLIENT is not None and _LOCAL_CLIENT.status == "running":
        return _LOCAL_CLIENT
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:
        raise ImportError("run_chains needs Dask for parallel chains: pip install \"dask[distributed]\" "
                          "(or pass executor=\"serial\" to run them here, one after the other)") from exc
    if n_workers is None:
        n_workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    options = dict(threads_per_worker=1, processes=True, dashboard_address=None)
    options.update(cluster_options)
    cluster = LocalCluster(n_workers=n_workers, **options)
    _LOCAL_CLIENT = Client(cluster, set_as_default=False)
    _LOCAL_CLIENT.run(_warm_up)
    atexit.register(close_local_client)
    return _LOCAL_CLIENT


def close_local_client():
    """Shut the embedded cluster down (the next ``run_chains`` starts a new one)."""
    global _LOCAL_CLIENT
    client, _LOCAL_CLIENT = _LOCAL_CLIENT, None
    if client is not None:
        cluster = client.cluster
        client.close()
        if cluster is not None:
            cluster.close()


def _is_dask_client(executor) -> bool:
    distributed = sys.modules.get("distributed")
    return distributed is not None and isinstance(executor, distributed.Client)


def _resolve_executor(executor, n_chains):
    if executor == "serial" or (executor is None and n_chains == 1):
        return "serial"
    if executor is None:
        return local_client()
    if _is_dask_client(executor) or isinstance(executor, concurrent.futures.Executor):
        if isinstance(executor, concurrent.futures.ThreadPoolExecutor):
            warnings.warn("run_chains: chains in threads of one process share torch's random generator, "
                          "so they run one at a time; use processes (executor=None) for parallel chains",
                          stacklevel=3)
        return executor
    raise TypeError(f"run_chains: executor must be None (a local Dask cluster), \"serial\", a "
                    f"dask.distributed.Client or a concurrent.futures.Executor; got {executor!r}")


# ---------------------------------------------------------------------------
# the client side: progress, waiting, stopping, merging
# ---------------------------------------------------------------------------
class _Progress:
    """One combined bar: the sum of the steps each chain last reported."""

    def __init__(self, enabled, total, name):
        self.counts = {}
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=name, leave=True)

    def report(self, index, step):
        """The in-process sink: count and redraw now; never asks to stop."""
        self.counts[index] = step
        self.refresh()
        return False

    def on_event(self, event):
        """Handler of the Dask progress topic (runs in the client's event-loop thread)."""
        index, step = event[1]
        self.counts[index] = max(step, self.counts.get(index, 0))

    def refresh(self):
        if self.bar is not None:
            self.bar.n = sum(self.counts.values())
            self.bar.refresh()

    def close(self):
        if self.bar is not None:
            self.refresh()
            self.bar.close()


def _run_serial(payloads, seeds, steps, thin, progress):
    outcomes = [None] * len(payloads)
    for index, payload in enumerate(payloads):
        try:
            outcomes[index] = _run_one(payload, index, seeds[index], steps, thin, progress.report)
        except KeyboardInterrupt:         # outside run_chain (while unpickling, say): stop here
            break
        progress.counts[index] = steps
        if pickle.loads(outcomes[index])["chain"].interrupted:
            break
    return outcomes


def _wait(futures, progress, timeout=None):
    deadline = None if timeout is None else time.monotonic() + timeout
    while not all(f.done() for f in futures):
        if deadline is not None and time.monotonic() > deadline:
            return
        time.sleep(REPORT_EVERY)
        progress.refresh()


def _outcome(future):
    """The task's bytes; the exception that lost the chain; or None if it never finished."""
    if not future.done() or future.cancelled():
        return None
    try:
        return future.result()
    except Exception as exc:          # a crashed worker, a broken pool
        return exc


def _run_on(executor, payloads, seeds, steps, thin, progress):
    dask = _is_dask_client(executor)
    sink = stop = None
    if dask:
        from distributed import Event

        topic = f"imcmc-chains-{uuid.uuid4().hex}"
        stop, sink = Event(topic, client=executor), _DaskSink(topic, topic)
        executor.subscribe_topic(topic, progress.on_event)
        unique = {id(p): p for p in payloads}
        shared = {key: executor.scatter(p, hash=False) for key, p in unique.items()}
        futures = [executor.submit(_run_one, shared[id(p)], i, seeds[i], steps, thin, sink, pure=False,
                                   key=f"imcmc-chain-{i}-{topic[-8:]}") for i, p in enumerate(payloads)]
    else:
        futures = [executor.submit(_run_one, p, i, seeds[i], steps, thin) for i, p in enumerate(payloads)]
    try:
        _wait(futures, progress)
    except KeyboardInterrupt:
        _stop(futures, stop)
    finally:
        if dask:
            executor.unsubscribe_topic(sink.topic)
    return [_outcome(f) for f in futures]


def _stop(futures, stop_event):
    """After Ctrl-C: ask running chains to stop (Dask) or cancel queued ones (other executors),
    then give the running ones a bounded time to hand back their samples."""
    if stop_event is not None:
        stop_event.set()
    else:
        for future in futures:
            future.cancel()
    warnings.warn(f"run_chains interrupted: waiting up to {STOP_GRACE:.0f} s for running chains to hand back "
                  f"their samples (Ctrl-C again to abandon them)", stacklevel=4)
    try:
        _wait(futures, _Progress(False, 0, ""), timeout=STOP_GRACE)
    except KeyboardInterrupt:
        pass


def _merge(outcomes, starts):
    """One :class:`Chain` of every chain's samples; ``finished``, ``errors`` say what happened."""
    chain = Chain(len(outcomes))
    chain.finished, chain.errors, first_error = [False] * len(outcomes), {}, None
    acceptance = {}
    for index, outcome in enumerate(outcomes):
        chain.traces[index] = starts[index]
        if outcome is None:                        # never ran, or abandoned after Ctrl-C
            chain.interrupted = True
            continue
        if isinstance(outcome, BaseException):
            chain.errors[index] = f"chain {index} was lost: {type(outcome).__name__}: {outcome}"
            first_error = first_error or outcome
            continue
        result = pickle.loads(outcome)
        part = result["chain"]
        chain.samples[index], chain.scores[index] = part.samples[0], part.scores[0]
        chain.traces[index], chain.steps_done[index] = part.traces[0], part.steps_done[0]
        chain.interrupted = chain.interrupted or part.interrupted
        for name, (accepted, proposed) in part.acceptance.items():
            a, p = acceptance.get(name, (0, 0))
            acceptance[name] = (a + accepted, p + proposed)
        if result["error"] is not None:
            chain.errors[index] = result["error"]["text"]
            first_error = first_error or result["error"]["exception"] or RuntimeError(result["error"]["text"])
        else:
            chain.finished[index] = not part.interrupted
    chain.acceptance = acceptance
    return chain, first_error


# ---------------------------------------------------------------------------
# the public entry points
# ---------------------------------------------------------------------------
def _count(value, name, least):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"run_chains: {name} must be an integer >= {least}, got {value!r}")
    return int(value)


def _starts(trace, chains):
    if isinstance(trace, (list, tuple)):
        if not trace:
            raise ValueError("run_chains: the list of start traces is empty; pass one trace per chain")
        if chains is not None and _count(chains, "chains", 1) != len(trace):
            raise ValueError(f"run_chains: chains={chains} but {len(trace)} start traces were given; "
                             f"pass one trace per chain, or one trace and chains=k")
        starts = list(trace)
    else:
        starts = [trace] * _count(DEFAULT_CHAINS if chains is None else chains, "chains", 1)
    if any(s is None for s in starts):
        raise ValueError("run_chains needs a start trace for every chain, got None; make one with "
                         "trace, _ = model.generate(args, observations)")
    return starts


def run_chains(kernel, trace, steps: int, chains=None, executor=None, seed=None, record=None,
               thin: int = 1, progress: bool = True) -> Chain:
    """Run ``chains`` independent chains of ``kernel`` for ``steps`` steps each, in parallel.

    ``trace``: the start of every chain, or a list of start traces (one per chain).
    ``chains``: how many (4 by default; the list's length if a list is given).
    ``executor``: ``None`` runs them on an embedded Dask ``LocalCluster`` (one process
    with one thread per core; see :func:`local_client`), started on first use and
    reused; a ``dask.distributed.Client`` runs them on its cluster; any
    ``concurrent.futures.Executor`` (a ``ProcessPoolExecutor``, say) runs them there;
    ``"serial"`` runs them here, one after the other (a single chain always does
    unless an executor is given). ``seed``: any ``numpy.random.SeedSequence``
    entropy; the same seed gives the same chains whatever the executor (``None``:
    fresh entropy, kept in ``chain.seed``). ``record``, ``thin``: as in
    :func:`~imcmc_lab.inference.chains.run_chain`. ``progress``: one combined bar.

    Returns a :class:`Chain` of all chains, with ``chain.finished[c]`` (chain ``c``
    ran all its steps), ``chain.errors`` and ``chain.seed``. Ctrl-C keeps what every
    chain collected (``chain.interrupted``). If a chain raises or its worker dies,
    the others still run to the end, then :class:`ChainsFailed` is raised with the
    whole result as ``err.chain``.
    """
    starts = _starts(trace, chains)
    steps, thin = _count(steps, "steps", 0), _count(thin, "thin", 1)
    kernel = as_kernel(kernel)
    seed = np.random.SeedSequence().entropy if seed is None else seed
    seeds = chain_seeds(seed, len(starts))
    where = _resolve_executor(executor, len(starts))
    if isinstance(trace, (list, tuple)):
        payloads = [_payload(kernel, start, record) for start in starts]
    else:
        payloads = [_payload(kernel, trace, record)] * len(starts)
    bar = _Progress(progress, steps * len(starts), kernel.name)
    try:
        if where == "serial":
            outcomes = _run_serial(payloads, seeds, steps, thin, bar)
        else:
            outcomes = _run_on(where, payloads, seeds, steps, thin, bar)
    finally:
        bar.close()
    chain, error = _merge(outcomes, starts)
    chain.seed = seed
    if chain.errors:
        failed = sorted(chain.errors)
        raise ChainsFailed(
            f"chain(s) {failed} of {len(starts)} failed; every chain's samples (the failed ones' up to "
            f"the failure) are kept in err.chain, and each traceback in err.chain.errors. "
            f"First failure:\n{chain.errors[failed[0]]}", chain) from error
    if chain.interrupted:
        warnings.warn(f"run_chains interrupted: keeping {sum(map(len, chain.samples))} samples collected so "
                      f"far; chain.finished says which chains ran to the end", stacklevel=2)
    return chain


def summary(chain, var_names=None):
    """R-hat, bulk and tail ESS (and mean, sd, MCSE, HDI) of every recorded quantity and of
    the log joint ``lp``: ``arviz.summary`` of ``chain.to_arviz()``, as a pandas DataFrame."""
    import arviz as az
    import pandas as pd

    idata = chain.to_arviz()
    tables = []
    if "posterior" in idata.groups():
        tables.append(az.summary(idata, var_names=var_names))
    tables.append(az.summary(idata, group="sample_stats", var_names=["lp"]))
    return pd.concat(tables)
