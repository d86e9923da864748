"""Many chains on other processes: ``il.run_chains`` on a real Dask ``LocalCluster`` (2 worker
processes), on a ``ProcessPoolExecutor`` and on a scheduler started as separate processes,
against the serial run with the same seed; failures and Ctrl-C keep every sample; and what a
chain sends to another process pickles (cloudpickle; standard pickle for module-level objects).
"""

from __future__ import annotations

import _thread
import concurrent.futures
import multiprocessing
import pathlib
import pickle
import subprocess
import sys
import threading
import time

import cloudpickle
import numpy as np
import pytest
import torch

import imcmc_lab as il
from imcmc_lab.examples import two_clusters as tc
from imcmc_lab.inference import distributed as dist

distributed = pytest.importorskip("distributed")

DATA = torch.tensor([-1.4, -0.9, -0.6, -1.1, 0.7, 1.2, 0.9, 1.5, 1.3, -0.8], dtype=torch.float64)
RECORD = {"k": "k", "mu1": ("mu", 1), "spread": lambda t: float(t["mu", 2] - t["mu", 1]) if t["k"] == 2 else 0.0}
STEPS = 30


def _start():
    return tc.initial_trace(DATA)


def _used_kernel():
    """The quickstart's kernel, after one move (so it holds a move record, as in a notebook)."""
    kernel = tc.two_cluster_kernel()
    torch.manual_seed(0)
    kernel(_start())
    return kernel


def _draws(chain):
    """Every recorded value and score of every chain, as plain floats (exact comparison)."""
    return [[[float(s[name]) for name in sorted(s)] + [score] for s, score in zip(samples, scores)]
            for samples, scores in zip(chain.samples, chain.scores)]


@pytest.fixture(scope="module")
def serial():
    return il.run_chains(_used_kernel(), _start(), STEPS, chains=4, executor="serial", seed=2024,
                         record=RECORD, progress=False)


@pytest.fixture(scope="module")
def cluster():
    """The embedded cluster that executor=None uses, with 2 worker processes."""
    client = dist.local_client(n_workers=2)
    assert len(client.scheduler_info()["workers"]) == 2
    yield client
    dist.close_local_client()


# ---------------------------------------------------------------------------
# same seed, same chains, wherever they run
# ---------------------------------------------------------------------------
def test_serial_run_is_complete_and_seeded(serial):
    assert serial.n_chains == 4 and len(serial) == STEPS
    assert serial.finished == [True] * 4 and serial.errors == {} and not serial.interrupted
    assert serial.seed == 2024
    first = _draws(serial)
    assert len({tuple(map(tuple, c)) for c in first}) == 4, "the four chains must differ"
    again = il.run_chains(_used_kernel(), _start(), STEPS, chains=2, executor="serial", seed=2024,
                          record=RECORD, progress=False)
    assert _draws(again) == first[:2], "chain c's seed depends on the seed and c, not on the number of chains"


def test_local_cluster_gives_the_serial_samples(cluster, serial):
    chain = il.run_chains(_used_kernel(), _start(), STEPS, chains=4, seed=2024, record=RECORD, progress=True)
    assert chain.finished == [True] * 4
    assert _draws(chain) == _draws(serial)
    assert chain.acceptance == serial.acceptance
    assert [t.score for t in chain.traces] == [t.score for t in serial.traces]


def test_process_pool_gives_the_serial_samples(serial):
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        chain = il.run_chains(_used_kernel(), _start(), STEPS, chains=4, executor=pool, seed=2024,
                              record=RECORD, progress=False)
    assert chain.finished == [True] * 4
    assert _draws(chain) == _draws(serial)


def test_notebook_defined_model_and_kernel_travel_to_workers(cluster):
    """Functions not importable by name (as in a notebook) travel by value."""

    @il.gen
    def coin():
        p = il.beta(2.0, 2.0) @ "p"
        il.iid(il.bernoulli(p), 5) @ "flips"

    start, _ = coin.generate((), {"flips": torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0]), "p": 0.5})
    kernel = il.MH(il.select("p"))
    args = dict(chains=2, seed=5, record={"p": "p", "odds": lambda t: float(t["p"] / (1 - t["p"]))}, progress=False)
    here = il.run_chains(kernel, start, 20, executor="serial", **args)
    there = il.run_chains(kernel, start, 20, **args)
    assert there.finished == [True, True] and _draws(there) == _draws(here)


