"""The NP-HMC trajectory view: the coordinates of a nonparametric HMC move over its steps.

Drawn from what the kernel recorded (``NPHMC.last_record``, an ``NPRecord``): its
``trajectory`` (the reference coordinate ``z`` of every instantiated address after each
step, step 0 being the start), ``used_per_step`` (the addresses the program's run used
there), ``accepted``, ``block``, ``log_alpha`` and ``reason``. Nothing is integrated,
evaluated or decided here.

Upper panel: one line per address, from the step where the coordinate is instantiated
(a circle marks one created mid-trajectory) to the end. It is solid where the program's
run at that step uses the coordinate and dashed where it does not (the coordinate is
still part of the state, a harmonic oscillator in its N(0, 1) reference, and comes back
if a later run needs it again); a cross at the end of an accepted move marks a coordinate
the new state drops. Continuous coordinates are blue; discontinuous ones (moved by
coordinate-wise ±ε updates in the middle of each step) purple, drawn as steps. Vertical
lines separate the blocks of ``n_steps`` steps (the blocks after the first are the
look-ahead's); the block where the move was accepted is tinted green, a rejected move's
trajectory red. Lower panel: the dimension, the number of coordinates the run uses
(solid) and of instantiated ones (dashed), per step.

Which coordinates are discontinuous comes from the record (``record.discontinuous``: every
coordinate the kernel moved as discontinuous, discrete choices included); for records
without it, from the kernel (``NPHMC(..., discontinuous=...)``) or the view's own
``discontinuous=`` argument.
"""

from __future__ import annotations

import math

from imcmc_lab.core.choicemap import as_selection

from ._frames import FramePlayer, caption
from ._style import FAINT, INK, LINE, MUTED, ROLES, SANS, address_text, clip, esc, legend_svg, svg_text

__all__ = ["NPTrajectoryView", "np_trajectory_frames", "NPTrajectory"]

WIDTH, PLOT_H, DIM_H, LEFT, TOP, GAP, LABEL_W = 760, 280, 80, 60, 52, 40, 96
# shades that alternate between neighbouring lines: blues for continuous, purples for discontinuous
CONTINUOUS = ("#0969da", "#0a3069", "#1b7c83", "#218bff")
DISCONTINUOUS = ("#8250df", "#bf3989", "#512a97", "#a475f9")
ACCEPTED_TINT, REJECTED_TINT = ROLES["copied"][1], ROLES["differs"][1]
ACCEPTED, REJECTED = ROLES["copied"][0], ROLES["differs"][0]
MAX_LABELS = 22          # address labels at the right end of the lines (more would overlap)
MAX_FRAMES = 40          # a long trajectory is revealed in at most this many frames,
MAX_LINES = 300          # and in fewer when frames x coordinates would exceed this (the size of the view)


