"""A live sampler: a chain runs in a background thread while its plots update.

The chain is the engine's own :func:`imcmc_lab.inference.chains.run_chain`
(a kernel stepping a trace; samples appended to a :class:`Chain`), run in a
worker thread with a step callback. The callback does three cheap things: it
stops the run (Stop), blocks while paused (Pause), and asks for a redraw at
most ``max_rate`` times a second. Redraws, and every other change of widget
state, happen on one thread, following ipywidgets' guidance on threads: in a
Jupyter kernel the worker hands them to the kernel's event loop
(``call_soon_threadsafe``), so the kernel stays responsive while the chain
runs; elsewhere (plain Python, tests) they run in whichever thread calls
:meth:`SamplerStream.wait`. The chain stays available as ``stream.chain``
(``.to_arviz()`` converts it) while and after it runs.

With ``chains=k`` the view runs k chains through the engine's
:func:`~imcmc_lab.inference.distributed.run_chains` (by default on the embedded
Dask cluster's worker processes) from a background thread. Each chain sends its
new samples back a few times a second (through the Dask scheduler's event
topics, the same channel as ``run_chains``' progress); the view appends them as
they arrive and draws one line per chain. Pause holds every chain where it is
(the workers wait), Start resumes them; Stop ends every chain and keeps all its
samples (the final chains the workers hand back replace the streamed ones).
"""

from __future__ import annotations

import asyncio
import io
import math
import threading
import time

import ipywidgets as W
import numpy as np

from imcmc_lab.inference.chains import Chain, run_chain
from imcmc_lab.inference.distributed import ChainsFailed, run_chains
from imcmc_lab.inference.kernels import as_kernel

from ._frames import (after_cell, caption, display_with_fallback, fallback_style, hide_fallback, new_static_id,
                      resend_state)
from ._style import MUTED, SANS, esc

__all__ = ["SamplerStream", "Throttle"]

PALETTE = ["#0969da", "#bc4c00", "#1a7f37", "#8250df", "#bf3989", "#9a6700", "#57606a"]   # distinct hues


class Throttle:
    """Allows an event at most once per ``interval`` seconds of ``clock``; after an action
    that took ``cost`` seconds it also waits ``2 * cost`` (slow redraws slow themselves down)."""

    def __init__(self, rate: float, clock=time.monotonic):
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.clock = clock
        self.next_at = -math.inf

    def ready(self) -> bool:
        """True (and start a new interval) if an event may happen now."""
        now = self.clock()
        if now < self.next_at:
            return False
        self.next_at = now + self.interval
        return True

    def cost(self, seconds: float):
        self.next_at = max(self.next_at, self.clock() + 2.0 * seconds)


class _Stopped(Exception):
    """Raised in the worker's step callback to end the run (Stop)."""


