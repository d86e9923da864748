"""NP-DHMC on the thesis's nonparametric benchmarks (C. Mak, "Nonparametric Involutive Markov
Chain Monte Carlo", Ch. 7; Mak, Zaiser, Ong, "Nonparametric Hamiltonian Monte Carlo", ICML 2021),
printed next to the figures the thesis reports (its Table 7.1 and Sec. 7.5, rerun from the
reference code):

1. Gaussian mixture with a Poisson number of components (``examples.nonparametric.gmm``):
   L = 25, ε = 0.05; test LPPD and acceptance for NP-DHMC (α = 1) and look-ahead NP-DHMC
   (α = 0.5, K = 2). Thesis: LPPD −675.59 ± 0.37 (10 runs × 1,000 samples), acceptance
   75.6%, 88.6% with K = 2; the true parameters give −674.81.
2. Dirichlet-process mixture by stick breaking (``dpmm``): L = 20, ε = 0.05, α = 1; the
   sticks continuous coordinates (plain NP-HMC: the model has no discrete choice), or with
   ``--dpmm-discontinuous`` discontinuous ones with Laplace momenta, as the thesis moves them.
   Thesis: LPPD −676.11 ± 0.43 (10 runs × 150 samples, all kept).
3. The geometric program (L = 5, ε = 0.1): NP-DHMC iterations per second (CPU time). The
   reference code runs about 6-8 iterations per second on the project's 2-core machine.
4. The random walk (L = 5, ε = 0.1, all coordinates discontinuous): ESS of the start over
   10 runs × 960 kept samples for persistence α = 1, 0.5, 0.1 (same number of gradient
   evaluations: 5 per move, no look-ahead). Thesis: 962 (α = 1) vs 2,792 (α = 0.1). Each run
   starts from one of 300 draws of the program given the observation, resampled by their
   weights, and discards ``--walk-burn`` moves. (A plain draw can be a walk that reaches
   the distance limit: its log-likelihood, about -3960, is flat in that region, and one such
   run of 10 stayed there for all 1,460 moves, for α = 1 as for α = 0.1.) ESS: ArviZ's bulk ESS, per run, summed over runs; and of
   the 10 runs pooled as chains (which also counts the disagreement between runs), also with
   ``method="mean"`` (NumPyro's estimator, which the thesis used); and the acceptance rate.
   ``--walk-coordinates normal`` runs the N(0, 1) coordinates instead of the default unit
   ones; ``--walk-step-size`` and ``--walk-steps`` set ε and L (also for ``walk-energy``).
5. ``--only walk-sweep``: ESS(α = 0.1) / ESS(α = 1) for each ε of ``--walk-sweep`` (L =
   ``--walk-steps`` for both α, so the same gradient evaluations), summed over runs and
   pooled with ``method="mean"``, each with a 5-95% bootstrap interval over runs, and the
   acceptance rates. A unit coordinate moves the start (uniform(0, 3)) by 3ε in value per
   update, the steps (uniform(-1, 1)) by 2ε; the reference code, in native coordinates,
   moves both by ε: at ε = 0.1/3 our start takes the thesis's steps (0.1 in value, 0.5 per
   trajectory), and persistence gains as ε shrinks relative to the posterior's width.
   ``--walk-scale value`` (for ``walk``, ``walk-sweep`` and ``walk-energy``) gives the
   kernel ``step_scale={"start": 1/3, "step": 1/2}``, 1 / (hi - lo) of each uniform: ε is
   then a displacement in value for every coordinate, as the reference code moves them
   (the start and each step 0.1 in value per update at ε = 0.1); ``unit`` (the default)
   gives no step scale.

LPPD = Σ over the 50 test points of log (mean over the kept samples of the point's mixture
density), the first 10% of each run discarded (the reference code's default burn-in; its
ICML 2022 runs, where the thesis's GMM and DPMM figures come from, keep every sample: each
mixture line also prints that LPPD, "without burn-in"). The ± is the standard deviation over runs. Times are process CPU times, torch on one thread.

Run: ``python benchmarks/nonparametric.py`` (runs of the thesis's length: tens of minutes on
a quiet 2-core machine), or ``--quick`` (1 run, 100 GMM and 40 DPMM moves, 300 geometric,
2 walk runs); ``--only walk`` (or ``mixtures``, ``gmm``, ``dpmm``, ``geometric``, ``walk-sweep``,
``walk-energy``: the walk's autocorrelation times of the start and of the energy; ``dpmm-prior``: the DPMM
without data, whose number of sticks is exactly 1 + Poisson(5 log 100)) runs one part; ``--runs``,
``--gmm-moves``, ``--dpmm-moves`` shorten the mixture runs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import imcmc_lab as il
from imcmc_lab.examples.nonparametric import GMM_STD, MixtureData, dpmm, geometric, gmm, gmm_data, walk

THESIS = {"gmm": "-675.59 ± 0.37, acc 75.6%", "gmm_k2": "acc 88.6%", "dpmm": "-676.11 ± 0.43",
          "true": "-674.81", "geometric": "6-8 it/s (reference code)",
          "walk": {1.0: "962", 0.1: "2,792"}}
WALK_SCALES = {"unit": None, "value": {"start": 1 / 3, "step": 1 / 2}}    # value: 1 / (hi - lo)


def _pointwise(trace, test):
    record = trace.flat_records()[("data",)]
    return MixtureData(record.dist.weights, record.dist.means, GMM_STD).pointwise(test).numpy()


def _lppd(per_point):
    """Σ over test points of log (mean over samples of the point's density); per_point is
    (samples, test points) of log-densities."""
    top = per_point.max(axis=0)
    return float((top + np.log(np.exp(per_point - top).mean(axis=0))).sum())


def mixture_run(model, moves, kernel, train, test, seed):
    """One chain from a prior draw: (LPPD after a 10% burn-in, LPPD of all samples,
    acceptance, CPU seconds)."""
    torch.manual_seed(seed)
    trace, _ = model.generate((train,), {"data": train})
    start, kept = time.process_time(), []
    for _ in range(moves):
        trace, _ = kernel(trace)
        kept.append(_pointwise(trace, test))
    seconds = time.process_time() - start
    per_point = np.stack(kept)                               # (samples, test points)
    return _lppd(per_point[moves // 10:]), _lppd(per_point), kernel.accepted / kernel.proposed, seconds


def mixtures(runs, gmm_moves, dpmm_moves, which=("gmm", "dpmm"), sticks_discontinuous=False):
    means, train, test = gmm_data()
    true = MixtureData(torch.full((9,), 1 / 9, dtype=torch.float64), list(means), GMM_STD)
    print(f"true-parameter LPPD {float(true.pointwise(test).sum()):.2f} (thesis {THESIS['true']})")
    settings = [("gmm NP-DHMC α=1", gmm, il.select("k", "mean"), gmm_moves, dict(step_size=0.05, n_steps=25),
                 THESIS["gmm"]),
                ("gmm look-ahead α=0.5 K=2", gmm, il.select("k", "mean"), gmm_moves,
                 dict(step_size=0.05, n_steps=25, persistence=0.5, lookahead=2), THESIS["gmm_k2"]),
                ("dpmm NP-HMC α=1", dpmm, il.select("stick", "mean"), dpmm_moves,
                 dict(step_size=0.05, n_steps=20), THESIS["dpmm"]),
                ("dpmm NP-DHMC α=1, sticks disc.", dpmm, il.select("stick", "mean"), dpmm_moves,
                 dict(step_size=0.05, n_steps=20, discontinuous=il.select("stick")), THESIS["dpmm"])]
    for label, model, selection, moves, options, thesis in settings:
        if label.split()[0] not in which or ("disc." in label) != sticks_discontinuous and label[0] == "d":
            continue
        results = [mixture_run(model, moves, il.NPHMC(selection, **options), train, test, seed)
                   for seed in range(runs)]
        lppds, no_burn, accs, secs = (np.array(x) for x in zip(*results))
        spread = f" ± {lppds.std(ddof=1):.2f}" if runs > 1 else ""
        print(f"{label:28s} {moves:5d} moves × {runs}: LPPD {lppds.mean():8.2f}{spread}, acceptance "
              f"{100 * accs.mean():5.1f}%, {secs.mean() / moves * 1000:6.1f} ms/move   (thesis {thesis})")
        print(f"{'':28s} per run {' '.join(f'{x:.2f}' for x in lppds)}; without burn-in {no_burn.mean():.2f}"
              + (f" ± {no_burn.std(ddof=1):.2f}" if runs > 1 else ""), flush=True)


def dpmm_prior(moves=300, alpha=5.0):
    """The DPMM with no data: the chain's mean number of sticks against the exact prior mean
    1 + α log 100 (the number of sticks is 1 + Poisson(α log 100)). The reference code's
    NP-DHMC, run the same way on its own ``dp``, averages 1.6 sticks (see benchmarks/README.md)."""
    import arviz as az

    data = torch.zeros((0, 3), dtype=torch.float64)
    torch.manual_seed(0)
    trace, _ = dpmm.generate((data, alpha), {"data": data})
    kernel, sticks = il.NPHMC(il.select("stick", "mean"), 0.05, 20), []
    for _ in range(moves):
        trace, _ = kernel(trace)
        sticks.append(len(trace.flat_records()[("data",)].dist.weights))
    sticks = np.array(sticks[moves // 10:], dtype=float)
    print(f"dpmm without data, {moves} moves (L=20, ε=0.05): mean number of sticks {sticks.mean():.2f} ± "
          f"{float(az.mcse(sticks[None])):.2f} (exact {1 + alpha * np.log(100):.2f}), acceptance "
          f"{100 * kernel.accepted / kernel.proposed:.1f}%")


def geometric_speed(moves):
    kernel = il.NPHMC(il.select("u"), 0.1, 5, discontinuous=il.select("u"))
    torch.manual_seed(0)
    trace = geometric.simulate(0.2)
    start = time.process_time()
    for _ in range(moves):
        trace, _ = kernel(trace)
    rate = moves / (time.process_time() - start)
    print(f"geometric NP-DHMC (L=5, ε=0.1): {rate:.0f} iterations/s (CPU)   (thesis {THESIS['geometric']})")


def walk_chain(alpha, seed, burn, keep, coordinates="unit", step_size=0.1, n_steps=5, scale="unit"):
    """One walk chain: the kept starts, the gradient evaluations of the kept moves, the total
    energy H at the start of each kept move, and the acceptance rate of the kept moves."""
    torch.manual_seed(seed)
    draws = [walk.generate((), {"distance": 1.1}) for _ in range(300)]     # importance resampling:
    weights = torch.tensor([w for _, w in draws], dtype=torch.float64)       # a start in the posterior's bulk
    trace = draws[int(torch.multinomial(torch.softmax(weights, 0), 1))][0]
    kernel = il.NPHMC(il.select("start", "step"), step_size, n_steps, discontinuous=il.select("start", "step"),
                      persistence=alpha, coordinates=coordinates, step_scale=WALK_SCALES[scale])
    starts, gradients, energies, accepted = [], 0, [], 0
    for i in range(burn + keep):
        trace, ok = kernel(trace)
        if i >= burn:
            record = kernel.last_record
            starts.append(float(trace["start"]))
            gradients += record.gradient_evaluations
            accepted += ok
            energies.append(-record.energy["loglik"][0] + record.energy["prior"][0] + record.energy["kinetic"][0])
    return starts, gradients, energies, accepted / keep


def walk_energy(moves=3000, alphas=(1.0, 0.5, 0.1), coordinates="unit", step_size=0.1, n_steps=5, scale="unit"):
    """Integrated autocorrelation times (moves / ESS) of the start and of the energy H, one
    chain per α: why persistence helps the walk less than the thesis reports."""
    import arviz as az

    for alpha in alphas:
        starts, _, energies, _ = walk_chain(alpha, 3, 100, moves, coordinates, step_size, n_steps, scale)
        tau = [moves / float(az.ess(np.array(x)[None])) for x in (starts, energies)]
        print(f"walk ({coordinates}, {scale} scale, ε={step_size:g}, L={n_steps}) α={alpha:<4} {moves} moves: autocorrelation time of the start {tau[0]:.1f} moves, "
              f"of H {tau[1]:.1f} moves", flush=True)


def walk_stats(alpha, runs, burn, keep=960, coordinates="unit", step_size=0.1, n_steps=5, scale="unit"):
    """ESS of the start over ``runs`` chains: per run summed, pooled, pooled with ArviZ's
    ``method="mean"``; with the mean start, acceptance, gradient evaluations and CPU seconds."""
    import arviz as az

    start = time.process_time()
    chains, gradients, _, acceptance = zip(*(walk_chain(alpha, seed, burn, keep, coordinates, step_size, n_steps,
                                                        scale) for seed in range(runs)))
    chains = np.array(chains)
    per_run = np.array([float(az.ess(chains[i:i + 1])) for i in range(runs)])
    return dict(summed=per_run.sum(), per_run=per_run, chains=chains, pooled=float(az.ess(chains)),
                mean=float(az.ess(chains, method="mean")), start=float(chains.mean()),
                acceptance=float(np.mean(acceptance)), gradients=sum(gradients),
                seconds=time.process_time() - start)


def walk_ess(runs, burn, keep=960, alphas=(1.0, 0.5, 0.1), coordinates="unit", step_size=0.1, n_steps=5,
             scale="unit"):
    for alpha in alphas:
        r = walk_stats(alpha, runs, burn, keep, coordinates, step_size, n_steps, scale)
        thesis = THESIS["walk"].get(alpha, "-") if (step_size, n_steps) == (0.1, 5) else "-"
        print(f"walk ({coordinates}, {scale} scale, ε={step_size:g}, L={n_steps}) α={alpha:<4} {runs} × {keep} kept (burn-in {burn}): "
              f"ESS summed over runs {r['summed']:6.0f}, pooled {r['pooled']:5.0f} (method 'mean', as the thesis's "
              f"NumPyro ESS: {r['mean']:5.0f}), mean start {r['start']:.4f} (exact 0.5910), acceptance "
              f"{100 * r['acceptance']:.1f}%, {r['gradients']} gradient evaluations, {r['seconds']:.0f} s   "
              f"(thesis {thesis})", flush=True)


def _ratio_interval(one, low, draws=1000):
    """5-95% bootstrap interval (runs resampled, each α on its own) of the ratios
    ESS(α = 0.1) / ESS(α = 1), summed over runs and pooled with ``method="mean"``."""
    import arviz as az

    rng, summed, pooled = np.random.default_rng(0), [], []
    runs = len(one["per_run"])
    for i in range(draws):
        a, b = rng.integers(runs, size=runs), rng.integers(runs, size=runs)
        summed.append(low["per_run"][b].sum() / one["per_run"][a].sum())
        if i < draws // 5:              # the pooled ESS costs more: fewer draws
            pooled.append(float(az.ess(low["chains"][b], method="mean")) / float(az.ess(one["chains"][a], method="mean")))
    return np.percentile(summed, [5, 95]), np.percentile(pooled, [5, 95])


def walk_sweep(runs, burn, keep=960, coordinates="unit", step_sizes=(0.1 / 3, 0.05, 0.1), n_steps=5, scale="unit"):
    """ESS(α = 0.1) / ESS(α = 1) over step sizes ε, L = ``n_steps`` for both α (the same
    gradient evaluations), with 5-95% bootstrap intervals over runs. With unit coordinates ε
    moves the start (uniform(0, 3)) by 3ε in value per update: ε = 0.1/3 is the thesis's
    reference code's step in the start's value (its steps, uniform(-1, 1), then move 2ε).
    With ``scale="value"`` ε moves the start and each step by ε in value."""
    factor = 1.0 if scale == "value" else 3.0
    start_step = (lambda eps: f"{factor * eps:10.3f}") if coordinates == "unit" else (lambda eps: f"{'-':>10}")
    print(f"walk sweep ({coordinates} coordinates, {scale} scale, L={n_steps}, {runs} × {keep} kept after {burn}, ε jittered ±50%)")
    print(f"{'ε':>7} {'start/step':>10} | {'summed α=1':>10} {'α=0.1':>6} {'ratio [5-95%]':>17} | {'mean α=1':>8} "
          f"{'α=0.1':>6} {'ratio [5-95%]':>17} | {'acc α=1':>7} {'α=0.1':>6} | {'mean start α=1, 0.1':>19} | "
          f"gradient evals", flush=True)
    for eps in step_sizes:
        one, low = (walk_stats(alpha, runs, burn, keep, coordinates, eps, n_steps, scale) for alpha in (1.0, 0.1))
        (s5, s95), (m5, m95) = _ratio_interval(one, low)
        print(f"{eps:7.4f} {start_step(eps)} | {one['summed']:10.0f} {low['summed']:6.0f} "
              f"{low['summed'] / one['summed']:5.2f} [{s5:4.2f}-{s95:4.2f}] | {one['mean']:8.0f} {low['mean']:6.0f} "
              f"{low['mean'] / one['mean']:5.2f} [{m5:4.2f}-{m95:4.2f}] | {100 * one['acceptance']:6.1f}% "
              f"{100 * low['acceptance']:5.1f}% | {one['start']:9.4f} {low['start']:9.4f} | "
              f"{one['gradients']} / {low['gradients']} ({one['seconds'] + low['seconds']:.0f} s)", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=("geometric", "walk", "walk-energy", "walk-sweep", "mixtures", "gmm",
                                           "dpmm", "dpmm-prior"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gmm-moves", type=int, default=1000)
    parser.add_argument("--dpmm-moves", type=int, default=150)
    parser.add_argument("--dpmm-discontinuous", action="store_true",
                        help="DPMM sticks as discontinuous coordinates (the thesis's setting) instead of continuous")
    parser.add_argument("--walk-runs", type=int, default=10)
    parser.add_argument("--walk-burn", type=int, default=100)
    parser.add_argument("--walk-coordinates", choices=("unit", "normal"), default="unit",
                        help="the walk's coordinates: U(0, 1) (the default) or N(0, 1) reference")
    parser.add_argument("--walk-scale", choices=tuple(WALK_SCALES), default="unit",
                        help="value: step_scale 1 / (hi - lo) per uniform, so ε is a displacement in value "
                             "as in the reference code; unit (default): no step scale")
    parser.add_argument("--walk-step-size", type=float, default=0.1, help="the walk's ε (before jitter)")
    parser.add_argument("--walk-steps", type=int, default=5, help="the walk's L (steps per move)")
    parser.add_argument("--walk-sweep", default="0.0333333,0.05,0.1",
                        help="comma-separated step sizes ε for --only walk-sweep")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.only in (None, "geometric"):
        geometric_speed(300 if args.quick else 3000)
    if args.only in (None, "walk"):
        walk_ess(2 if args.quick else args.walk_runs, args.walk_burn, coordinates=args.walk_coordinates,
                 step_size=args.walk_step_size, n_steps=args.walk_steps, scale=args.walk_scale)
    if args.only == "walk-sweep":
        walk_sweep(2 if args.quick else args.walk_runs, args.walk_burn, coordinates=args.walk_coordinates,
                   step_sizes=[float(x) for x in args.walk_sweep.split(",")], n_steps=args.walk_steps,
                   scale=args.walk_scale)
    if args.only == "walk-energy":
        walk_energy(coordinates=args.walk_coordinates, step_size=args.walk_step_size, n_steps=args.walk_steps,
                    scale=args.walk_scale)
    if args.only == "dpmm-prior":
        dpmm_prior(60 if args.quick else 300)
    if args.only in (None, "mixtures", "gmm", "dpmm"):
        which = ("gmm", "dpmm") if args.only in (None, "mixtures") else (args.only,)
        if args.quick:
            mixtures(1, 100, 40, which, args.dpmm_discontinuous)
        else:
            mixtures(args.runs, args.gmm_moves, args.dpmm_moves, which, args.dpmm_discontinuous)


if __name__ == "__main__":
    main()
