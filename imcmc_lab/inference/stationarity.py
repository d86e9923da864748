"""Does a kernel leave its target invariant? Geweke's "getting it right" test.

Algorithm 4 (``check_involution``) catches a transform that is not an involution.
It cannot catch a kernel that is a perfect involution with a wrong auxiliary
density, a hand-derived acceptance ratio that omits a factor, or a custom MH
proposal whose reverse density is wrong. Stationarity can: if ``K`` leaves
``p(x | y)`` invariant, then starting from an exact joint draw ``(x, y) ~ p`` and
applying ``K`` (on ``x`` given ``y``) leaves the draw distributed as the prior
(Geweke 2004, "Getting it right"; Cook, Gelman and Rubin 2006).

:func:`check_stationarity` runs ``chains`` independent chains, each from its own
exact draw ``model.simulate(*args)``, for ``steps`` steps of the kernel (with
``observations``, each step is followed by a fresh draw of the observed choices
given the latent ones: Geweke's successive-conditional simulator, so the kernel
is tested on many data sets). It compares each statistic of the chains' final
states with the same statistic of ``chains`` *independent* exact draws -- two
independent samples from one distribution under the null, so the tests have
their nominal level exactly: a chi-square test of homogeneity for
integer-valued statistics, the two-sample Kolmogorov-Smirnov test otherwise.
The p-values are corrected for the number of statistics by Holm's method.
"""

from __future__ import annotations

import html
import math
import re
import time

import numpy as np
import torch

from ..core.address import normalize_address
from ..core.choicemap import select
from .distributed import ChainsFailed, run_chains
from .kernels import Kernel, as_kernel, cycle

__all__ = ["check_stationarity", "StationarityResult", "ResampleObservations", "homogeneity_p_value",
           "holm"]

#: pooled categories of a chi-square test hold at least this many values of both samples together
MIN_POOLED_COUNT = 10


class ResampleObservations(Kernel):
    """Draw the observed choices afresh given the latent ones (``trace.regenerate``): the
    data half of Geweke's successive-conditional simulator. Valid when nothing in the
    model depends on the observed values (they are leaves)."""

    def __init__(self, observations):
        super().__init__("resample observations")
        self.selection = select(*observations)

    def step(self, trace):
        return trace.regenerate(self.selection)[0], True


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error control, any dependence)."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p)
    adjusted = np.empty_like(p)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def _is_discrete(values) -> bool:
    finite = values[np.isfinite(values)]
    return finite.size > 0 and bool(np.all(finite == np.round(finite)))


def _pooled_table(before, after):
    """Counts of each value in both samples, neighbouring values pooled until every pooled
    category holds ``MIN_POOLED_COUNT`` values (so the chi-square approximation holds)."""
    values = np.union1d(before, after)
    counts = np.array([[np.sum(before == v), np.sum(after == v)] for v in values])
    rows, current = [], np.zeros(2)
    for row in counts:
        current = current + row
        if current.sum() >= MIN_POOLED_COUNT:
            rows.append(current)
            current = np.zeros(2)
    if current.sum() > 0:
        if rows:
            rows[-1] = rows[-1] + current
        else:
            rows.append(current)
    return np.array(rows)


def homogeneity_p_value(before, after, discrete=None):
    """``(p, test name)``: are two independent samples from one distribution? Chi-square
    test of homogeneity for integer values, two-sample Kolmogorov-Smirnov otherwise."""
    from scipy import stats

    before, after = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if discrete is None:
        discrete = _is_discrete(np.concatenate([before, after]))
    if discrete:
        table = _pooled_table(before, after)
        if len(table) < 2:
            return 1.0, "chi-square"
        return float(stats.chi2_contingency(table.T, correction=False)[1]), "chi-square"
    return float(stats.ks_2samp(before, after).pvalue), "Kolmogorov-Smirnov"


def _default_statistics(traces, observations):
    """Every scalar choice present in all ``traces`` and not observed."""
    common = None
    for trace in traces[:50]:
        scalars = {a for a, v in trace.get_choices().to_dict().items()
                   if (isinstance(v, (int, float, bool)) or (isinstance(v, torch.Tensor) and v.numel() == 1))}
        common = scalars if common is None else common & scalars
    common = sorted(a for a in (common or ()) if a not in observations)
    if not common:
        raise ValueError("check_stationarity: the model has no scalar choice present in every draw to "
                         "compare; pass statistics={name: function of a trace}, e.g. "
                         "{'k': lambda t: t['k'], 'mean': lambda t: float(t['mu'].mean())}")
    return {_statistic_name(a): _Choice(a) for a in common}