# ---------------------------------------------------------------------------
# nothing computed is lost
# ---------------------------------------------------------------------------
FAIL_AT = 10


def _failing_kernel(error=ValueError("planted failure in one chain")):
    """The quickstart kernel; the chain that starts with mu1 = 5 raises ``error`` at its 10th step."""
    inner = tc.two_cluster_kernel()

    def step(trace):
        state.setdefault("doomed", float(trace["mu", 1]) == 5.0)
        state["n"] = state.get("n", 0) + 1
        if state["doomed"] and state["n"] == FAIL_AT:
            raise error
        return inner(trace)

    state = {}     # each chain unpickles its own copy of the kernel, and so of this dict
    return step


def _starts(doomed):
    marked = tc.two_clusters.generate((10,), {"x": DATA, "k": 1, ("mu", 1): 5.0})[0]
    return [marked if c == doomed else _start() for c in range(4)]


def test_a_chain_that_raises_keeps_every_sample(cluster):
    with pytest.raises(il.ChainsFailed, match=r"chain\(s\) \[2\] of 4 failed") as info:
        il.run_chains(_failing_kernel(), _starts(2), STEPS, seed=1, record={"k": "k"}, progress=False)
    chain = info.value.chain
    assert isinstance(info.value.__cause__, ValueError)
    assert chain.finished == [True, True, False, True]
    assert [len(s) for s in chain.samples] == [STEPS, STEPS, FAIL_AT - 1, STEPS]
    assert "planted failure in one chain" in chain.errors[2] and list(chain.errors) == [2]
    assert chain.to_arviz().posterior["k"].shape == (4, FAIL_AT - 1)


def test_ctrl_c_in_serial_keeps_the_chains_so_far():
    with pytest.warns(UserWarning, match="interrupted"):
        chain = il.run_chains(_failing_kernel(KeyboardInterrupt()), _starts(1), STEPS, executor="serial",
                              seed=3, record={"k": "k"}, progress=False)
    assert chain.interrupted and chain.errors == {}
    assert chain.finished == [True, False, False, False]
    assert [len(s) for s in chain.samples] == [STEPS, FAIL_AT - 1, 0, 0]


def test_ctrl_c_on_the_cluster_stops_every_chain_and_keeps_its_samples(cluster):
    timer = threading.Timer(8.0, _thread.interrupt_main)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.warns(UserWarning, match="interrupted"):
            chain = il.run_chains(tc.two_cluster_kernel(), _start(), 10**6, chains=2, seed=4,
                                  record={"k": "k"}, progress=False)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 8.0 + dist.STOP_GRACE
    assert chain.interrupted and chain.finished == [False, False] and chain.errors == {}
    assert all(0 < len(s) < 10**6 for s in chain.samples)
    assert all(d == len(s) for d, s in zip(chain.steps_done, chain.samples))


# ---------------------------------------------------------------------------
# a scheduler and a worker started as separate processes (a "remote" cluster)
# ---------------------------------------------------------------------------
def _spawn(args, log):
    return subprocess.Popen([sys.executable, "-m", *args], stdout=log, stderr=subprocess.STDOUT)


