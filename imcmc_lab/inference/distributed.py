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
from .chains import Chain, ChainTiming, run_chain
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
    """``run_chain``'s callback: every ``REPORT_EVERY`` s, tell ``sink(index, step, batch)`` how
    far the chain got; ``sink`` returning True asks the chain to stop (as Ctrl-C would).
    ``batch`` is None, or, for a sink with ``samples = True`` (a live view), the samples
    kept since the last report: ``(samples, scores, kernel acceptance)``."""

    def __init__(self, index, sink, part, kernel):
        self.index, self.sink, self.last = index, sink, time.monotonic()
        self.part = part if getattr(sink, "samples", False) else None
        self.kernel, self.sent = kernel, 0

    def __call__(self, _chain, step, _trace):
        now = time.monotonic()
        if self.sink is not None and now - self.last >= REPORT_EVERY:
            self.last = now
            if self.sink(self.index, step, self.batch()):
                raise KeyboardInterrupt

    def batch(self):
        if self.part is None:
            return None
        kept = len(self.part.samples[0])
        new = (self.part.samples[0][self.sent:kept], self.part.scores[0][self.sent:kept], self.kernel.acceptance())
        self.sent = kept
        return new


class _DaskSink:
    """Reports progress (and, with ``samples``, batches of samples as pickled bytes) from a
    Dask worker as events on ``topic``, when the client listens (``listened``: a progress
    bar or a live view); stops when the client sets the ``distributed.Event`` named
    ``topic + "-stop"``, and waits while the one named ``topic + "-pause"`` is set.
    (The scheduler keeps the last ``distributed.admin.low-level-log-length`` events of a
    topic, so a long streamed run holds a bounded amount of memory there.)"""

    def __init__(self, topic, samples=False, listened=True):
        self.topic, self.samples, self.listened = topic, samples, listened or samples

    def __call__(self, index, step, batch=None):
        from distributed import Event, get_worker

        if self.listened:
            get_worker().log_event(self.topic, [index, step] if batch is None else [index, step, dumps(batch)])
        stop, pause = Event(self.topic + "-stop"), Event(self.topic + "-pause")
        while pause.is_set() and not stop.is_set():     # paused: the chain waits on its worker
            time.sleep(REPORT_EVERY)
        return stop.is_set()


def _run_one(payload: bytes, index: int, seed: int, steps: int, thin: int, sink=None) -> bytes:
    """Run chain ``index`` from its payload; return ``dumps({"chain": ..., "error": ...})``.

    Module-level so that every executor finds it by name. The chain is built in
    place (``run_chain(chain=...)``) so an exception keeps what it collected.
    """
    with _CHAIN_LOCK, _seeded(seed), _one_torch_thread():
        began = ChainTiming.clock()         # unpickling counts: a fresh worker imports the model here
        kernel, start, record = pickle.loads(payload)
        kernel = as_kernel(kernel)
        kernel.reset_stats()
        part = Chain(1)
        part.traces[0] = start
        error, reporter = None, _Reporter(index, sink, part, kernel)
        try:
            if sink is not None and sink(index, 0, None):
                raise KeyboardInterrupt
            run_chain(kernel, start, steps, record=record, thin=thin, progress=False,
                      callback=reporter, chain=part)
        except KeyboardInterrupt:
            part.interrupted = True
        except Exception as exc:       # kept and re-raised by the client, with every chain's samples
            error = {"text": traceback.format_exc(), "exception": _picklable(exc)}
        if reporter.part is not None:  # the last samples, for a live view
            sink(index, part.steps_done[0], reporter.batch())
        part.acceptance = kernel.acceptance()
        part.timings[0] = ChainTiming.since(began)
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


#: Dask settings of the embedded cluster. Chains are long tasks that nobody profiles (the
#: dashboard is off), while Dask's defaults wake every process often: the worker's statistical
#: profiler walks the chain's stack 100 times a second, and every server ticks its event loop
#: every 20 ms. With the defaults, Dask's own processes used 0.08-0.15 of a core beside two
#: running chains, and the chains' own threads took 25-45% more CPU; with these, 0.03-0.045
#: (benchmarks/chains.py measures it).
QUIET_CLUSTER = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",                # blocked-loop warnings still come after 3 s
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.worker.memory.monitor-interval": "500ms",  # the nanny's memory guard (default 100 ms)
}