def _statistic_name(address) -> str:
    """``k`` for ``("k",)``, ``mu/2`` for ``("mu", 2)``: column titles, not Python literals."""
    return "/".join(str(key) for key in address) if isinstance(address, tuple) else str(address)


class _Choice:
    """``trace -> float(trace[address])`` (a class, so it pickles for other processes)."""

    def __init__(self, address):
        self.address = address

    def __call__(self, trace):
        return trace[self.address]


def _evaluate(statistics, trace) -> dict:
    out = {}
    for name, fn in statistics.items():
        value = fn(trace)
        out[name] = float(value.item() if isinstance(value, torch.Tensor) else value)
    return out


def _exception_line(traceback_text: str) -> str:
    """The ``SomeError: message`` line of a chain's traceback (not the notes after it)."""
    found = re.findall(r"^[\w.]+(?:Error|Exception|Interrupt|Failed)\b.*$", traceback_text, re.MULTILINE)
    return found[-1] if found else traceback_text.strip().splitlines()[-1]


class _Record:
    def __init__(self, statistics):
        self.statistics = statistics

    def __call__(self, trace):
        return _evaluate(self.statistics, trace)


def check_stationarity(model, args, kernel, *, observations=None, statistics=None, chains=1000, steps=1,
                       level=0.01, seed=0, executor=None, progress=False) -> "StationarityResult":
    """Test that ``kernel`` leaves the model's distribution invariant (see the module doc).

    ``model``, ``args``: the generative function and its arguments; it must be able to
    simulate every choice, the observed ones included. ``observations``: the observed
    addresses (or a dict whose keys are they); after each kernel step they are drawn
    afresh given the latents. ``statistics``: ``{name: function(trace) -> number}``
    (default: every scalar latent choice present in all draws); integer-valued ones
    get a chi-square test, others Kolmogorov-Smirnov. ``chains`` x ``steps``: the cost
    (power grows with ``chains``; more ``steps`` let a slow bias accumulate).
    ``level``: the family-wise false-alarm probability (Holm-corrected across
    statistics). ``executor``: as in :func:`run_chains` (``None``: Dask; ``"serial"``:
    this process). Returns a :class:`StationarityResult`; ``result.passed`` is False
    when some statistic differs at ``level`` or the kernel raised.
    """
    with torch.random.fork_rng(devices=[]):      # the user's random stream is left as it was
        return _check_stationarity(model, tuple(args), kernel, observations, statistics, chains, steps, level,
                                   seed, executor, progress)


def _check_stationarity(model, args, kernel, observations, statistics, chains, steps, level, seed, executor,
                        progress):
    started = time.perf_counter()
    observed = [normalize_address(a) for a in (observations or ())]
    torch.manual_seed(int(np.random.SeedSequence(seed).generate_state(1)[0]) % 2**63)
    starts = [model.simulate(*args) for _ in range(chains)]
    reference = [model.simulate(*args) for _ in range(chains)]
    statistics = dict(statistics) if statistics else _default_statistics(reference, observed)
    steps_kernel = as_kernel(kernel)
    if observed:
        steps_kernel = cycle(steps_kernel, ResampleObservations(observed), name=f"{steps_kernel.name} + data")
    before = {name: np.array([_evaluate(statistics, t)[name] for t in reference]) for name in statistics}
    result = StationarityResult(statistics, before, chains, steps, level, getattr(kernel, "name", str(kernel)))
    try:
        chain = run_chains(steps_kernel, starts, steps, executor=executor, seed=seed, record=_Record(statistics),
                           thin=max(steps, 1), progress=progress)
    except ChainsFailed as failed:
        result.error = _exception_line(failed.chain.errors[sorted(failed.chain.errors)[0]])
        result.seconds = time.perf_counter() - started
        return result
    result.after = {name: np.array([samples[-1][name] for samples in chain.samples]) for name in statistics}
    result.acceptance = chain.acceptance_rates()
    result.compare()
    result.seconds = time.perf_counter() - started
    return result


