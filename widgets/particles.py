"""The particle view: the generations of an SMC run or of one conditional SMC sweep, animated.

Each generation is a column; each particle a point at the value the caller picks
(``value(trace, t)``, e.g. the state made at generation ``t``), its area proportional to
its normalised weight; a grey line joins it to its ancestor in the previous column.
For a particle Gibbs / PGAS sweep (``kernel.last_sweep``, a ``SweepRecord``) the retained
particle (index 0) is drawn orange and the ancestor that ancestor sampling chose for it
red when it is not its own. Below: the effective sample size per generation. Frame
``k`` shows generations ``0..k``. Everything drawn is read from the engine's record
(``ParticleState.history`` / ``.ancestors``, ``SweepRecord``); nothing is resampled or
reweighted here.
"""

from __future__ import annotations

import math

import numpy as np

from imcmc_lab.inference.smc.resampling import effective_sample_size, normalized_weights

from ._frames import FramePlayer, caption
from ._style import FAINT, INK, LINE, MUTED, ROLES, SANS, esc, legend_svg, svg_text

__all__ = ["ParticleView", "particle_frames"]

WIDTH, PLOT_H, ESS_H, LEFT, TOP, GAP = 760, 260, 90, 64, 34, 44
RETAINED, CHOSEN, POINT = ROLES["written"][0], ROLES["differs"][0], ROLES["read"][0]


class _Generations:
    """The record's columns as arrays: values[t][i], weights[t][i], ancestors[t][i], ess[t]."""

    def __init__(self, record, value, max_particles):
        if not getattr(record, "history", None):
            raise TypeError(f"ParticleView draws an il.smc / ParticleFilter state or a PG/PGAS kernel's "
                            f"last_sweep, got {type(record).__name__}")
        self.conditional = hasattr(record, "ancestor_choice")
        self.values, self.weights, self.ess = [], [], []
        for t, (traces, log_weights) in enumerate(record.history):
            shown = traces[:max_particles]
            self.values.append(np.array([_number(value, tr, t) for tr in shown]))
            w = np.asarray(log_weights, dtype=float)
            self.weights.append(normalized_weights(w)[:max_particles] if np.isfinite(w).any()
                                else np.zeros(len(shown)))
            self.ess.append(effective_sample_size(w) if np.isfinite(w).any() else 0.0)
        self.ancestors = [None if a is None else np.asarray(a)[:max_particles] for a in record.ancestors]
        self.choice = list(getattr(record, "ancestor_choice", [None] * len(self.values)))
        self.n_particles = len(record.history[0][0])


def _number(value, trace, t):
    try:
        return float(value(trace, t))
    except Exception as e:  # a user function's failure, named with its generation
        raise ValueError(f"ParticleView: value(trace, {t}) failed ({type(e).__name__}: {e}); pass "
                         f"value=lambda trace, t: float(trace[...]) for a choice made at generation t") from e


def _scales(g: _Generations):
    T = len(g.values)
    lo = min(float(v.min()) for v in g.values if len(v))
    hi = max(float(v.max()) for v in g.values if len(v))
    pad = 0.06 * (hi - lo or 1.0)
    lo, hi = lo - pad, hi + pad
    step = (WIDTH - LEFT - 40) / max(T - 1, 1)
    x = lambda t: LEFT + t * step                                      # noqa: E731
    y = lambda v: TOP + PLOT_H * (hi - v) / (hi - lo)                   # noqa: E731
    return x, y, lo, hi