class NPTrajectory:
    """The drawn data of one record: ``steps`` (T + 1 ``{address: z}``), ``used`` (a set per
    step), ``addresses`` (in order of instantiation), ``first[a]`` (the step where ``a``
    appears), ``kind[a]`` (``"continuous"`` or ``"discontinuous"``), ``dims`` / ``instantiated``
    (counts per step), ``n_steps`` (``None`` if unknown) and the decision."""

    def __init__(self, record, n_steps=None, discontinuous=None):
        steps = getattr(record, "trajectory", None)
        if not steps or not hasattr(record, "used_per_step"):
            raise TypeError(f"NPTrajectoryView draws an NPHMC kernel's last_record (an NPRecord), "
                            f"got {type(record).__name__}")
        self.record, self.steps = record, [dict(s) for s in steps]
        self.used = [set(u) for u in record.used_per_step]
        self.addresses, self.first = [], {}
        for t, state in enumerate(self.steps):
            for address in state:
                if address not in self.first:
                    self.first[address] = t
                    self.addresses.append(address)
        self.order = {a: i for i, a in enumerate(self.addresses)}
        recorded = getattr(record, "discontinuous", None)     # older records: the kernel's setting
        marked = set(recorded) if recorded is not None else as_selection(discontinuous or ())
        self.kind = {a: "discontinuous" if a in marked else "continuous" for a in self.addresses}
        unit = set(getattr(record, "unit", ()))      # older records: all N(0, 1)
        kinds = {a in unit for a in self.addresses}
        #: every coordinate a unit one (U(0, 1) reference); the axis label says which kinds
        self.all_unit = kinds == {True}
        self.axis_label = ("u (U(0, 1) reference)" if self.all_unit else
                           "z (N(0, 1)) and u (U(0, 1))" if kinds == {True, False} else "z (N(0, 1) reference)")
        self.dims = [len(u) for u in self.used]
        self.instantiated = [len(s) for s in self.steps]
        self.n_steps = n_steps or _steps_per_block(record, len(self.steps) - 1)
        self.accepted, self.block = bool(record.accepted), record.block
        self.log_alpha, self.reason = record.log_alpha, record.reason

    @property
    def T(self) -> int:
        return len(self.steps) - 1

    def colour(self, address) -> str:
        shades = DISCONTINUOUS if self.kind[address] == "discontinuous" else CONTINUOUS
        return shades[self.order[address] % len(shades)]

    def created_mid_trajectory(self, address) -> bool:
        return self.first[address] > 0

    def dropped(self, address) -> bool:
        """Whether an accepted move's new state leaves ``address`` out (its final run does not use it)."""
        return self.accepted and address not in self.used[-1]

    def decision(self) -> str:
        alpha = f"log α = {self.log_alpha:.4g}"
        if self.accepted:
            where = f" in block {self.block} (look-ahead {self.block - 1})" if self.block and self.block > 1 else ""
            return f"accepted{where}: {alpha}"
        return f"rejected: {self.reason}" if self.reason else f"rejected: {alpha}"


def _steps_per_block(record, T):
    """An accepted move ran ``block`` whole blocks: ``n_steps = T / block``; otherwise unknown."""
    if record.accepted and record.block and T % record.block == 0:
        return T // record.block
    return None


# ---------------------------------------------------------------------------------------------
# drawing

class _Scale:
    def __init__(self, traj: NPTrajectory):
        values = [z for s in traj.steps for z in s.values() if math.isfinite(z)] or [0.0]
        least = [0.0, 1.0] if traj.all_unit else [-1.0, 1.0]     # a unit coordinate lies in [0, 1]
        lo, hi = min(values + least[:1]), max(values + least[1:])
        pad = 0.06 * (hi - lo)
        self.lo, self.hi, self.T = lo - pad, hi + pad, max(traj.T, 1)
        self.right = WIDTH - LABEL_W

    def x(self, t):
        return LEFT + (self.right - LEFT) * t / self.T

    def y(self, z):
        return TOP + PLOT_H * (self.hi - z) / (self.hi - self.lo)


