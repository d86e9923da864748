"""Compiled transforms on the mixture cycle: keys, hits and misses per transform, and the
one-time cost of learning (traces, builds), in process time.

Run: ``PYTHONPATH=$PWD python benchmarks/compiled_transform.py [n K sweeps]`` (default
100 8 300): ``mixture_kernel()`` chained ``sweeps`` times from a seeded start.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from imcmc_lab.examples import mixture as m
from imcmc_lab.transform.compiled import cache

torch.set_num_threads(1)


def timed(store, fn):
    """``fn`` with its process time per call appended to ``store``."""
    def wrapper(*args):
        start = time.process_time()
        try:
            return fn(*args)
        finally:
            store.append(time.process_time() - start)
    return wrapper


def main(argv):
    n, K, sweeps = (int(a) for a in (argv + ["100", "8", "300"][len(argv):]))
    costs = {"trace": [], "build": []}
    cache.trace_once = timed(costs["trace"], cache.trace_once)
    cache.build = timed(costs["build"], cache.build)
    torch.manual_seed(n)
    trace, _ = m.gmm.generate((n,), {"x": m.synthetic_data(n, seed=n), "k": K})
    kernel = m.mixture_kernel()
    start = time.process_time()
    for _ in range(sweeps):
        trace, _ = kernel(trace)
    total = time.process_time() - start
    print(f"n = {n}, K = {K}, {sweeps} sweeps of mixture_kernel(): {total:.2f} s")
    for f in (m.split_merge, m.swap_last, m.birth_death, m.move_cluster, m.move_weights):
        print(f"  {f.name:>13}: {f.compiled!r}")
    for name, values in costs.items():
        if values:
            print(f"  {name}: {len(values)} calls, median {statistics.median(values) * 1e3:.2f} ms, "
                  f"max {max(values) * 1e3:.1f} ms, {sum(values):.2f} s in all")


if __name__ == "__main__":
    main(sys.argv[1:])