class _RemoteChains:
    """The runs of a ``SamplerStream(chains=k)``: each Start/Continue is one ``run_chains``
    call from the chains' last traces, whose streamed batches are appended to
    ``stream.chain`` as they arrive and whose final result then replaces them."""

    def __init__(self, stream, n_chains, executor, seed):
        self.stream, self.n_chains, self.executor = stream, n_chains, executor
        self.seed = np.random.SeedSequence().entropy if seed is None else seed
        self.runs = 0
        self.pause = threading.Event()
        self.earlier = {}                          # acceptance summed over finished runs
        self.current = [{} for _ in range(n_chains)]   # this run's, per chain, as last reported
        self._lock = threading.Lock()
        self._live = False
        self._base_kept, self._base_steps = [0] * n_chains, [0] * n_chains

    def where(self) -> str:
        if self.executor == "serial":
            return "in this process"
        if self.executor is None:
            return "on the local Dask cluster"
        return "on Dask workers" if type(self.executor).__name__ == "Client" else f"on {type(self.executor).__name__}"

    def run(self, steps):
        """One run (the stream's worker thread): returns ``(final Chain, error or None)``."""
        chain = self.stream.chain
        with self._lock:
            self._base_kept = [len(s) for s in chain.samples]
            self._base_steps = list(chain.steps_done)
            self.current = [{} for _ in range(self.n_chains)]
            self._live = True
        # the first run gives the chains run_chains(seed=seed) gives; later ones continue with new seeds
        seed = self.seed if self.runs == 0 else [*np.atleast_1d(self.seed).tolist(), self.runs]
        self.runs += 1
        try:
            result = run_chains(self.stream.kernel, list(chain.traces), steps, executor=self.executor, seed=seed,
                                record=self.stream.record, thin=self.stream.thin, progress=False,
                                on_samples=self.on_samples, stop=self.stream._stop, pause=self.pause)
            error = None
        except ChainsFailed as exc:          # the other chains ran on; every sample is in exc.chain
            result, error = exc.chain, exc
        self.absorb(result)
        return result, error

    def on_samples(self, index, step, samples, scores, acceptance):
        """A batch from chain ``index`` (a Dask client thread, or the stream's worker thread)."""
        chain = self.stream.chain
        with self._lock:
            if not self._live:               # a late batch: the final chains are in already
                return
            chain.samples[index].extend(samples)
            chain.scores[index].extend(scores)
            chain.steps_done[index] = self._base_steps[index] + step
            self.current[index] = acceptance
        self.stream._acceptance_history.append((sum(chain.steps_done) / self.n_chains, self.rates()))
        self.stream._request_refresh()

    def absorb(self, result):
        """Replace this run's streamed samples by the chains the run returned (they include
        what was kept after the last batch)."""
        chain = self.stream.chain
        with self._lock:
            self._live = False
            for c in range(self.n_chains):
                chain.samples[c][self._base_kept[c]:] = result.samples[c]
                chain.scores[c][self._base_kept[c]:] = result.scores[c]
                chain.traces[c] = result.traces[c]
                chain.steps_done[c] = self._base_steps[c] + result.steps_done[c]
                chain.finished[c] = result.finished[c]
            self.earlier = _summed([self.earlier, result.acceptance])
            self.current = [{} for _ in range(self.n_chains)]
            chain.acceptance, chain.errors, chain.seed = dict(self.earlier), dict(result.errors), self.seed
            chain.interrupted = chain.interrupted or result.interrupted

    def rates(self) -> dict:
        return {k: a / p for k, (a, p) in _summed([self.earlier, *self.current]).items() if p}


def _summed(acceptances) -> dict:
    total = {}
    for acceptance in acceptances:
        for name, (accepted, proposed) in acceptance.items():
            a, p = total.get(name, (0, 0))
            total[name] = (a + accepted, p + proposed)
    return total