def _axes(traj, s, upto):
    parts = [f'<rect x="{LEFT}" y="{TOP}" width="{s.right - LEFT}" height="{PLOT_H}" fill="none" stroke="{LINE}"/>']
    if s.lo < 0 < s.hi:
        parts.append(f'<line x1="{LEFT}" x2="{s.right}" y1="{s.y(0):.1f}" y2="{s.y(0):.1f}" stroke="{LINE}"/>')
    ticks = (s.hi, 0.0, s.lo) if s.lo < 0 < s.hi else (s.hi, s.lo)
    for z in (1.0, 0.0) if traj.all_unit else ticks:       # a unit axis: its walls
        parts.append(svg_text(LEFT - 6, s.y(z) + 4, f"{z:.2g}", size=10.5, fill=MUTED, family=SANS, anchor="end"))
    parts.append(svg_text(14, TOP + PLOT_H / 2, traj.axis_label, size=11, fill=MUTED, family=SANS,
                          anchor="middle", extra=f' transform="rotate(-90 14 {TOP + PLOT_H / 2:.1f})"'))
    for t in sorted({0, traj.T, *range(0, traj.T + 1, max(1, traj.T // 10))}):
        parts.append(svg_text(s.x(t), TOP + PLOT_H + 14, str(t), size=10.5, fill=MUTED, family=SANS, anchor="middle"))
    parts.append(svg_text((LEFT + s.right) / 2, TOP + PLOT_H + 28, "leapfrog step", size=11, fill=MUTED,
                          family=SANS, anchor="middle"))
    if upto < traj.T:      # the step now shown
        parts.append(f'<rect x="{s.x(upto) - 5:.1f}" y="{TOP}" width="10" height="{PLOT_H}" fill="#fff8c5" '
                     f'opacity="0.8"/>')
    return parts


def _blocks(traj, s, final):
    """Block boundaries and labels; on the final frame, the tint of the decision."""
    parts, L = [], traj.n_steps
    if final:
        if traj.accepted and L and traj.block:
            x0, x1, tint = s.x((traj.block - 1) * L), s.x(traj.block * L), ACCEPTED_TINT
        else:
            x0, x1, tint = s.x(0), s.x(traj.T), (ACCEPTED_TINT if traj.accepted else REJECTED_TINT)
        parts.append(f'<rect class="imcmc-decision" x="{x0:.1f}" y="{TOP}" width="{x1 - x0:.1f}" '
                     f'height="{PLOT_H}" fill="{tint}" opacity="0.6"/>')
    if not L:
        return parts
    n_blocks = math.ceil(traj.T / L)
    for b in range(n_blocks):
        x0 = s.x(b * L)
        if b:
            parts.append(f'<line class="imcmc-block" x1="{x0:.1f}" x2="{x0:.1f}" y1="{TOP}" y2="{TOP + PLOT_H}" '
                         f'stroke="{FAINT}" stroke-dasharray="4 3"/>')
        label = "block 1" if b == 0 else f"look-ahead {b}"
        parts.append(svg_text(x0 + 4, TOP + 12, label, size=10.5, fill=MUTED, family=SANS))
    return parts


def _path(traj, s, address, upto):
    """The segments of one coordinate up to step ``upto``: ``[(used, points), ...]``."""
    discontinuous = traj.kind[address] == "discontinuous"
    runs, prev = [], None
    for t in range(traj.first[address], upto + 1):
        z = traj.steps[t][address]
        point = (s.x(t), s.y(z))
        used = address in traj.used[t]
        if prev is None:
            runs.append((used, [point]))
        else:
            if discontinuous and prev[1] != point[1]:          # the jump at the step's sweep
                mid = (prev[0] + point[0]) / 2
                bend = [(mid, prev[1]), (mid, point[1])]
            else:
                bend = []
            if used != runs[-1][0]:
                runs.append((used, [prev]))
            runs[-1][1].extend(bend + [point])
        prev = point
    return runs


def _coordinate(traj, s, address, upto):
    """One address's line (``<g>`` with data attributes the tests and the browser read)."""
    kind, text, colour = traj.kind[address], address_text(address), traj.colour(address)
    used_steps = ",".join(str(t) for t in range(upto + 1) if address in traj.used[t])
    parts = [f'<g class="imcmc-coordinate" data-address="{esc(text)}" data-kind="{kind}" '
             f'data-created="{traj.first[address]}" data-used="{used_steps}"><title>{esc(text)} ({kind})</title>']
    for used, points in _path(traj, s, address, upto):
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        width = 2.4 if kind == "discontinuous" else 1.8
        style = f'stroke-width="{width}"' if used else 'stroke-width="1.2" stroke-dasharray="3 3" opacity="0.55"'
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" {style}/>')
    t0 = traj.first[address]
    if traj.created_mid_trajectory(address):
        parts.append(f'<circle class="imcmc-created" cx="{s.x(t0):.1f}" cy="{s.y(traj.steps[t0][address]):.1f}" '
                     f'r="3.5" fill="#ffffff" stroke="{colour}" stroke-width="1.6"/>')
    if upto < traj.T:       # where the coordinate is at the step shown
        parts.append(f'<circle cx="{s.x(upto):.1f}" cy="{s.y(traj.steps[upto][address]):.1f}" r="2.2" '
                     f'fill="{colour if address in traj.used[upto] else FAINT}"/>')
    if upto == traj.T and traj.dropped(address):
        x, y = s.x(traj.T), s.y(traj.steps[-1][address])
        parts.append(f'<path class="imcmc-dropped" d="M{x - 4:.1f},{y - 4:.1f}L{x + 4:.1f},{y + 4:.1f}'
                     f'M{x - 4:.1f},{y + 4:.1f}L{x + 4:.1f},{y - 4:.1f}" stroke="{INK}" stroke-width="1.5"/>')
    parts.append("</g>")
    return "".join(parts)


def _labels(traj, s, upto):
    """Address labels at the right end, spread so they do not overlap; the discontinuous and
    mid-trajectory coordinates first when there are more than :data:`MAX_LABELS`."""
    present = [a for a in traj.addresses if traj.first[a] <= upto]
    ranked = sorted(present, key=lambda a: (traj.kind[a] != "discontinuous", not traj.created_mid_trajectory(a)))
    shown = ranked[:MAX_LABELS]
    wanted = sorted((s.y(traj.steps[upto][a]) + 4, a) for a in shown)
    ys, gap = [], 11.0
    for y, _ in wanted:
        ys.append(max(y, ys[-1] + gap) if ys else max(y, TOP + 9))
    overflow = (ys[-1] - (TOP + PLOT_H)) if ys else 0
    if overflow > 0:        # push back up from the bottom
        ys[-1] -= overflow
        for i in range(len(ys) - 2, -1, -1):
            ys[i] = min(ys[i], ys[i + 1] - gap)
    parts = []
    for y, (_, address) in zip(ys, wanted):
        used = address in traj.used[upto]
        fill = traj.colour(address) if used else FAINT
        parts.append(svg_text(s.right + 6, y, clip(address_text(address), 14), size=10.5, fill=fill, family=SANS))
    if len(present) > len(shown):
        parts.append(svg_text(s.right + 6, TOP + PLOT_H + 28, f"+{len(present) - len(shown)} unlabelled",
                              size=10, fill=MUTED, family=SANS))
    return parts


def _dimension_panel(traj, s, upto):
    top, most, least = TOP + PLOT_H + GAP, max(max(traj.instantiated), 1), min(traj.dims)
    # from 0, unless the changes would be too small to see (a mixture's 37 -> 40)
    bottom = 0 if least < most / 2 else max(0, least - max(2, most - least))
    y = lambda n: top + 4 + (DIM_H - 8) * (most - n) / max(most - bottom, 1)     # noqa: E731
    parts = [f'<rect x="{LEFT}" y="{top}" width="{s.right - LEFT}" height="{DIM_H}" fill="none" stroke="{LINE}"/>',
             svg_text(LEFT - 6, y(most) + 4, str(most), size=10.5, fill=MUTED, family=SANS, anchor="end"),
             svg_text(LEFT - 6, y(bottom) + 4, str(bottom), size=10.5, fill=MUTED, family=SANS, anchor="end"),
             svg_text(14, top + DIM_H / 2, "dimension", size=11, fill=MUTED, family=SANS, anchor="middle",
                      extra=f' transform="rotate(-90 14 {top + DIM_H / 2:.1f})"')]
    for counts, style in ((traj.instantiated, f'stroke="{FAINT}" stroke-width="1.4" stroke-dasharray="4 3"'),
                          (traj.dims, f'stroke="{INK}" stroke-width="2"')):
        pts = [f"{s.x(0):.1f},{y(counts[0]):.1f}"]
        for t in range(1, upto + 1):
            mid = (s.x(t - 1) + s.x(t)) / 2
            pts += [f"{mid:.1f},{y(counts[t - 1]):.1f}", f"{mid:.1f},{y(counts[t]):.1f}",
                    f"{s.x(t):.1f},{y(counts[t]):.1f}"]
        parts.append(f'<polyline points="{" ".join(pts)}" fill="none" {style}/>')
    parts.append(f'<circle cx="{s.x(upto):.1f}" cy="{y(traj.dims[upto]):.1f}" r="2.6" fill="{INK}"/>')
    parts.append(svg_text(s.right + 6, y(traj.dims[upto]) + 4, f"{traj.dims[upto]} used", size=10.5, fill=INK,
                          family=SANS))
    if traj.instantiated[upto] != traj.dims[upto]:
        parts.append(svg_text(s.right + 6, min(y(traj.instantiated[upto]) + 4, y(traj.dims[upto]) - 8),
                              f"{traj.instantiated[upto]} instantiated", size=10.5, fill=MUTED, family=SANS))
    return parts


def _legend():
    """Line samples: continuous, discontinuous (a step), unused (dashed), created, dropped."""
    y, x, parts = 12, LEFT, []

    def label(x, text):
        parts.append(svg_text(x, y + 4, text, size=11.5, fill=MUTED, family=SANS))
        return x + len(text) * 11.5 * 0.56 + 20

    parts.append(f'<line x1="{x}" x2="{x + 22}" y1="{y}" y2="{y}" stroke="{CONTINUOUS[0]}" stroke-width="2"/>')
    x = label(x + 28, "continuous")
    parts.append(f'<polyline points="{x},{y + 4} {x + 11},{y + 4} {x + 11},{y - 4} {x + 22},{y - 4}" fill="none" '
                 f'stroke="{DISCONTINUOUS[0]}" stroke-width="2"/>')
    x = label(x + 28, "discontinuous")
    parts.append(f'<line x1="{x}" x2="{x + 22}" y1="{y}" y2="{y}" stroke="{FAINT}" stroke-width="1.4" '
                 f'stroke-dasharray="3 3"/>')
    x = label(x + 28, "not used by the run at that step")
    parts.append(f'<circle cx="{x + 4}" cy="{y}" r="3.5" fill="#fff" stroke="{INK}" stroke-width="1.4"/>')
    x = label(x + 12, "created")
    parts.append(f'<path d="M{x},{y - 4}L{x + 8},{y + 4}M{x},{y + 4}L{x + 8},{y - 4}" stroke="{INK}" '
                 f'stroke-width="1.5"/>')
    label(x + 14, "dropped")
    return "".join(parts)


def _status(traj, s, upto):
    if upto < traj.T:
        return svg_text(s.right, TOP - 10, f"step {upto} of {traj.T}", size=12, fill=MUTED, family=SANS, anchor="end")
    colour = ACCEPTED if traj.accepted else REJECTED
    return svg_text(s.right, TOP - 10, clip(traj.decision(), 90), size=12.5, fill=colour, family=SANS,
                    weight="600", anchor="end", extra=' class="imcmc-verdict"')


def render_step(traj: NPTrajectory, upto: int, scale=None) -> str:
    """One SVG: the trajectory up to step ``upto`` (the decision on the last step)."""
    s = scale or _Scale(traj)
    final = upto == traj.T
    parts = [_legend()] + _blocks(traj, s, final) + _axes(traj, s, upto)
    # discontinuous lines on top: there are few of them, and many continuous ones would hide them
    drawn = sorted((a for a in traj.addresses if traj.first[a] <= upto), key=lambda a: traj.kind[a] == "discontinuous")
    parts += [_coordinate(traj, s, a, upto) for a in drawn]
    parts += _labels(traj, s, upto) + _dimension_panel(traj, s, upto) + [_status(traj, s, upto)]
    height = TOP + PLOT_H + GAP + DIM_H + 12
    dims = ",".join(str(d) for d in traj.dims[:upto + 1])
    title = f"NP-HMC trajectory, step {upto} of {traj.T}" + (f": {traj.decision()}" if final else "")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="imcmc-nptrajectory" width="{WIDTH}" '
            f'height="{height}" viewBox="0 0 {WIDTH} {height}" data-step="{upto}" data-steps="{traj.T}" '
            f'data-dims="{dims}" data-accepted="{str(traj.accepted).lower()}" style="background:#fff">'
            f"<title>{esc(title)}</title>{''.join(parts)}</svg>")


def _shown_steps(T, n_coordinates):
    frames = max(4, min(MAX_FRAMES, MAX_LINES // max(n_coordinates, 1)))
    stride = max(1, math.ceil(T / frames))
    return sorted(set(range(0, T + 1, stride)) | {T})


def _inputs(source, kernel, n_steps, discontinuous):
    """``(records, n_steps, discontinuous)`` from a kernel, a record or a list of records
    (``n_steps`` and ``discontinuous`` default to the kernel's)."""
    if hasattr(source, "last_record"):
        if source.last_record is None:
            raise ValueError(f"NPTrajectoryView: the kernel {source.name!r} has made no move yet; run "
                             f"kernel(trace) first, or pass a record")
        kernel, records = source, [source.last_record]
    else:
        records = list(source) if isinstance(source, (list, tuple)) else [source]
        if not records:
            raise ValueError("NPTrajectoryView needs at least one record")
    if kernel is not None:
        n_steps = n_steps or kernel.n_steps
        discontinuous = kernel.discontinuous if discontinuous is None else discontinuous
    return records, n_steps, discontinuous


def _build(source, kernel, n_steps, discontinuous):
    """``(frames, labels, trajectories)`` (see :func:`np_trajectory_frames`)."""
    records, n_steps, discontinuous = _inputs(source, kernel, n_steps, discontinuous)
    trajectories = [NPTrajectory(r, n_steps, discontinuous) for r in records]
    if len(trajectories) == 1:
        traj = trajectories[0]
        scale = _Scale(traj)
        shown = _shown_steps(traj.T, len(traj.addresses))
        return [render_step(traj, t, scale) for t in shown], [f"step {t}" for t in shown], trajectories
    frames = [render_step(traj, traj.T) for traj in trajectories]
    labels = [f"move {i + 1}: dim {t.dims[0]} → {t.dims[-1] if t.accepted else t.dims[0]}"
              for i, t in enumerate(trajectories)]
    return frames, labels, trajectories


def np_trajectory_frames(source, *, kernel=None, n_steps=None, discontinuous=None) -> list[str]:
    """The view's SVG frames. For one move, one per step (frame ``k`` draws steps ``0..k``; at
    most :data:`MAX_FRAMES`, fewer for many coordinates, evenly spaced); for a list of records,
    one per move. ``source``: an ``NPHMC`` kernel (its ``last_record``, ``n_steps`` and
    ``discontinuous``), an ``NPRecord`` or a list of them (``kernel=``: the kernel that made
    them, for its ``n_steps`` and ``discontinuous``; or give those two directly)."""
    return _build(source, kernel, n_steps, discontinuous)[0]


class NPTrajectoryView(FramePlayer):
    """The trajectory of a nonparametric HMC move, drawn from the kernel's record.

    ``NPTrajectoryView(kernel)`` shows the last move of an ``il.NPHMC`` kernel step by step
    (Play, or drag the slider): each coordinate's position over the leapfrog steps, the
    dimension growing and shrinking, the look-ahead blocks and the accept decision (see the
    module docstring for what each mark means). ``NPTrajectoryView(records, kernel=kernel)``
    with a list of ``kernel.last_record`` collected over several moves shows one frame per
    move. ``discontinuous=`` (addresses or a selection) and ``n_steps=`` override what is
    taken from the kernel. ``trajectories`` holds the data drawn (:class:`NPTrajectory`).
    A static copy stays beside the widget for saved notebooks and exports: the whole move (its
    last frame), or every move of a list."""

    def __init__(self, source, *, kernel=None, n_steps=None, discontinuous=None, title="NP-HMC trajectory",
                 interval_ms: int = 600):
        frames, labels, self.trajectories = _build(source, kernel, n_steps, discontinuous)
        header = caption(title, esc(_summary(self.trajectories)))
        super().__init__(frames, labels, header_html=header, interval_ms=interval_ms, title=title)
        if len(self.trajectories) == 1:     # the last step's frame shows the whole move and its decision
            self.static_frames = [len(frames) - 1]


def _summary(trajectories):
    if len(trajectories) > 1:
        accepted = sum(t.accepted for t in trajectories)
        return f"{len(trajectories)} moves, {accepted} accepted; dimension per move before → after"
    t = trajectories[0]
    if t.n_steps:
        blocks = math.ceil(t.T / t.n_steps)
        ran = f"{blocks} blocks of {t.n_steps} ({blocks - 1} look-ahead)" if blocks > 1 else "1 block"
        steps = f"{t.T} leapfrog steps in {ran}"
    else:
        steps = f"{t.T} leapfrog steps"
    after = t.dims[-1] if t.accepted else t.dims[0]
    return f"{steps}; dimension {t.dims[0]} → {after}; {t.decision()}"