def test_scheduler_in_a_separate_process(tmp_path, serial):
    scheduler_file = tmp_path / "scheduler.json"
    log = open(tmp_path / "dask.log", "wb")
    processes = [_spawn(["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                         "--no-dashboard", "--scheduler-file", str(scheduler_file)], log)]
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists():
            assert time.monotonic() < deadline, (tmp_path / "dask.log").read_text()
            time.sleep(0.2)
        processes.append(_spawn(["distributed.cli.dask_worker", "--scheduler-file", str(scheduler_file),
                                 "--nthreads", "1", "--nworkers", "2", "--no-dashboard"], log))
        with distributed.Client(scheduler_file=str(scheduler_file), timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
            chain = il.run_chains(_used_kernel(), _start(), STEPS, chains=4, executor=client, seed=2024,
                                  record=RECORD, progress=False)
        assert chain.finished == [True] * 4 and _draws(chain) == _draws(serial)
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        log.close()


# ---------------------------------------------------------------------------
# diagnostics and bad input
# ---------------------------------------------------------------------------
def test_summary_has_rhat_and_ess_per_quantity(serial):
    table = dist.summary(serial)
    assert {"k", "mu1", "spread", "lp"} <= set(table.index)
    assert {"r_hat", "ess_bulk", "ess_tail"} <= set(table.columns)
    assert np.isfinite(table.loc["lp", "r_hat"])


@pytest.mark.parametrize("call, words", [
    (lambda: il.run_chains(tc.two_cluster_kernel(), None, 5, executor="serial"), "needs a start trace"),
    (lambda: il.run_chains(tc.two_cluster_kernel(), _start(), -1, executor="serial"), "steps must be an integer >= 0"),
    (lambda: il.run_chains(tc.two_cluster_kernel(), _start(), 5, thin=0, executor="serial"), "thin must be"),
    (lambda: il.run_chains(tc.two_cluster_kernel(), _start(), 5, chains=0), "chains must be"),
    (lambda: il.run_chains(tc.two_cluster_kernel(), [_start()] * 2, 5, chains=3), "chains=3 but 2 start traces"),
    (lambda: il.run_chains(tc.two_cluster_kernel(), _start(), 5, executor="dask"), "executor must be None"),
])
def test_bad_arguments_say_what_to_do(call, words):
    with pytest.raises((ValueError, TypeError), match=words):
        call()


# ---------------------------------------------------------------------------
# pickling: what a chain sends to another process
# ---------------------------------------------------------------------------
def _same_move(f_or_q, which):
    """log alpha of one seeded split/merge move with the transform (or aux program) replaced."""
    f = f_or_q if which == "f" else tc.split_merge
    q = f_or_q if which == "q" else tc.split_aux
    torch.manual_seed(1)
    return float(il.involutive_move(_start(), q, (), f).log_alpha)


def _kernel_step(kernel):
    torch.manual_seed(2)
    return float(kernel(_start())[0].score)


def _move_record():
    torch.manual_seed(1)
    return il.involutive_move(_start(), tc.split_aux, (), tc.split_merge)


#: name: (make the object, what a user sees it do) for every public object a chain sends
BEHAVIOUR = {
    "gen function": (lambda: tc.two_clusters, lambda p: float(p.assess((10,), _start().choices))),
    "aux program": (lambda: tc.split_aux, lambda q: _same_move(q, "q")),
    "transform": (lambda: tc.split_merge, lambda f: _same_move(f, "f")),
    "fresh kernel": (tc.two_cluster_kernel, _kernel_step),
    "used kernel": (_used_kernel, _kernel_step),
    "trace": (_start, lambda t: (float(t.score), float(t["mu", 1]), int(t["k"]))),
    "chain": (lambda: il.run_chain(_used_kernel(), _start(), 5, record={"k": "k"}, progress=False), _draws),
    "move record": (_move_record, lambda r: (float(r.log_alpha), r.accepted, float(r.jacobian.logabsdet))),
}
@pytest.mark.parametrize("name", list(BEHAVIOUR))
def test_round_trip_with_run_chains_pickler(name):
    make, behaviour = BEHAVIOUR[name]
    assert behaviour(pickle.loads(dist.dumps(make()))) == behaviour(make())


@pytest.mark.parametrize("name", list(BEHAVIOUR))
def test_round_trip_with_cloudpickle(name):
    make, behaviour = BEHAVIOUR[name]
    assert behaviour(pickle.loads(cloudpickle.dumps(make()))) == behaviour(make())


@pytest.mark.parametrize("name", list(BEHAVIOUR))
def test_round_trip_with_standard_pickle_of_module_level_objects(name):
    make, behaviour = BEHAVIOUR[name]
    assert behaviour(pickle.loads(pickle.dumps(make()))) == behaviour(make())


def test_payload_of_a_used_kernel_travels_without_its_move_record():
    kernel = _used_kernel()
    assert kernel.kernels[0].last_record is not None
    shipped, start, record = pickle.loads(dist._payload(kernel, _start(), RECORD))
    assert shipped.kernels[0].last_record is None
    assert _kernel_step(shipped) == _kernel_step(_used_kernel())
    assert set(record) == set(RECORD)


def test_labels_unpickle_as_themselves():
    assert pickle.loads(dist.dumps([il.discrete, il.continuous])) == [il.discrete, il.continuous]
    assert pickle.loads(dist.dumps(il.discrete)) is il.discrete