def local_client(n_workers=None, **cluster_options):
    """The embedded Dask client that ``run_chains(executor=None)`` uses: a ``LocalCluster``
    of processes with one thread each, one per available core unless ``n_workers`` says
    otherwise; started on first use, reused, closed at interpreter exit. It runs with
    :data:`QUIET_CLUSTER`'s settings (no worker profiler, slow ticks); ``cluster_options``
    go to ``LocalCluster``."""
    global _LOCAL_CLIENT
    if _LOCAL_CLIENT is not None and _LOCAL_CLIENT.status == "running":
        return _LOCAL_CLIENT
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError as exc:
        raise ImportError("run_chains needs Dask for parallel chains: pip install \"dask[distributed]\" "
                          "(or pass executor=\"serial\" to run them here, one after the other)") from exc
    if n_workers is None:
        n_workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    options = dict(threads_per_worker=1, processes=True, dashboard_address=None)
    options.update(cluster_options)
    with dask.config.set(QUIET_CLUSTER):      # read by the scheduler, the nannies and (sent) the workers
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

    def report(self, index, step, _batch=None):
        """Count and redraw now."""
        self.counts[index] = step
        self.refresh()

    def on_event(self, event):
        """Handler of the Dask progress topic (runs in the client's event-loop thread)."""
        index, step = event[1][:2]
        self.counts[index] = max(step, self.counts.get(index, 0))

    def refresh(self):
        if self.bar is not None:
            self.bar.n = sum(self.counts.values())
            self.bar.refresh()

    def close(self):
        if self.bar is not None:
            self.refresh()
            self.bar.close()


class _Controls:
    """What the caller of ``run_chains`` asks of running chains: ``stop`` and ``pause``
    (``threading.Event``s a live view's buttons set), and ``on_samples(index, steps done,
    samples, scores, acceptance)`` called with each batch of new samples."""

    def __init__(self, progress, stop=None, pause=None, on_samples=None):
        self.progress, self.on_samples = progress, on_samples
        self.stop, self.pause = stop or threading.Event(), pause or threading.Event()
        self.samples = on_samples is not None          # (the _Reporter reads this)
        self.dask_pause, self._paused = None, False

    def __call__(self, index, step, batch=None):
        """The in-process sink: count, pass a batch on, wait while paused; True to stop."""
        self.progress.report(index, step)
        if batch is not None:
            self.on_samples(index, step, *batch)
        while self.pause.is_set() and not self.stop.is_set():
            time.sleep(0.05)
        return self.stop.is_set()

    def on_event(self, event):
        """Handler of the Dask topic (the client's event-loop thread): progress and batches."""
        self.progress.on_event(event)
        if len(event[1]) == 3 and self.on_samples is not None:
            index, step, batch = event[1]
            self.on_samples(index, step, *pickle.loads(batch))

    def stop_requested(self) -> bool:
        """Mirror a pause to the workers; True once a stop was asked for."""
        if self.dask_pause is not None and self.pause.is_set() != self._paused:
            self._paused = self.pause.is_set()
            self.dask_pause.set() if self._paused else self.dask_pause.clear()
        return self.stop.is_set()


def _run_serial(payloads, seeds, steps, thin, controls):
    progress = controls.progress
    outcomes = [None] * len(payloads)
    for index, payload in enumerate(payloads):
        try:
            outcomes[index] = _run_one(payload, index, seeds[index], steps, thin, controls)
        except KeyboardInterrupt:         # outside run_chain (while unpickling, say): stop here
            break
        progress.counts[index] = steps
        if pickle.loads(outcomes[index])["chain"].interrupted:
            break
    return outcomes


def _wait(futures, progress, timeout=None, controls=None):
    """Until every future is done, ``timeout`` passes, or (returning True) a stop is asked for."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not all(f.done() for f in futures):
        if deadline is not None and time.monotonic() > deadline:
            return False
        if controls is not None and controls.stop_requested():
            return True
        time.sleep(min(REPORT_EVERY, 0.1))
        progress.refresh()
    return False


def _outcome(future):
    """The task's bytes; the exception that lost the chain; or None if it never finished."""
    if not future.done() or future.cancelled():
        return None
    try:
        return future.result()
    except Exception as exc:          # a crashed worker, a broken pool
        return exc


