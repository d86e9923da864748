"""SMC and PGAS on traces against hand-written NumPy versions of the same algorithms, same run.

Model: the linear-Gaussian state-space model of :mod:`imcmc_lab.examples.sequential`
(``x_t = 0.9 x_{t-1} + N(0, 1)``, ``y_t ~ N(x_t, 0.5^2)``), ``T`` generations. In one run:

1. SMC: ``il.smc(steps, n)`` (systematic resampling at ESS < n/2) against a NumPy bootstrap
   filter doing the same (vectorised over particles), at 10, 100 and 1,000 particles;
   particle-steps per second (n T / time) and the engine's share of the NumPy speed.
   Both log Z estimates are printed beside the Kalman filter's value as a sanity check.
2. PGAS: one ``il.PGAS(steps, n)`` sweep against a NumPy conditional SMC with ancestor
   sampling (ancestor weight ``w_{t-1}^l N(x'_t; a x_{t-1}^l, sigma)``), and the cost of a
   PGAS sweep over an engine SMC sweep (issue 19's target: below 3x).
3. The paper's linear dynamical system benchmark in short form (``--lds-T`` steps instead
   of 100, D = 36): the rate at which the parameters (g, q) change per sweep under PGAS
   and under conditional SMC (PG), 10 particles, same start.

Times are process CPU times with torch pinned to one thread, after one small untimed warm-up
run of each algorithm; engine and reference are timed in alternated rounds (best rate of each,
median of the per-round ratios); the load average is printed at the start and the end. Ratios
are what to read: the absolute numbers depend on how loaded the machine is.

Run: ``python benchmarks/smc.py`` (a few minutes), or ``--quick`` (T = 20, fewer sweeps).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

import imcmc_lab as il
from imcmc_lab.examples import sequential as sq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from reference.kalman import kalman  # noqa: E402  (the tests' independent Kalman filter)

A, SIGMA, NOISE = 0.9, 1.0, 0.5


def _normal_logpdf(x, mean, std):
    return -0.5 * ((x - mean) / std) ** 2 - math.log(std) - 0.5 * math.log(2 * math.pi)


def _lse(v):
    m = v.max()
    return m + math.log(np.exp(v - m).sum())


def _systematic(rng, log_w, n):
    w = np.exp(log_w - log_w.max())
    cdf = np.cumsum(w / w.sum())
    cdf[-1] = 1.0
    return np.searchsorted(cdf, (rng.random() + np.arange(n)) / n)


def numpy_smc(ys, n, rng):
    """Bootstrap filter, systematic resampling when ESS < n / 2; returns log Z."""
    log_w, x, log_z = np.zeros(n), np.zeros(n), 0.0
    for t, y in enumerate(ys):
        if t > 0:
            w = np.exp(log_w - log_w.max())
            if w.sum() ** 2 / (w ** 2).sum() < 0.5 * n:
                x, log_w = x[_systematic(rng, log_w, n)], np.zeros(n)
        previous = _lse(log_w)
        x = (A * x if t > 0 else 0.0) + SIGMA * rng.standard_normal(n)
        log_w = log_w + _normal_logpdf(y, x, NOISE)
        log_z += _lse(log_w) - previous
    return log_z


def numpy_pgas(ys, n, retained, rng):
    """One conditional SMC sweep with ancestor sampling (multinomial); returns the new path."""
    T = len(ys)
    paths = np.zeros((n, T))
    paths[0] = retained
    paths[1:, 0] = SIGMA * rng.standard_normal(n - 1)
    log_w = _normal_logpdf(ys[0], paths[:, 0], NOISE)
    for t in range(1, T):
        w = np.exp(log_w - log_w.max())
        ancestors = rng.choice(n, n - 1, p=w / w.sum())
        as_w = log_w + _normal_logpdf(retained[t], A * paths[:, t - 1], SIGMA)
        p = np.exp(as_w - as_w.max())
        a0 = rng.choice(n, p=p / p.sum())
        paths = np.concatenate([paths[a0:a0 + 1], paths[ancestors]])
        paths[0, t] = retained[t]
        paths[1:, t] = A * paths[1:, t - 1] + SIGMA * rng.standard_normal(n - 1)
        log_w = _normal_logpdf(ys[t], paths[:, t], NOISE)
    w = np.exp(log_w - log_w.max())
    return paths[rng.choice(n, p=w / w.sum())]


def _cpu(fn, repeats):
    began = time.process_time()
    for _ in range(repeats):
        out = fn()
    return (time.process_time() - began) / repeats, out


def _pairs(first, second, rounds):
    """Alternated timings of two ``(fn, repeats)``: ``(best first, best second, median of the
    per-round ratios second/first, first's last output)`` in CPU seconds per call."""
    a_times, b_times, ratios = [], [], []
    for _ in range(rounds):
        a, out = _cpu(*first)
        b, _ = _cpu(*second)
        a_times.append(a)
        b_times.append(b)
        ratios.append(b / a)
    return min(a_times), min(b_times), float(np.median(ratios)), out


def _rate_columns(n, T, engine_s, numpy_s, ratio):
    return f"{n:>9} {n * T / engine_s:>15,.0f} {n * T / numpy_s:>14,.0f} {ratio:>12.2%}"


RATE_HEADER = f"{'particles':>9} {'engine steps/s':>15} {'numpy steps/s':>14} {'engine/numpy':>13}"


def smc_rows(ys, counts, rounds):
    steps, T = sq.linear_gaussian_steps(ys), len(ys)
    rng = np.random.default_rng(0)
    print(f"\n1. SMC, T = {T} (Kalman log Z {kalman(ys)[0]:.3f}); {rounds} alternated rounds, best "
          f"rates, median ratio; last column: the per-particle path (batch=False), one run")
    print(f"{RATE_HEADER} {'log Z engine':>13} {'log Z numpy':>12} {'per-particle steps/s':>21}")
    for n in counts:
        engine_s, numpy_s, ratio, state = _pairs((lambda: il.smc(steps, n), max(1, 100 // n)),
                                                 (lambda: numpy_smc(ys, n, rng), max(3, 1000 // n)), rounds)
        slow = ""
        if n <= 100:
            slow_s, _ = _cpu(lambda: il.smc(steps, n, batch=False), 1)
            slow = f"{n * T / slow_s:,.0f}"
        print(f"{_rate_columns(n, T, engine_s, numpy_s, ratio)} {state.log_ml:>13.3f} "
              f"{_numpy_log_z(ys, n, rng):>12.3f} {slow:>21}")


def _numpy_log_z(ys, n, rng):
    return numpy_smc(ys, n, rng)


def pgas_rows(ys, counts, sweeps, rounds):
    steps, T = sq.linear_gaussian_steps(ys), len(ys)
    rng = np.random.default_rng(1)
    print(f"\n2. PGAS sweep, T = {T}; {rounds} alternated rounds (PGAS sweeps, SMC sweeps, NumPy)")
    print(f"{RATE_HEADER} {'PGAS/SMC sweep':>15}")
    for n in counts:
        trace = il.smc(steps, n).sample()
        kernel = il.PGAS(steps, n)

        def sweep():
            nonlocal trace
            trace, _ = kernel.step(trace)
        engine_s, smc_s, ratio, _ = _pairs((sweep, sweeps), (lambda: il.smc(steps, n, ess_threshold=1.0), sweeps),
                                           rounds)
        retained = np.array([float(trace["states", t, "x"]) for t in range(T)])
        numpy_s, _ = min(_cpu(lambda: numpy_pgas(np.asarray(ys), n, retained, rng), max(3, 1000 // n))
                         for _ in range(rounds))
        print(f"{_rate_columns(n, T, engine_s, numpy_s, numpy_s / engine_s)} {1 / ratio:>14.2f}x")


def lds_rates(T, sweeps):
    C, _, ys = sq.simulate_lds(D=36, T=T, q=0.1, r=0.01, seed=0)
    steps = sq.lds_steps(ys, C)
    torch.manual_seed(2)
    start = il.smc(steps, 10).sample()
    print(f"\n3. The paper's LDS benchmark, short form: D = 36, T = {T}, 10 particles, {sweeps} sweeps")
    for kernel in (il.PGAS(steps, 10), il.PG(steps, 10)):
        began = time.process_time()
        chain = il.run_chain(kernel, start, sweeps, record=["g", "q"], progress=False)
        g = np.array([float(s["g"]) for s in chain.samples[0]])
        rate = float(np.mean(g[1:] != g[:-1]))
        print(f"   {kernel.name:<18} theta update rate {rate:.2f}   "
              f"({(time.process_time() - began) / sweeps:.2f} s per sweep)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="T = 20, fewer sweeps")
    parser.add_argument("--T", type=int, default=None, help="generations (default 50; 20 with --quick)")
    parser.add_argument("--lds-T", type=int, default=None, help="LDS steps (default 25; 10 with --quick)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    T = args.T or (20 if args.quick else 50)
    print(f"python {platform.python_version()}, torch {torch.__version__}, {platform.machine()}; "
          f"CPU times, torch on one thread")
    print(f"load average {_load()} (start)")
    _, ys = sq.simulate_linear_gaussian(T)
    _warm_up(ys)
    rounds = 3 if args.quick else 7
    smc_rows(ys, (10, 100, 1000), rounds)
    pgas_rows(ys, (10, 100) if args.quick else (10, 100, 1000), 2 if args.quick else 3, rounds)
    lds_rates(args.lds_T or (10 if args.quick else 25), 20 if args.quick else 40)
    print(f"\nload average {_load()} (end)")


def _load():
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def _warm_up(ys):
    """One small untimed run of each algorithm, so the tables time steady-state work, not the
    first call's one-off costs (source parsing for loop lowering, caches)."""
    steps = sq.linear_gaussian_steps(ys[:5])
    trace = il.smc(steps, 10).sample()
    il.PGAS(steps, 10).step(trace)


if __name__ == "__main__":
    main()