def _axes(g, x, lo, hi, upto):
    T, parts = len(g.values), []
    parts.append(f'<rect x="{LEFT - 8}" y="{TOP}" width="{WIDTH - LEFT - 8}" height="{PLOT_H}" fill="none" '
                 f'stroke="{LINE}"/>')
    for v, label in ((hi, f"{hi:.3g}"), (lo, f"{lo:.3g}")):
        yy = TOP + (6 if v == hi else PLOT_H - 2)
        parts.append(svg_text(LEFT - 12, yy, label, size=10.5, fill=MUTED, family=SANS, anchor="end"))
    ticks = sorted({0, T - 1, *range(0, T, max(1, T // 8))})
    for t in ticks:
        parts.append(svg_text(x(t), TOP + PLOT_H + 14, str(t), size=10.5, fill=MUTED, family=SANS,
                              anchor="middle"))
    parts.append(f'<rect x="{x(upto) - 7:.1f}" y="{TOP}" width="14" height="{PLOT_H}" fill="#fff8c5" '
                 f'opacity="0.7"/>')
    return parts


def _lineage(g, x, y, t):
    """Lines from generation ``t``'s particles to their ancestors at ``t - 1``."""
    parts, anc, choice = [], g.ancestors[t], g.choice[t]
    prev = g.values[t - 1]
    for i, a in enumerate(anc):
        if a >= len(prev):
            continue
        special = g.conditional and i == 0
        colour = (CHOSEN if choice else RETAINED) if special else FAINT
        width = 2.2 if special else 0.7
        parts.append(f'<line x1="{x(t - 1):.1f}" y1="{y(prev[a]):.1f}" x2="{x(t):.1f}" y2="{y(g.values[t][i]):.1f}" '
                     f'stroke="{colour}" stroke-width="{width}" opacity="{1 if special else 0.6}"/>')
    return parts


def _points(g, x, y, t):
    parts, n = [], max(g.n_particles, 1)
    for i, (v, w) in enumerate(zip(g.values[t], g.weights[t])):
        r = 1.6 + 7.0 * math.sqrt(w * min(n, 50) / 50) if w > 0 else 1.2
        retained = g.conditional and i == 0
        fill = RETAINED if retained else POINT
        parts.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="{r:.2f}" fill="{fill}" '
                     f'fill-opacity="{0.85 if retained else 0.45}" stroke="{fill}" stroke-width="0.8"/>')
    return parts


def _ess_panel(g, x, upto):
    top, n = TOP + PLOT_H + GAP, g.n_particles
    parts = [f'<rect x="{LEFT - 8}" y="{top}" width="{WIDTH - LEFT - 8}" height="{ESS_H}" fill="none" stroke="{LINE}"/>',
             svg_text(LEFT - 12, top + 9, str(n), size=10.5, fill=MUTED, family=SANS, anchor="end"),
             svg_text(LEFT - 12, top + ESS_H, "0", size=10.5, fill=MUTED, family=SANS, anchor="end"),
             svg_text(LEFT - 56, top + ESS_H / 2 + 4, "ESS", size=11.5, fill=INK, family=SANS)]
    pts = " ".join(f"{x(t):.1f},{top + ESS_H * (1 - e / n):.1f}" for t, e in enumerate(g.ess[:upto + 1]))
    parts.append(f'<polyline points="{pts}" fill="none" stroke="{POINT}" stroke-width="1.8"/>')
    e = g.ess[upto]
    parts.append(f'<circle cx="{x(upto):.1f}" cy="{top + ESS_H * (1 - e / n):.1f}" r="3" fill="{POINT}"/>')
    return parts


def particle_frames(record, value, max_particles: int = 200) -> list[str]:
    """One SVG per generation ``k`` (generations ``0..k`` drawn); see the module docstring."""
    g = _Generations(record, value, max_particles)
    x, y, lo, hi = _scales(g)
    height = TOP + PLOT_H + GAP + ESS_H + 14
    items = [(POINT, ROLES["read"][1], "particle (area ∝ weight)"), (FAINT, "#ffffff", "line to ancestor")]
    if g.conditional:
        items += [(RETAINED, ROLES["written"][1], "retained"),
                  (CHOSEN, ROLES["differs"][1], "ancestor sampling switched")]
    legend, _ = legend_svg(LEFT, 16, items)
    frames = []
    for upto in range(len(g.values)):
        parts = [legend] + _axes(g, x, lo, hi, upto)
        for t in range(1, upto + 1):
            parts += _lineage(g, x, y, t)
        for t in range(upto + 1):
            parts += _points(g, x, y, t)
        parts += _ess_panel(g, x, upto)
        parts.append(svg_text((LEFT + WIDTH) / 2, TOP + PLOT_H + 30, "generation", size=11, fill=MUTED,
                              family=SANS, anchor="middle"))
        frames.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
                      f'viewBox="0 0 {WIDTH} {height}" style="background:#fff">{"".join(parts)}</svg>')
    return frames


class ParticleView(FramePlayer):
    """``ParticleView(record, value=lambda trace, t: float(trace["states", t, "x"]))``: the
    generations of ``record`` (an ``il.smc`` result / ``ParticleFilter.state``, or a PG/PGAS
    kernel's ``last_sweep``) animated with a Play button; a static copy stays beside it."""

    def __init__(self, record, value, title: str = "particles", max_particles: int = 200,
                 interval_ms: int = 700):
        frames = particle_frames(record, value, max_particles)
        n = len(record.history[0][0])
        kind = "conditional SMC sweep" if hasattr(record, "ancestor_choice") else "SMC"
        shown = f", first {max_particles} drawn" if n > max_particles else ""
        header = caption(title, esc(f"{kind}: {n} particles{shown}, {len(frames)} generations"))
        super().__init__(frames, [f"t = {t}" for t in range(len(frames))], header_html=header,
                         interval_ms=interval_ms, title=title)
