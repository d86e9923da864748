"""False-alarm rate of ``il.check_stationarity`` on correct kernels from ``imcmc_lab.examples``.

Each correct kernel is tested ``--runs`` times with different seeds at ``--level``; a
run that fails is a false alarm. The rate should be at most the level (up to binomial
error: the script prints the exact binomial tail probability of seeing that many
failures if the rate were exactly the level). Serial executor, one torch thread.

    python benchmarks/stationarity_false_alarms.py --runs 50 --chains 200 --steps 2
"""

from __future__ import annotations

import argparse
import time

import torch
from scipy import stats

import imcmc_lab as il
from imcmc_lab.examples import coal, soccer, subtle_bugs, two_clusters


def cases():
    """``name -> (model, args, kernel, observations, statistics)``: correct kernels only."""
    return {
        "mixture birth/death (prior)": (subtle_bugs.mixture_prior, (0,), subtle_bugs.birth_death_omitted_factor(True),
                                        None, {"k": lambda t: t["k"], "w1": lambda t: float(t["weights"][0])}),
        "log-walk MH (gamma-Poisson)": (subtle_bugs.gamma_poisson, (5,), subtle_bugs.log_walk_mh("lam", 0.5, True),
                                        ["y"], None),
        "two clusters (split/merge + walk)": (two_clusters.two_clusters, (5,), two_clusters.two_cluster_kernel(),
                                              ["x"], {"k": lambda t: t["k"], "mu1": lambda t: t["mu", 1]}),
        "soccer (jump + walks)": (soccer.soccer, (20,), soccer.soccer_kernel(lam_step=0.2, kap_step=0.05),
                                  ["y"], {"model": lambda t: t["model"], "lam": lambda t: t["lam"]}),
        "coal (Green's moves)": (coal.coal, (coal.LENGTH,), coal.coal_kernel(), ["y"],
                                 {"n": lambda t: t["n"], "g0": lambda t: float(t["g"][0])}),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--chains", type=int, default=200)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--level", type=float, default=0.01)
    parser.add_argument("--only", default=None, help="substring of a case name")
    a = parser.parse_args()
    torch.set_num_threads(1)
    for name, (model, args, kernel, obs, statistics) in cases().items():
        if a.only and a.only not in name:
            continue
        started, failures, pmins = time.perf_counter(), 0, []
        for run in range(a.runs):
            r = il.check_stationarity(model, args, kernel, observations=obs, statistics=statistics,
                                      chains=a.chains, steps=a.steps, level=a.level, seed=1000 + run,
                                      executor="serial")
            failures += not r.passed
            pmins.append(r.min_p_value)
            if r.error:
                print("   error:", r.error)
        tail = stats.binom.sf(failures - 1, a.runs, a.level) if failures else 1.0
        print(f"{name}: {failures}/{a.runs} false alarms at level {a.level} "
              f"(P(>= {failures} | rate = level) = {tail:.3g}); "
              f"{a.chains} chains x {a.steps} steps per run, {time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
