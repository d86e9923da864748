"""Four chains one after the other vs on a 2-worker local Dask cluster, same run.

The chains are the paper's Fig. 1 sampler (:mod:`imcmc_lab.examples.mixture`:
swap, split/merge, birth/death, cluster and weight moves) on 150 points; the
number of sweeps is calibrated so that one chain takes at least ``--seconds``
(2 s by default) on one core. In the same run:

1. serial: ``il.run_chains(..., executor="serial")``, the 4 chains in this process;
2. the cluster's start-up: ``local_client(n_workers=2)`` (worker processes started,
   the engine imported in them), reported separately;
3. cluster: the same call with ``executor=None`` (the embedded cluster just started).

Both runs use the same seed and must give the same samples (the run stops with
exit status 1 if not); the speed-up is serial / cluster wall time (target on 2
free cores: >= 1.6x). The machine must be otherwise idle for the ratio to mean
anything: it is a ratio of wall times.

CPU times grow far less than wall times when other programs load the machine,
so they say where time goes even on a busy one: each chain's CPU seconds
(``chain.timings``; in a worker, the whole worker process while the chain ran,
its first chain there including importing the model), and the CPU that Dask
itself used during the cluster run: this process (client, scheduler, nannies)
and the workers outside the threads that ran the chains.

Run: ``python benchmarks/chains.py`` (about 30 s plus the cluster's start-up).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import psutil
import torch

import imcmc_lab as il
from imcmc_lab.examples import mixture as m
from imcmc_lab.inference import distributed

CHAINS = 4


def _run(start, sweeps, executor):
    """Wall seconds, the chain, and this process's CPU seconds."""
    began, cpu = time.perf_counter(), time.process_time()
    chain = il.run_chains(m.mixture_kernel(), start, sweeps, chains=CHAINS, executor=executor, seed=11,
                          record={"k": "k"}, progress=False)
    return time.perf_counter() - began, chain, time.process_time() - cpu


def _process_cpu(pids):
    return sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids)


def _per_chain(chain):
    cpu = [t.cpu for t in chain.timings]
    return cpu, f"per-chain CPU {' '.join(f'{c:.2f}' for c in cpu)} s (mean {sum(cpu) / len(cpu):.2f})"


def _calibrate(start, seconds):
    """Sweeps for one chain of at least ``seconds`` on one core."""
    torch.set_num_threads(1)
    kernel, trace, sweeps = m.mixture_kernel(), start, 20
    began = time.perf_counter()
    for _ in range(sweeps):
        trace, _ = kernel(trace)
    per_sweep = (time.perf_counter() - began) / sweeps
    return max(sweeps, int(seconds / per_sweep) + 1), per_sweep


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="least duration of one chain (s)")
    args = parser.parse_args(argv)
    start = m.initial_trace(m.synthetic_data(150, seed=0), k=1)
    sweeps, per_sweep = _calibrate(start, args.seconds)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores visible, torch "
          f"{torch.__version__}; {CHAINS} chains x {sweeps} sweeps ({per_sweep * 1e3:.1f} ms per sweep, "
          f"about {sweeps * per_sweep:.1f} s per chain)")
    serial_s, serial, _ = _run(start, sweeps, "serial")
    serial_cpu, text = _per_chain(serial)
    print(f"serial (one process):            {serial_s:6.2f} s; {text}")
    began = time.perf_counter()
    client = distributed.local_client(n_workers=2)
    print(f"local cluster start-up (2 workers): {time.perf_counter() - began:6.2f} s (reported separately)")
    workers = list(client.run(os.getpid).values())
    workers_before = _process_cpu(workers)
    cluster_s, cluster, here_cpu = _run(start, sweeps, None)
    workers_cpu = _process_cpu(workers) - workers_before
    cluster_cpu, text = _per_chain(cluster)
    print(f"local cluster (2 workers):       {cluster_s:6.2f} s; {text} in workers, "
          f"{sum(cluster_cpu) / sum(serial_cpu) - 1:+.0%} vs serial")
    dask_in_workers = workers_cpu - sum(t.thread_cpu for t in cluster.timings)
    print(f"  Dask's own CPU during the run: this process (client, scheduler, nannies) {here_cpu:.2f} s, "
          f"the workers outside the chains' threads {dask_in_workers:.2f} s "
          f"({(here_cpu + dask_in_workers) / cluster_s:.3f} of a core)")
    same = [t.score for t in serial.traces] == [t.score for t in cluster.traces] and serial.scores == cluster.scores
    print(f"same samples as serial: {same}")
    print(f"speed-up: {serial_s / cluster_s:.2f}x (target on 2 free cores: >= 1.6x)")
    distributed.close_local_client()
    return 0 if same else 1


if __name__ == "__main__":      # the cluster's worker processes re-import this file: keep the guard
    sys.exit(main())
