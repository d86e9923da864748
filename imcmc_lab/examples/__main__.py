"""Headless demo: ``python -m imcmc_lab.examples`` (or ``bash run.sh demo``).

The reversible-jump split/merge kernel of the paper's Fig. 1 on an infinite
Gaussian mixture: checks every move with Algorithm 4, shows one recorded
split with every term of its acceptance probability, runs a chain on data from
three well-separated clusters, and prints acceptance rates, the posterior over
the number of clusters and the clusters found.
"""

from __future__ import annotations

import argparse
import collections
import time

import torch

import imcmc_lab as il
from imcmc_lab.examples import mixture as m


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=600, help="sweeps of the kernel (default 600)")
    parser.add_argument("--points", type=int, default=150, help="data points (default 150)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)   # scalar-sized tensors: extra intra-op threads only add overhead
    torch.manual_seed(args.seed)
    started = time.perf_counter()

    means = (-6.0, 0.0, 6.0)
    data = m.synthetic_data(args.points, means=means, seed=args.seed)
    print(f"Data: {args.points} points from 3 clusters at {means} (unit variance).\n")

    print("1. Algorithm 4 on every move (support, dimension, involution; 50 random cases each)")
    moves = [("split/merge", m.split_merge_aux, (), m.split_merge),
             ("swap with last", m.swap_aux, (), m.swap_last),
             ("birth/death", m.birth_death_aux, (), m.birth_death),
             ("move cluster", m.move_cluster_aux, (0.5, 0.3), m.move_cluster),
             ("move weights", m.move_weights_aux, (0.3,), m.move_weights)]
    for name, q, q_args, f in moves:
        report = il.check_involution(m.gmm, (len(data),), q, f, trials=50, q_args=q_args,
                                     observations={"x": data}, seed=args.seed)
        seen = collections.Counter(report.jacobian_sizes)
        sizes = ", ".join(f"{r}x{c} ({n})" for (r, c), n in sorted(seen.items()))
        print(f"   {name:<15} passed {report.trials} trials; reduced Jacobians {sizes}")

    trace = m.initial_trace(data, k=1)
    record = il.involutive_move(trace, m.split_merge_aux, (), m.split_merge)
    print(f"\n2. One split of the single cluster ({'accepted' if record.accepted else 'rejected'}):")
    for name, value in record.terms.items():
        print(f"   {name:>22} = {value: .4f}")
    print(f"   {record.jacobian}")

    print(f"\n3. {args.sweeps} sweeps from k = 1 (swap, split/merge, birth/death, 3 cluster moves, weights)")
    t0 = time.perf_counter()
    chain = il.run_chain(m.mixture_kernel(), m.initial_trace(data), args.sweeps, record={"k": "k"},
                         progress=not args.no_progress)
    seconds = time.perf_counter() - t0
    moves_per_sweep = 7
    print(f"   {len(chain)} sweeps in {seconds:.1f} s "
          f"({len(chain) * moves_per_sweep / seconds:.0f} moves/s)")
    for name, rate in chain.acceptance_rates().items():
        print(f"   acceptance {name:<13} {rate:.3f}")
    ks = chain.values("k")[len(chain) // 4:]
    counts = collections.Counter(ks)
    print("   posterior over the number of clusters (after 25% burn-in):")
    for k in sorted(counts):
        share = counts[k] / len(ks)
        print(f"     k = {k}: {share:.3f}  {'#' * round(40 * share)}")
    print("   last state (weight, mean, variance), by mean:")
    for w, mu, var in m.cluster_summary(chain.traces[0]):
        print(f"     w = {w:.3f}  mu = {mu: .3f}  var = {var:.3f}")
    print(f"\nDone in {time.perf_counter() - started:.1f} s.")


if __name__ == "__main__":
    main()
