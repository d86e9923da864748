"""Split/merge steps per second: one choice per data point (as the paper writes it) vs one ``iid`` choice.

The 1-vs-2-cluster model (:mod:`imcmc_lab.examples.two_clusters`) and Fig. 1's
infinite mixture (:mod:`imcmc_lab.examples.mixture`), each in two spellings run in
the same process, interleaved (A, B, A, B, ...: the machine's load hits both alike):

* ``iid``: the data as one vectorised choice ``"x"``;
* per point: ``for i in range(1, n + 1): mixture_of_normals(...) @ ("x", i)``
  (:mod:`imcmc_lab.examples.per_point`), which ``@gen`` runs as one indexed family.

``--authors PATH``: a checkout of the paper authors' PyTorch code for automated
involutive MCMC (``git clone https://github.com/probcomp/autoimcmc``). It is not
vendored; without it that column is skipped. With it, this script runs their
1-vs-2-cluster example (one choice per data point) through ``--authors-command``, a
shell command run in ``PATH`` that prints one line ``steps_per_second N`` for the data
size in ``$N``; by default :mod:`authors_two_clusters` (ours, calling their code), so
the comparison is in one run.

Times are process time (``time.process_time``), as in the authors' driver (``--wall``: wall-clock time).

Run: ``python benchmarks/peers.py [--quick] [--ns 4 100 1000] [--wall] [--authors PATH]``;
results in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import shlex
import statistics
import subprocess
import sys
import time

import torch

import imcmc_lab as il
from imcmc_lab.examples import mixture, per_point, two_clusters

torch.set_num_threads(1)

NS = (100, 1000, 10000)
MOVES = {4: 200, 100: 100, 1000: 60, 10000: 10}     # per round; other n: 100
AUTHORS_DRIVER = pathlib.Path(__file__).resolve().parent / "authors_two_clusters.py"


def two_cluster_traces(n, seed):
    data = mixture.synthetic_data(n, means=(-2.0, 2.0), seed=seed)
    start = {"k": 1, ("mu", 1): 0.0}
    torch.manual_seed(seed)
    iid = two_clusters.two_clusters.generate((n,), {**start, "x": data})[0]
    loop = per_point.two_clusters_per_point.generate((n,), {**start, **per_point.observations(data)})[0]
    kernel = il.InvolutiveKernel(two_clusters.split_aux, (), two_clusters.split_merge)
    return kernel, iid, loop


def fig1_traces(n, seed, k=8):
    data = mixture.synthetic_data(n, seed=seed)
    torch.manual_seed(seed)
    iid = mixture.gmm.generate((n,), {"x": data, "k": k})[0]
    same = {a: iid[a] for a in ["k", "weights"] + [(s, j) for s in ("mu", "var") for j in range(1, k + 1)]}
    loop = per_point.gmm_per_point.generate((n,), {**same, **per_point.observations(data)})[0]
    kernel = il.InvolutiveKernel(mixture.split_merge_aux, (), mixture.split_merge)
    return kernel, iid, loop


def interleaved(kernel, traces, moves, reps, clock=time.process_time):
    """Seconds per move of each trace's chain (the state evolves), median over ``reps``
    rounds; within a round the spellings alternate, in turn first (A B, B A, ...)."""
    times = [[] for _ in traces]
    states = list(traces)
    for r in range(reps):
        for i in (range(len(states)) if r % 2 == 0 else reversed(range(len(states)))):
            torch.manual_seed(len(times[i]))
            start = clock()
            for _ in range(moves):
                states[i], _ = kernel(states[i])
            times[i].append((clock() - start) / moves)
    return [statistics.median(t) for t in times]


def authors_rate(path, command, n):
    if path is None:
        return None
    out = subprocess.run(command, shell=True, cwd=path, env={**os.environ, "N": str(n)},
                         capture_output=True, text=True, timeout=3600)
    for line in out.stdout.splitlines():
        if line.startswith("steps_per_second"):
            return float(line.split()[1])
    print(f"   (the authors' code printed no steps_per_second line for n = {n}: {out.stderr[-300:]!r})")
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--wall", action="store_true",
                        help="time with time.perf_counter instead of process time")
    parser.add_argument("--authors", type=pathlib.Path, default=None,
                        help="a checkout of the paper authors' PyTorch code (not vendored)")
    parser.add_argument("--authors-command", default=None,
                        help="run in --authors with $N set; prints 'steps_per_second X' "
                             "(default: benchmarks/authors_two_clusters.py with this Python)")
    parser.add_argument("--ns", type=int, nargs="+", default=list(NS), help="data sizes")
    args = parser.parse_args(argv)
    if args.authors is not None and not args.authors.is_dir():
        print(f"{args.authors} is not a directory: the authors' column is skipped")
        args.authors = None
    if args.authors is not None and not args.authors_command:
        args.authors_command = f"{shlex.quote(sys.executable)} {shlex.quote(str(AUTHORS_DRIVER))} ."
    reps = 3 if args.quick else 7
    clock = time.perf_counter if args.wall else time.process_time
    print(f"imcmc-lab per-point vs iid -- {platform.machine()}, Python {platform.python_version()}, "
          f"torch {torch.__version__} (1 thread), {time.strftime('%Y-%m-%d')}")
    for title, make in (("1-vs-2 clusters, split/merge", two_cluster_traces),
                        ("Fig. 1 (K = 8 at the start), split/merge", fig1_traces)):
        print(f"\n{title}: steps per second, median of {reps} interleaved rounds")
        print(f"   {'n':>6} {'authors':>9} {'per point':>10} {'iid':>8} {'per point / iid (time)':>23}"
              f"{'  per point / authors  iid / authors (rates)' if args.authors and make is two_cluster_traces else ''}")
        for n in args.ns:
            kernel, iid, loop = make(n, seed=n)
            moves = MOVES.get(n, 100) // (2 if args.quick else 1)
            t_iid, t_loop = interleaved(kernel, [iid, loop], moves, reps, clock)
            theirs = authors_rate(args.authors, args.authors_command, n) if make is two_cluster_traces else None
            shown = f"{theirs:>9.1f}" if theirs is not None else f"{'-':>9}"
            versus = f" {1 / t_loop / theirs:>19.0f}x {1 / t_iid / theirs:>13.0f}x" if theirs else ""
            print(f"   {n:>6} {shown} {1 / t_loop:>10.0f} {1 / t_iid:>8.0f} {t_loop / t_iid:>22.2f}x{versus}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
