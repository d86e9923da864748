"""Headless demo: ``python -m imcmc_lab.examples`` (or ``bash run.sh demo``).

Checks the split/merge involution of the one-vs-two cluster model (paper
Sec. 4.2.1) with Algorithm 4, shows one recorded move, runs a chain on data
from two clusters, and prints acceptance rates and the posterior over k.
"""

from __future__ import annotations

import argparse
import time

import torch

import imcmc_lab as il
from imcmc_lab.examples import two_clusters


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)

    # Data: 20 points, half around -1.2, half around +1.2.
    data = torch.cat([torch.randn(10, dtype=torch.float64) - 1.2, torch.randn(10, dtype=torch.float64) + 1.2])
    model, q, f = two_clusters.two_clusters, two_clusters.split_aux, two_clusters.split_merge

    print("1. Checking the split/merge transform (support, dimension, involution) ...")
    print("  ", il.check_involution(model, (len(data),), q, f, trials=100, observations={"x": data}))

    trace = two_clusters.initial_trace(data)
    record = il.involutive_move(trace, q, (), f)
    print("\n2. One move from k = 1:", "accepted" if record.accepted else "rejected")
    for name, value in record.terms.items():
        print(f"   {name:>22} = {value: .4f}")
    print("  ", record.jacobian)

    print(f"\n3. Running {args.steps} steps (split/merge + random walk on the means) ...")
    start = time.perf_counter()
    chain = il.run_chain(two_clusters.two_cluster_kernel(), trace, args.steps,
                         record={"k": "k"}, progress=not args.no_progress)
    seconds = time.perf_counter() - start
    ks = chain.values("k")[len(chain) // 10:]
    print(f"   {len(chain)} steps in {seconds:.1f} s ({len(chain) / seconds:.0f} steps/s)")
    for name, rate in chain.acceptance_rates().items():
        print(f"   acceptance {name:>14}: {rate:.3f}")
    for k in (1, 2):
        share = sum(1 for v in ks if v == k) / len(ks)
        print(f"   P(k = {k} | data) ≈ {share:.3f}  {'#' * round(40 * share)}")


if __name__ == "__main__":
    main()