class StationarityResult:
    """What :func:`check_stationarity` found.

    ``passed``; ``p_values`` and ``adjusted`` (Holm) per statistic; ``tests`` (which
    test each statistic got); ``before`` (independent exact draws) and ``after`` (the
    chains' final states), arrays per statistic; ``error`` (the kernel raised: its
    message) ; ``chains``, ``steps``, ``seconds``: the cost. ``plot()`` draws them.
    """

    def __init__(self, statistics, before, chains, steps, level, kernel_name):
        self.statistics = list(statistics)
        self.before, self.after = before, {}
        self.chains, self.steps, self.level, self.kernel_name = chains, steps, level, kernel_name
        self.p_values, self.adjusted, self.tests = {}, {}, {}
        self.error, self.seconds, self.acceptance = None, math.nan, {}

    def compare(self):
        for name in self.statistics:
            self.p_values[name], self.tests[name] = homogeneity_p_value(self.before[name], self.after[name])
        adjusted = holm([self.p_values[n] for n in self.statistics])
        self.adjusted = dict(zip(self.statistics, adjusted.tolist()))

    @property
    def passed(self) -> bool:
        return self.error is None and all(p >= self.level for p in self.adjusted.values())

    @property
    def min_p_value(self) -> float:
        """The smallest Holm-adjusted p-value (0 if the kernel raised)."""
        return 0.0 if self.error is not None else min(self.adjusted.values(), default=1.0)

    def _rows(self):
        for name in self.statistics:
            p, adj = self.p_values.get(name, math.nan), self.adjusted.get(name, math.nan)
            flag = "-" if math.isnan(adj) else ("DIFFERS" if adj < self.level else "ok")
            yield name, self.tests.get(name, "-"), p, adj, flag

    def verdict(self) -> str:
        cost = f"{self.chains} chains x {self.steps} steps, {self.seconds:.1f} s"
        if self.error is not None:
            return f"NOT STATIONARY (the kernel raised): {self.error} [{cost}]"
        if self.passed:
            return (f"no evidence against stationarity at level {self.level:g} "
                    f"(smallest Holm-adjusted p = {self.min_p_value:.3g}) [{cost}]")
        bad = [n for n, *_, flag in self._rows() if flag == "DIFFERS"]
        return (f"NOT STATIONARY: the distribution of {', '.join(bad)} changes under {self.kernel_name} "
                f"(Holm-adjusted p = {self.min_p_value:.3g} < {self.level:g}) [{cost}]")

    def __repr__(self):
        lines = [f"check_stationarity({self.kernel_name}): {self.verdict()}"]
        lines += [f"  {name}: {test}, p = {p:.3g}, Holm-adjusted {adj:.3g} -> {flag}"
                  for name, test, p, adj, flag in self._rows()]
        return "\n".join(lines)

    def _repr_html_(self):
        esc = html.escape
        rows = "".join(f"<tr><td>{esc(name)}</td><td>{esc(test)}</td><td>{p:.3g}</td><td>{adj:.3g}</td>"
                       f"<td>{esc(flag)}</td></tr>" for name, test, p, adj, flag in self._rows())
        colour = "green" if self.passed else "crimson"
        return (f"<div><b style='color:{colour}'>{esc(self.verdict())}</b>"
                f"<table><tr><th>statistic</th><th>test</th><th>p</th><th>Holm-adjusted p</th><th></th></tr>"
                f"{rows}</table></div>")

    def plot(self, axes=None):
        """Before (exact draws) vs after (the kernel applied) for each statistic: a bar chart
        of frequencies for integer statistics, a QQ plot otherwise. Returns the figure."""
        import matplotlib.pyplot as plt

        names = [n for n in self.statistics if n in self.after]
        if axes is None:
            fig, axes = plt.subplots(1, max(len(names), 1), figsize=(3.6 * max(len(names), 1), 3.2),
                                     squeeze=False)
            axes = axes[0]
        for ax, name in zip(axes, names):
            self._plot_one(ax, name)
        fig = axes[0].figure
        fig.suptitle(self.verdict(), fontsize=9)
        fig.tight_layout()
        return fig

    def _plot_one(self, ax, name):
        before, after = self.before[name], self.after[name]
        if self.tests[name] == "chi-square":
            values = np.union1d(before, after)
            width = 0.4
            ax.bar(values - width / 2, [np.mean(before == v) for v in values], width, label="exact draws")
            ax.bar(values + width / 2, [np.mean(after == v) for v in values], width, label="after kernel")
            ax.legend(fontsize=7)
        else:
            q = np.linspace(0.01, 0.99, 99)
            xb, xa = np.quantile(before, q), np.quantile(after, q)
            ax.plot(xb, xa, ".", ms=3)
            lo, hi = min(xb.min(), xa.min()), max(xb.max(), xa.max())
            ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
            ax.set_xlabel("exact draws")
            ax.set_ylabel("after kernel")
        ax.set_title(f"{name}: p = {self.adjusted.get(name, math.nan):.2g}", fontsize=9)