def _run_on(executor, payloads, seeds, steps, thin, controls):
    progress = controls.progress
    dask = _is_dask_client(executor)
    sink = stop = None
    if dask:
        from distributed import Event

        topic = f"imcmc-chains-{uuid.uuid4().hex}"
        sink = _DaskSink(topic, samples=controls.samples, listened=progress.bar is not None)
        stop, controls.dask_pause = Event(topic + "-stop", client=executor), Event(topic + "-pause", client=executor)
        if sink.listened:
            executor.subscribe_topic(topic, controls.on_event)
        unique = {id(p): p for p in payloads}
        # broadcast: a chain must not prefer the worker that holds its payload (with one copy,
        # locality put 3 of 4 chains on one worker and the speed-up fell to 1.3x)
        shared = {key: executor.scatter(p, hash=False, broadcast=True) for key, p in unique.items()}
        futures = [executor.submit(_run_one, shared[id(p)], i, seeds[i], steps, thin, sink, pure=False,
                                   key=f"imcmc-chain-{i}-{topic[-8:]}") for i, p in enumerate(payloads)]
    else:
        futures = [executor.submit(_run_one, p, i, seeds[i], steps, thin) for i, p in enumerate(payloads)]
    try:
        if _wait(futures, progress, controls=controls):
            _stop(futures, stop, quiet=True)
    except KeyboardInterrupt:
        _stop(futures, stop)
    finally:
        if dask and sink.listened:
            executor.unsubscribe_topic(sink.topic)
    return [_outcome(f) for f in futures]


def _stop(futures, stop_event, quiet=False):
    """After Ctrl-C (or a requested stop, ``quiet``): ask running chains to stop (Dask) or
    cancel queued ones (other executors), then give the running ones a bounded time to hand
    back their samples."""
    if stop_event is not None:
        stop_event.set()
    else:
        for future in futures:
            future.cancel()
    if not quiet:
        warnings.warn(f"run_chains interrupted: waiting up to {STOP_GRACE:.0f} s for running chains to hand back "
                  f"their samples (Ctrl-C again to abandon them)", stacklevel=4)
    try:
        _wait(futures, _Progress(False, 0, ""), timeout=STOP_GRACE)
    except KeyboardInterrupt:
        pass


def _merge(outcomes, starts):
    """One :class:`Chain` of every chain's samples; ``finished``, ``errors`` say what happened."""
    chain, first_error = Chain(len(outcomes)), None
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
        chain.timings[index] = part.timings[0]
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
               thin: int = 1, progress: bool = True, *, on_samples=None, stop=None, pause=None) -> Chain:
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
    ran all its steps), ``chain.errors``, ``chain.seed`` and ``chain.timings[c]`` (its
    wall and CPU seconds and the process that ran it). Ctrl-C keeps what every
    chain collected (``chain.interrupted``). If a chain raises or its worker dies,
    the others still run to the end, then :class:`ChainsFailed` is raised with the
    whole result as ``err.chain``.

    For live views (``imcmc_lab.widgets.SamplerStream(..., chains=k)``): ``on_samples(index,
    steps_done, samples, scores, acceptance)`` is called in this process with each chain's new
    samples a few times a second while it runs (in this process, or from Dask workers
    through the scheduler's event topics; other executors send none), and once more when it
    ends; ``stop``/``pause``: ``threading.Event``s that, set from another thread, stop every
    chain (keeping all samples) or hold them where they are until cleared.
    """
    starts = _starts(trace, chains)
    steps, thin = _count(steps, "steps", 0), _count(thin, "thin", 1)
    kernel = as_kernel(kernel)
    seed = np.random.SeedSequence().entropy if seed is None else seed
    seeds = chain_seeds(seed, len(starts))
    where = _resolve_executor(executor, len(starts))
    payloads = ([_payload(kernel, start, record) for start in starts] if isinstance(trace, (list, tuple))
                else [_payload(kernel, trace, record)] * len(starts))     # one start: pickled once
    bar = _Progress(progress, steps * len(starts), kernel.name)
    controls = _Controls(bar, stop, pause, on_samples)
    try:
        if where == "serial":
            outcomes = _run_serial(payloads, seeds, steps, thin, controls)
        else:
            outcomes = _run_on(where, payloads, seeds, steps, thin, controls)
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
    if chain.interrupted and not controls.stop.is_set():
        warnings.warn(f"run_chains interrupted: keeping {sum(map(len, chain.samples))} samples collected so "
                      f"far; chain.finished says which chains ran to the end", stacklevel=2)
    return chain


def summary(chain, var_names=None):
    """The same as :meth:`Chain.summary <imcmc_lab.inference.chains.Chain.summary>` (kept as a
    function for code written before the method existed)."""
    return chain.summary(var_names)
