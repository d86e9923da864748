"""The live sampler with several chains (issue 20): ``SamplerStream(chains=k)`` runs the chains
through ``il.run_chains`` (in this process, or on a real 2-worker Dask ``LocalCluster``),
appends the batches of samples they send back while they run, draws one line per chain, and
its Pause holds / Stop ends every chain while keeping every sample. The chains are those
``run_chains`` gives with the same seed.
"""

from __future__ import annotations

import time

import pytest
import torch

import imcmc_lab as il
from imcmc_lab.examples import two_clusters as tc
from imcmc_lab.inference import distributed as dist

W = pytest.importorskip("imcmc_lab.widgets")

DATA = torch.tensor([-1.4, -0.9, -0.6, -1.1, 0.7, 1.2, 0.9, 1.5, 1.3, -0.8], dtype=torch.float64)
RECORD = {"k": "k"}


def _stream(steps, chains=3, executor="serial", **kwargs):
    return W.SamplerStream(tc.two_cluster_kernel(), tc.initial_trace(DATA), steps=steps, record=RECORD,
                           plots=["k", "log joint", "acceptance"], chains=chains, executor=executor, seed=7,
                           **kwargs)


def _floats(chain):
    return [[[float(s["k"]), score] for s, score in zip(samples, scores)]
            for samples, scores in zip(chain.samples, chain.scores)]


def _until(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_several_chains_stream_and_give_run_chains_samples():
    stream = _stream(40).start()
    chain = stream.wait(120)
    assert stream.status == "finished" and stream.error is None and stream.draw_error is None
    assert [len(s) for s in chain.samples] == [40, 40, 40] and chain.finished == [True] * 3
    expected = il.run_chains(tc.two_cluster_kernel(), tc.initial_trace(DATA), 40, chains=3, executor="serial",
                             seed=7, record=RECORD, progress=False)
    assert _floats(chain) == _floats(expected)
    assert chain.acceptance == expected.acceptance and chain.seed == 7
    table = chain.summary()                  # R-hat and ESS per recorded quantity, and of lp (ArviZ)
    assert {"k", "lp"} <= set(table.index) and {"r_hat", "ess_bulk", "ess_tail"} <= set(table.columns)
    # one line per chain in the chain panels, with a legend
    (ax_k, entry_k), (ax_lp, entry_lp) = stream._axes[0], stream._axes[1]
    assert sorted(entry_k["lines"]) == ["chain 1", "chain 2", "chain 3"] == sorted(entry_lp["lines"])
    colours = {line.get_color() for line in entry_lp["lines"].values()}
    assert len(colours) == 3
    assert "120</b> / 120 steps in 3 chains" in stream.progress_text.value
    assert "3 chains in this process" in stream.header.value
    # Continue: another 40 steps of every chain, from where each stopped
    stream.start().wait(120)
    assert [len(s) for s in chain.samples] == [80, 80, 80] and chain.steps_done == [80, 80, 80]


def test_pause_holds_and_stop_keeps_every_sample():
    stream = _stream(1_000_000, chains=2).start()
    _until(lambda: len(stream.chain.samples[0]) >= 5)     # batches arrive while the chain runs
    assert stream.running
    stream.pause()
    time.sleep(0.6)                                       # a report interval: the chain is held
    held = list(stream.chain.steps_done)
    time.sleep(0.6)
    assert stream.chain.steps_done == held and stream.status == "paused"
    stream.start()
    _until(lambda: stream.chain.steps_done != held)
    stream.stop()
    chain = stream.wait(60)
    assert stream.status == "stopped" and chain.interrupted and chain.finished == [False, False]
    # every step the first chain made is a sample (thin=1); the second never started (serial)
    assert len(chain.samples[0]) == chain.steps_done[0] > held[0]
    assert len(chain.scores[0]) == len(chain.samples[0])


@pytest.fixture(scope="module")
def cluster():
    client = dist.local_client(n_workers=2)
    yield client
    dist.close_local_client()


def test_chains_on_dask_workers_stream_live(cluster):
    STEPS = 2000     # long enough (a second or more on a quiet machine) for several 0.25 s batches
    stream = _stream(STEPS, chains=2, executor=None, max_rate=4.0)
    stream.start()
    seen = set()
    while stream.running:
        seen.add(sum(map(len, stream.chain.samples)))
        time.sleep(0.05)
    stream.wait()
    # samples arrived in several batches while the workers ran, not only at the end
    assert len({n for n in seen if 0 < n < 2 * STEPS}) >= 2, sorted(seen)
    assert stream.status == "finished" and [len(s) for s in stream.chain.samples] == [STEPS, STEPS]
    expected = il.run_chains(tc.two_cluster_kernel(), tc.initial_trace(DATA), STEPS, chains=2, executor="serial",
                             seed=7, record=RECORD, progress=False)
    assert _floats(stream.chain) == _floats(expected)
    assert "on the local Dask cluster" in stream.header.value
