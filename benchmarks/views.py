"""The views' cost does not grow with the trace (issue 16, item 17).

A model has ``n`` continuous choices ``("x", i)`` and one mean ``mu``; a random-walk
involution reads ``mu`` and an auxiliary step ``u`` and writes ``mu + u`` and
``-u``: it touches 2 addresses whatever ``n`` is, and the other ``n`` choices are
implicit copies. For n = 10, 1,000 and 10,000 (``--quick``: 10 and 1,000) the
script builds an :class:`InvolutionSchematic`, a :class:`JacobianView` and the
saved-notebook fallback of each (their static HTML), and prints build time and
the size of what would be sent to the browser and saved in the notebook.

The views collapse the untouched choices and cap what they draw, so both
columns stay flat in ``n`` (the engine's own move, timed in the first column
for reference, grows linearly: it updates an ``n``-choice trace).

Run: ``python benchmarks/views.py`` (about 30 s; one thread).
"""

from __future__ import annotations

import sys
import time

import torch

import imcmc_lab as il
from imcmc_lab import continuous, read, write
from imcmc_lab.widgets import InvolutionSchematic, JacobianView

torch.set_num_threads(1)


@il.gen
def many(n):
    mu = il.normal(0.0, 1.0) @ "mu"
    for i in range(n):
        il.normal(mu, 1.0) @ ("x", i)


@il.gen
def step(trace):
    il.normal(0.0, 0.5) @ "u"


@il.transform
def shift(model_in, aux_in, model_out, aux_out):
    mu = read(model_in["mu"], continuous)
    u = read(aux_in["u"], continuous)
    write(model_out["mu"], mu + u, continuous)
    write(aux_out["u"], -u, continuous)


def measure(n):
    torch.manual_seed(0)
    trace = many.simulate(n)
    t0 = time.perf_counter()
    record = il.involutive_move(trace, step, (), shift)
    move = time.perf_counter() - t0
    out = [n, move]
    for view in (InvolutionSchematic, JacobianView):
        t0 = time.perf_counter()
        widget = view(record)
        html = widget.static_html()
        seconds = time.perf_counter() - t0
        size = sum(len(f) for f in widget.frames) + len(html)
        out += [seconds, size]
    return out


def main(quick=False):
    sizes = [10, 1_000] if quick else [10, 1_000, 10_000]
    print(f"{'choices':>8} {'move s':>8} {'schematic s':>12} {'schematic bytes':>16} {'jacobian s':>11} "
          f"{'jacobian bytes':>15}")
    rows = [measure(n) for n in sizes]
    for n, move, ts, ss, tj, sj in rows:
        print(f"{n:>8,} {move:>8.3f} {ts:>12.3f} {ss:>16,} {tj:>11.3f} {sj:>15,}")
    first, last = rows[0], rows[-1]
    print(f"largest / smallest: schematic {last[2] / first[2]:.1f}x time, {last[3] / first[3]:.1f}x bytes; "
          f"jacobian {last[4] / first[4]:.1f}x time, {last[5] / first[5]:.1f}x bytes")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
