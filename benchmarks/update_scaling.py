"""Incremental update against full re-execution, as the model grows.

Model: a slope plus ``il.Map`` over ``n`` data points, each with an outlier flag
and an observation (2 choices per element). The move is the one MCMC makes all
the time: change one element (here, constrain ``("data", n // 2, "y")``).

* incremental -- ``trace.update({("data", i, "y"): v})``: re-runs one element and
  re-scores one choice (the rest of the Map is reused as is);
* full        -- ``model.generate(args, all choices with the change)``: what an
  engine without incremental update does -- re-run and re-score everything.

Both are measured in the same run on the same traces; the table reports the
median time of several repetitions, the ratio, and the work counted by
``il.count_work()`` (log-density evaluations, @gen bodies run).

Run: ``python benchmarks/update_scaling.py`` (about 40 s, most of it building and
re-executing the 100,000-element model; ``--quick`` stops at 10,000).
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

import imcmc_lab as il

torch.set_num_threads(1)   # tiny tensors: one intra-op thread is fastest


@il.gen
def point(x):
    if il.bernoulli(0.1) @ "outlier":
        return il.normal(0.0, 10.0) @ "y"
    return il.normal(2.0 * x, 1.0) @ "y"


@il.gen
def regression(xs):
    il.normal(0.0, 1.0) @ "slope"
    return il.Map(point)(xs) @ "data"


def timed(fn, reps):
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main(sizes):
    torch.manual_seed(0)
    rows = []
    for n in sizes:
        xs = torch.linspace(-1.0, 1.0, n, dtype=torch.float64)
        trace = regression.simulate(xs)
        address = ("data", n // 2, "y")
        change = {address: 0.5}
        all_choices = trace.get_choices().set(address, 0.5)

        def counted(fn, counts):
            def run():
                with il.count_work() as work:
                    out = fn()
                counts.append(work)
                return out
            return run

        counts_inc, counts_full = [], []
        t_inc, (new_inc, w_inc, _) = timed(counted(lambda: trace.update(change), counts_inc), 21)
        t_full, (new_full, _) = timed(
            counted(lambda: regression.generate((xs,), all_choices), counts_full),
            3 if n <= 1_000 else 1)
        work_inc, work_full = counts_inc[-1], counts_full[-1]

        # Both paths must agree on the result.
        assert new_inc.get_choices() == new_full.get_choices()
        assert abs(new_inc.score - new_full.score) <= 1e-9 * max(1.0, abs(new_full.score))
        assert abs(w_inc - (new_full.score - trace.score)) <= 1e-9 * max(1.0, abs(trace.score))
        rows.append((n, t_inc, t_full, work_inc, work_full))

    print(f"{'Map size':>9} | {'incremental update':>18} | {'full re-execution':>17} | {'speed-up':>8} |"
          f" {'log-densities (inc / full)':>26} | {'@gen runs (inc / full)':>22}")
    print("-" * 118)
    for n, t_inc, t_full, w_inc, w_full in rows:
        print(f"{n:>9,} | {t_inc * 1e3:>15.3f} ms | {t_full * 1e3:>14.1f} ms | {t_full / t_inc:>7.0f}x |"
              f" {w_inc.logpdf_evaluations:>11,} / {w_full.logpdf_evaluations:<12,} |"
              f" {w_inc.executions:>9,} / {w_full.executions:<10,}")
    print("\nincremental: trace.update({('data', n//2, 'y'): 0.5}); "
          "full: regression.generate(args, every choice). Median wall time, same run.")


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    main([100, 1_000, 10_000] if quick else [100, 1_000, 10_000, 100_000])