class SamplerStream(W.VBox):
    """Run ``kernel`` from ``trace`` in the background with live plots.

    ``steps``: steps per run (Start after a run ended continues the same chain for
    another ``steps``). ``record``: what to record (as for ``run_chain``).
    ``plots``: panels, each a recorded name, ``"log joint"``, ``"acceptance"``, or
    ``(title, function(chain) -> {label: list of values})``. ``picture``:
    ``function(ax, trace)`` drawing the latest trace (e.g. a posterior-predictive
    picture). ``max_rate``: redraws per second at most. ``autostart``: start now.

    ``chains=k`` (k > 1) runs k chains with
    :func:`~imcmc_lab.inference.distributed.run_chains` (``trace``: one start trace
    or a list of k), on ``executor`` (None: the embedded local Dask cluster; a
    ``dask.distributed.Client``; ``"serial"``: this process) with ``seed``; the plots
    draw one line per chain. Pause then holds the chains on their workers, Stop ends
    them all and keeps every sample.

    Buttons: Start (or Resume / Continue), Pause, Stop. Methods ``start()``,
    ``pause()``, ``stop()``, ``wait(timeout)``; ``status`` is one of ``"ready"``,
    ``"running"``, ``"paused"``, ``"stopping"`` (remote chains handing back their
    samples), ``"finished"``, ``"stopped"``, ``"error"``.
    """

    def __init__(self, kernel, trace, steps: int = 1000, record=None, plots=("log joint", "acceptance"),
                 picture=None, thin: int = 1, max_rate: float = 10.0, title=None, autostart=False,
                 figsize=(9.6, None), dpi=96, chains=1, executor=None, seed=None):
        self.kernel = as_kernel(kernel)
        self.steps, self.record, self.thin = int(steps), record, int(thin)
        self.plots, self.picture = list(plots), picture
        self.max_rate = float(max_rate)
        self.figsize, self.dpi = figsize, dpi
        starts = list(trace) if isinstance(trace, (list, tuple)) else [trace] * int(chains)
        if isinstance(trace, (list, tuple)) and chains not in (1, len(starts)):
            raise ValueError(f"SamplerStream got {len(starts)} start traces and chains={chains}; pass one or the other")
        self.chain = Chain(len(starts))
        self.chain.traces[:] = starts
        # several chains run through run_chains (on Dask by default); one runs in a thread here
        self.remote = _RemoteChains(self, len(starts), executor, seed) if len(starts) > 1 else None
        self.target = 0                     # steps_done at the end of the current run
        self.status = "ready"
        self.error = None
        self.refresh_count = 0              # redraws done (for tests of the rate limit)
        self.draw_error = None              # why the last redraw failed (shown in the view)
        self._lock = threading.Lock()
        self._pending = False               # a redraw was requested and not yet done
        self._stop = threading.Event()
        self._resume = threading.Event()
        self._resume.set()
        self._thread = None
        self._loop = None
        self._throttle = Throttle(self.max_rate)
        self._started_at, self._steps_at_start = None, 0
        self._acceptance_history = []       # (steps done, {kernel: running acceptance rate})
        self._acceptance_every = max(1, self.steps // 200)
        self._figure = None
        self._png = b""
        self._static_handle = None          # the saved notebook's picture (display_with_fallback)
        self._resend_armed = False          # the view at rest sends its state again within a cell (after_cell)
        self.static_id = new_static_id()
        self.name = title or self.kernel.name
        detail = "" if self.remote is None else esc(f"{self.chain.n_chains} chains {self.remote.where()}")
        self.header = W.HTML(caption(f"Live sampler — {self.name}", detail))
        # Buttons keep their size (flex 0 0 auto): a long status line must not squeeze them to "Ru…".
        self.start_button = W.Button(description="Start", icon="play", button_style="success",
                                     layout=W.Layout(width="auto", min_width="112px", flex="0 0 auto"))
        self.pause_button = W.Button(description="Pause", icon="pause", disabled=True,
                                     layout=W.Layout(width="auto", min_width="96px", flex="0 0 auto"))
        self.stop_button = W.Button(description="Stop", icon="stop", button_style="danger", disabled=True,
                                    layout=W.Layout(width="auto", min_width="96px", flex="0 0 auto"))
        self.start_button.on_click(lambda _b: self.start())
        self.pause_button.on_click(lambda _b: self.pause())
        self.stop_button.on_click(lambda _b: self.stop())
        self.progress = W.IntProgress(value=0, min=0, max=max(1, self.steps),
                                      layout=W.Layout(width="280px", margin="0 0 0 14px", flex="0 1 auto"))
        self.progress_text = W.HTML("")      # on its own line, below the buttons
        self.image = W.Image(format="png", layout=W.Layout(width="100%", max_width=f"{int(figsize[0] * dpi)}px"))
        controls = W.HBox([self.start_button, self.pause_button, self.stop_button, self.progress],
                          layout=W.Layout(align_items="center"))
        super().__init__([self.header, controls, self.progress_text, self.image, hide_fallback(self.static_id)],
                         layout=W.Layout(width="100%"))
        self.add_class("imcmc-stream")
        self.add_class("imcmc-live")
        self._refresh()
        if autostart:
            self.start()

    # -- control (called from the kernel's main thread) ------------------------------------
    def start(self):
        """Start the run; resume it if paused; continue the chain for another ``steps``
        if the last run ended (finished or stopped)."""
        if self.status == "paused":
            self.status = "running"
            self._resume.set()
            if self.remote is not None:
                self.remote.pause.clear()
            self._refresh()
            return self
        if self.status in ("running", "stopping"):
            return self
        self._loop = _running_loop()
        if self.status == "ready":
            self.kernel.reset_stats()
        self.target = self.chain.steps_done[0] + self.steps
        self._stop.clear()
        self._resume.set()
        self.status = "running"
        self._started_at, self._steps_at_start = time.monotonic(), sum(self.chain.steps_done)
        work = self._work if self.remote is None else self._work_remote
        self._thread = threading.Thread(target=work, args=(self.steps,),
                                        name="imcmc-sampler-stream", daemon=True)
        self._thread.start()
        self._refresh()
        return self

    def pause(self):
        """Pause after the current step (Start resumes)."""
        if self.status == "running":
            self._resume.clear()
            if self.remote is not None:
                self.remote.pause.set()
            self.status = "paused"
            self._refresh()
        return self

    def stop(self):
        """End the run after the current step, keeping every sample (``chain.interrupted``).
        Remote chains stop at their next report and hand their samples back meanwhile
        (status ``"stopping"``; ``wait()`` waits for them) without blocking the kernel."""
        if self.status in ("running", "paused"):
            self._stop.set()
            self._resume.set()
            if self.remote is not None:
                self.remote.pause.clear()
                self.status = "stopping"
            elif self._thread is not None:
                self._thread.join()
            self._refresh()
        return self

    def wait(self, timeout=None):
        """Block until the run ends (or ``timeout`` seconds), redrawing from this thread at the
        bounded rate meanwhile; returns the chain."""
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = 1.0 / self.max_rate if self.max_rate > 0 else 0.05
        while self._thread is not None and self._thread.is_alive():
            if deadline is not None and time.monotonic() >= deadline:
                break
            self._thread.join(min(interval, 0.05))
            if self._pending:
                self._refresh()
        self._refresh()
        return self.chain

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- the worker thread -------------------------------------------------------------------
    def _work(self, steps):
        try:
            run_chain(self.kernel, None, steps, record=self.record, thin=self.thin, progress=False,
                      callback=self._on_step, chain=self.chain)
            self.status = "finished"
        except _Stopped:
            self.chain.interrupted = True
            self.status = "stopped"
        except Exception as exc:      # shown in the view; the samples so far are kept
            self.error = exc
            self.chain.interrupted = True
            self.status = "error"
        finally:
            self._request_refresh(force=True)

    def _work_remote(self, steps):
        try:
            result, self.error = self.remote.run(steps)
            self.status = "error" if self.error else ("stopped" if result.interrupted else "finished")
        except Exception as exc:      # (run_chains' own argument errors, an unpicklable kernel)
            self.error = exc
            self.status = "error"
        finally:
            self._request_refresh(force=True)

    def _on_step(self, _chain_index, _step, _trace):
        """run_chain's callback, in the worker thread: stop, pause, or ask for a redraw."""
        if self._stop.is_set():
            raise _Stopped
        if not self._resume.is_set():
            self._request_refresh(force=True)
            self._resume.wait()
            if self._stop.is_set():
                raise _Stopped
        done = self.chain.steps_done[0]
        if done % self._acceptance_every == 0:    # ~200 points per run for the acceptance plot
            rates = {k: a / p for k, (a, p) in self.kernel.acceptance().items() if p}
            self._acceptance_history.append((done, rates))
        self._request_refresh()

    def _request_refresh(self, force=False):
        """Ask the widget thread for a redraw: at most ``max_rate`` a second, and never more
        than one outstanding."""
        if not force and not self._throttle.ready():
            return
        with self._lock:
            if self._pending:
                return
            self._pending = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._refresh)

    # -- drawing (widget thread only) ---------------------------------------------------------
    def _refresh(self):
        with self._lock:
            self._pending = False
        t0 = time.monotonic()
        k = self.chain.n_chains
        done, total = sum(self.chain.steps_done), (self.target or self.steps) * k
        # (before the first Start the kernel may hold an earlier chain's counts: show none)
        rates = {} if self.status == "ready" else self._rates()
        self.progress.max = max(1, total)
        self.progress.value = min(done, self.progress.max)
        self.progress.bar_style = {"finished": "success", "stopped": "warning", "error": "danger"}.get(
            self.status, "info")
        speed = ""
        if self._started_at is not None and self.status == "running":
            elapsed = time.monotonic() - self._started_at
            if elapsed > 0.2:
                speed = f" · {(done - self._steps_at_start) / elapsed:,.0f} steps/s"
        acc = " · ".join(f"{esc(k)} {v:.2f}" for k, v in rates.items())
        chains = f" in {k} chains" if k > 1 else ""
        text = (f"<span class='imcmc-stream-status' style='font:12.5px {_font()};color:{MUTED}'>"
                f"<b style='color:#1f2328'>{done:,}</b> / {total:,} steps{chains}{speed}"
                f" · <b>{esc(self.status)}</b>{(' · accepted: ' + acc) if acc else ''}</span>")
        try:
            self._png = self._draw()
            self.image.value = self._png
            self.draw_error = None
        except Exception as exc:     # shown in the view: under an event loop nobody sees a traceback
            self.draw_error = exc
            self._figure = None      # start from a fresh figure next time
        for what, exc in (("the chain stopped", self.error), ("the plot could not be redrawn", self.draw_error)):
            if exc is not None:
                text += (f"<div class='imcmc-error' style='color:#cf222e;font:12.5px {_font()}'>{what}: "
                         f"{esc(type(exc).__name__)}: {esc(exc)}</div>")
        self.progress_text.value = text
        running = self.status in ("running", "stopping")
        self.start_button.disabled = running
        self.start_button.description = {"running": "Running", "stopping": "Stopping", "paused": "Resume",
                                         "finished": "Continue",
                                         "stopped": "Continue", "error": "Continue"}.get(self.status, "Start")
        self.pause_button.disabled = self.status != "running"
        self.stop_button.disabled = self.status not in ("running", "paused")
        if self._static_handle is not None and not running:
            self._static_handle.update(self.static_bundle(), raw=True)
        if not running and self.status != "ready" and not self._resend_armed:
            self._resend_armed = True
            after_cell(self._save_rest_state)
        self.refresh_count += 1
        self._throttle.cost(time.monotonic() - t0)

    def _rates(self) -> dict:
        if self.remote is not None:
            return self.remote.rates()
        return {k: a / p for k, (a, p) in self.kernel.acceptance().items() if p}

    def _panels(self):
        panels = list(self.plots)
        if self.picture is not None:
            panels.append(("picture", self.picture))
        return panels

    def _make_figure(self):
        """One figure for the whole run; redraws only move its lines (matplotlib's object
        API: no pyplot state, safe next to the worker thread)."""
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        panels = self._panels()
        n = max(1, len(panels))
        cols = 2 if n > 1 else 1
        rows = math.ceil(n / cols)
        height = self.figsize[1] or 2.6 * rows
        fig = Figure(figsize=(self.figsize[0], height), dpi=self.dpi, facecolor="white")
        # A fixed layout: tight_layout would render the figure once more on every redraw.
        fig.subplots_adjust(left=0.075, right=0.985, top=1 - 0.36 / height, bottom=0.55 / height,
                            hspace=0.55, wspace=0.2)
        self._axes = []
        for index, panel in enumerate(panels):
            ax = fig.add_subplot(rows, cols, index + 1)
            _style_axes(ax)
            entry = {"panel": panel, "lines": {}}
            if isinstance(panel, tuple) and panel[0] == "picture":
                title = "latest state"
            elif isinstance(panel, tuple):
                title = panel[0]
            elif panel == "log joint":
                title = "log joint density of the trace (latent choices and data)"
            elif panel == "acceptance":
                title = "acceptance rate (running)"
                ax.set_ylim(-0.03, 1.03)
            else:
                title = str(panel)
            ax.set_title(_plain(title), loc="left", fontsize=10, color="#1f2328")
            if not (isinstance(panel, tuple) and panel[0] == "picture"):
                ax.set_xlabel("step", fontsize=9, color=MUTED, labelpad=2)
            entry["integer"] = MaxNLocator(integer=True)
            self._axes.append((ax, entry))
        return fig

    def _draw(self) -> bytes:
        """The plots as PNG bytes."""
        if self._figure is None:
            self._figure = self._make_figure()
        per_chain = self._snapshot()
        x_max = max(self.target or self.steps, 1)
        for index, (ax, entry) in enumerate(self._axes):
            panel = entry["panel"]
            if isinstance(panel, tuple) and panel[0] == "picture":
                ax.cla()
                _style_axes(ax)
                ax.set_title("latest state", loc="left", fontsize=10, color="#1f2328")
                if self.chain.trace is not None:
                    try:
                        panel[1](ax, self.chain.trace)
                    except Exception as exc:     # a broken picture must not stop the view
                        ax.text(0.02, 0.5, f"{type(exc).__name__}: {exc}", transform=ax.transAxes,
                                color="#cf222e", fontsize=9)
                continue
            if isinstance(panel, tuple):
                series = {label: (list(range(1, len(v) + 1)), list(v)) for label, v in panel[1](self.chain).items()}
            elif panel == "log joint":
                series = {label or "log joint": (steps, scores) for label, steps, _samples, scores in per_chain}
            elif panel == "acceptance":
                series = {}
                for done, rates in list(self._acceptance_history):
                    for name, rate in rates.items():
                        xs, ys = series.setdefault(name, ([], []))
                        xs.append(done)
                        ys.append(rate)
            else:
                series = {label or panel: (steps, [_scalar(s.get(panel, math.nan)) for s in samples])
                          for label, steps, samples, _scores in per_chain}
            added, values = False, []
            for k, (label, (xs, ys)) in enumerate(series.items()):
                stride = max(1, len(xs) // 2000)     # the picture cannot show more points
                xs, ys = xs[::stride], ys[::stride]
                line = entry["lines"].get(label)
                if line is None:
                    line, = ax.plot(xs, ys, color=self._colour(panel, index, k), label=_plain(label),
                                    lw=1.0 if self.chain.n_chains > 1 else 1.2,
                                    alpha=0.75 if self.chain.n_chains > 1 else 1.0)   # overlapping chains show through
                    entry["lines"][label] = line
                    added = True
                else:
                    line.set_data(xs, ys)
                values += [y for y in ys if not math.isnan(y)]
            if added and (panel == "acceptance" or (self.chain.n_chains > 1 and index == 0)):
                # a white ground under the labels: the lines run behind the legend
                ax.legend(fontsize=8, loc="upper right", frameon=True, facecolor="white", edgecolor="none",
                          framealpha=0.85, ncol=1 if panel == "acceptance" else min(4, self.chain.n_chains))
            entry["integers"] = (bool(values) and all(float(y).is_integer() for y in values)
                                 and panel not in ("log joint", "acceptance"))
            if entry["integers"]:     # a discrete quantity (number of clusters): steps, integer ticks
                for line in entry["lines"].values():
                    line.set_drawstyle("steps-post")
                ax.yaxis.set_major_locator(entry["integer"])
                lo, hi = min(values), max(values)
                ax.set_ylim(lo - (1.0 if lo == hi else 0.5), hi + (1.0 if lo == hi else 0.5))
            ax.set_xlim(0, x_max)
            if panel != "acceptance" and not entry.get("integers"):
                ax.relim()
                ax.autoscale_view(scalex=False)
        buf = io.BytesIO()
        self._figure.savefig(buf, format="png", facecolor="white")
        return buf.getvalue()

    def _colour(self, panel, index, k):
        """Several chains: one colour per chain in every panel; one chain: per panel and series."""
        if self.chain.n_chains > 1 and panel != "acceptance" and not isinstance(panel, tuple):
            return PALETTE[k % len(PALETTE)]
        return PALETTE[(index + k) % len(PALETTE)] if panel != "log joint" else PALETTE[0]

    def _snapshot(self):
        """``[(label, steps, samples, scores)]`` per chain, copied: the worker (or a Dask client
        thread) appends meanwhile. The label is None for a single chain."""
        out = []
        for c in range(self.chain.n_chains):
            samples = list(self.chain.samples[c])
            scores = list(self.chain.scores[c][: len(samples)])
            samples = samples[: len(scores)]
            steps = [(i + 1) * self.thin for i in range(len(samples))]
            out.append((f"chain {c + 1}" if self.chain.n_chains > 1 else None, steps, samples, scores))
        return out

    def __repr__(self):
        steps = self.chain.steps_done[0] if self.chain.n_chains == 1 else self.chain.steps_done
        return f"<SamplerStream {self.kernel.name}: {self.status}, {steps} steps>"

    # -- what a saved notebook shows -------------------------------------------------------------
    def static_bundle(self) -> dict:
        """The picture a saved notebook, an HTML export or a preview shows: the title, the
        status line and the plots as they were at the last redraw (updated when a run ends)."""
        import base64

        image = (f"<img alt='{esc(self.name)} plots' style='max-width:100%' "
                 f"src='data:image/png;base64,{base64.b64encode(self._png).decode()}'>" if self._png else "")
        return {"text/html": f"<div class='imcmc-static {self.static_id}'>{self.header.value}"
                             f"{self.progress_text.value}{image}</div>{fallback_style(self.static_id)}",
                "text/plain": repr(self)}

    def _save_rest_state(self):
        """The view at rest (finished, stopped, paused, failed) sends its whole state and static
        picture again from inside a cell: a run usually ends between cells, and a headless run
        (``nbconvert --execute``) would otherwise save the view as it was first shown
        (``after_cell``). Every redraw at rest arms this again: the run's last redraw may come
        after the cell that showed the end (an event-loop callback between cells)."""
        self._resend_armed = False
        if self.status in ("running", "stopping"):     # a new run began: its end sends again
            return
        resend_state(self)
        if self._static_handle is not None:
            self._static_handle.update(self.static_bundle(), raw=True)

    def _ipython_display_(self):
        self._static_handle = display_with_fallback(self, self.static_bundle(), display_id=True)


def _font():
    return SANS.replace("'", "")


def _plain(text) -> str:
    """``text`` for a matplotlib label, shown as written: ``$`` would start mathtext."""
    return str(text).replace("$", r"\$")


def _scalar(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _style_axes(ax):
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_color("#d0d7de")
    ax.tick_params(colors="#656d76", labelsize=8.5)
    ax.grid(True, color="#eef1f4", lw=0.8)
    ax.set_axisbelow(True)


def _running_loop():
    """The event loop of the calling thread (a Jupyter kernel's), or None outside one."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
