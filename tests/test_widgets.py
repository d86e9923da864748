"""The widgets' state, from known move records and chains (no browser: see test_browser.py).

* involution schematic: stages, addresses read / written / copied / kept, copy connectors
  of a subtree swap, a broken involution, frame count and the frame controls;
* Jacobian view: labels, eliminated coordinates (copy, implicit, collapsed observations),
  blocks and their log-determinants as the engine recorded them;
* live sampler: start / pause / resume / stop / continue, the chain kept and converted to
  ArviZ, redraws at a bounded rate and always on one thread;
* trace display: the Graphviz address tree, escaping of an address containing <script>,
  a clear error without `dot`;
* the demo notebook runs under nbclient with the four views.
"""

from __future__ import annotations

import asyncio
import math
import pathlib
import subprocess
import sys
import threading
import time

import pytest
import torch

import imcmc_lab as il
from imcmc_lab import continuous, copy, read, write
from imcmc_lab.examples import gp_structure as gp
from imcmc_lab.examples.two_clusters import initial_trace, split_aux, split_merge
from imcmc_lab.transform.interpreter import AUX, MODEL
from test_jacobian import four_normals, two_bijections   # the two-block transform of the Jacobian tests

W = pytest.importorskip("imcmc_lab.widgets")

EVIL = "<script>alert('x')</script>"
DATA = torch.tensor([-2.1, -1.7, -2.5, 1.9, 2.3, 2.0, 1.1, -0.4], dtype=torch.float64)


def split_record(seed=1):
    """A split move of the two-cluster example (k = 1 -> 2), paper Sec. 4.2.1."""
    torch.manual_seed(seed)
    return il.involutive_move(initial_trace(DATA), split_aux, (), split_merge)


# ---------------------------------------------------------------------------
# involution schematic
# ---------------------------------------------------------------------------
def test_schematic_stages_of_a_split():
    record = split_record()
    st = W.involution_stages(record)
    assert st.n_frames == 3
    addresses = [[r.address for r in rows] for rows, _aux in st.pairs]
    assert addresses[0] == [("k",), ("mu",), ("mu", 1), ("x",)]
    assert addresses[1] == [("k",), ("mu",), ("mu", 1), ("mu", 2), ("x",)]
    assert addresses[2] == addresses[0]
    assert [r.address for r in st.pairs[0][1]] == [("u",)] and st.pairs[1][1] == []
    # Frame 0: what f reads. Frame 1: what it wrote and kept. Frame 2: the second application.
    assert st.roles[0][0] == {(MODEL, ("k",)): "read", (MODEL, ("mu", 1)): "read", (AUX, ("u",)): "read"}
    assert st.roles[0][1] is None and st.roles[0][2] is None
    out = st.roles[1][1]
    assert {a for (s, a), r in out.items() if r == "written"} == {("k",), ("mu", 1), ("mu", 2)}
    assert {a for (s, a), r in out.items() if r == "kept"} == {("x",)}
    assert st.roles[2][2][(AUX, ("u",))] == "written"
    assert st.returns_to_start is True and st.error is None
    # The last stage shows the values of the first (an involution).
    assert [r.value for r in st.pairs[2][0]] == [r.value for r in st.pairs[0][0]]
    assert st.pairs[1][0][3].value == il.core.values.format_value(record.model_out["mu", 2])


def test_schematic_widget_frames_and_controls():
    record = split_record()
    view = W.InvolutionSchematic(record)
    assert len(view.frames) == 3 and len(view.stack.children) == 3
    assert view.play.min == 0 and view.play.max == 2 and view.play.repeat
    assert list(view.selector.options) == ["start (x, y)", "after f: (x′, y′)", "after f twice"]
    linked = {(l.source[0], l.source[1], l.target[0], l.target[1]) for l in view.links}
    assert (view.play, "value", view.selector, "index") in linked
    assert (view.selector, "index", view.stack, "selected_index") in linked
    for i, frame in enumerate(view.frames):
        assert f'data-stage="{i}"' in frame
    assert 'data-address="mu, 2" data-side="model" data-role="written"' in view.frames[1]
    assert 'data-address="u" data-side="aux" data-role="read"' in view.frames[0]
    assert "✓ involution" in view.frames[2]
    view.show(2)
    assert view.stack.selected_index == 2 and view.selector.index == 2
    bundle = view._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    static = bundle["text/html"]        # self-contained fallback: every frame, and a player
    assert static.count("class='imcmc-frame'") == 3 and "imcmc-play" in static


def test_schematic_says_whether_the_move_was_accepted():
    # (issue 17) a rejected split was shown as if the chain had moved
    record = split_record()
    view = W.InvolutionSchematic(record)
    verdict = "accepted: the chain moves to x′" if record.accepted else "rejected: the chain stays at x"
    assert "imcmc-verdict" not in view.frames[0]
    assert verdict in view.frames[1] and verdict in view.frames[2]
    record.accepted = not record.accepted
    flipped = W.InvolutionSchematic(record).frames[1]
    assert ("rejected: the chain stays at x" if record.accepted is False else "accepted: the chain moves") in flipped


def test_schematic_of_a_subtree_swap_draws_namespace_copies():
    """Paper Fig. 2f: the copied subtrees are drawn as one connector each and outlined."""
    xs, ys = gp.synthetic_data(n=10)
    torch.manual_seed(1)
    trace = gp.initial_trace(xs, ys)
    while trace["cov_function"].size != 3:
        trace = gp.initial_trace(xs, ys)
    torch.manual_seed(3)
    record = il.involutive_move(trace, gp.subtree_aux, (gp.walk_tree,), gp.swap_subtree)
    while record.model_out["cov_function"].size <= 3:
        record = il.involutive_move(trace, gp.subtree_aux, (gp.walk_tree,), gp.swap_subtree)
    st = W.involution_stages(record)
    picked = record.aux_in[()]                       # the model address of the swapped node
    connectors = st.connectors[1]
    assert ((MODEL, picked), (AUX, ("new_subtree",))) in connectors
    assert ((AUX, ("new_subtree",)), (MODEL, picked)) in connectors
    assert ((AUX, ("path",)), (AUX, ("path",))) in connectors
    assert len(connectors) == 3                      # not one line per copied leaf
    assert all(role == "copied" for (side, a), role in st.roles[1][1].items()
               if side == MODEL and a[: len(picked)] == picked)
    assert st.returns_to_start is True
    view = W.InvolutionSchematic(record)
    assert view.frames[1].count('class="imcmc-copy"') == 3
    assert 'class="imcmc-subtree"' in view.frames[1]
    assert "reads q&#x27;s return value" in view.frames[0]


@il.gen
def one_normal():
    il.normal(0.0, 1.0) @ "x"


@il.gen
def one_step(trace):
    il.normal(0.0, 1.0) @ "eps"


@il.transform
def not_an_involution(model_in, aux_in, model_out, aux_out):
    # A random walk that forgets to negate the step: f(f(x, e)) = (x + 2e, e).
    x, eps = read(model_in["x"], continuous), read(aux_in["eps"], continuous)
    write(model_out["x"], x + eps, continuous)
    write(aux_out["eps"], eps, continuous)


def test_schematic_shows_where_a_broken_involution_differs():
    torch.manual_seed(0)
    record = il.involutive_move(one_normal.simulate(), one_step, (), not_an_involution)
    st = W.involution_stages(record)
    assert st.returns_to_start is False
    assert [a for a, _before, _after in st.difference[0].differ] == [("x",)]
    assert st.roles[2][2][(MODEL, ("x",))] == "differs"
    view = W.InvolutionSchematic(record)
    assert "✗ not an involution" in view.frames[2] and 'data-role="differs"' in view.frames[2]


def test_schematic_shows_a_failed_second_application(monkeypatch):
    def broken_round_trip(*args, **kwargs):
        raise il.TransformError("no way back from <here>")

    monkeypatch.setattr(W.schematic, "round_trip", broken_round_trip)
    st = W.involution_stages(split_record())
    assert st.second is None and st.returns_to_start is None and len(st.pairs) == 2
    assert st.error == "TransformError: no way back from <here>"
    view = W.InvolutionSchematic(split_record())
    assert len(view.frames) == 3 and "no way back from &lt;here&gt;" in view.frames[2]


# ---------------------------------------------------------------------------
# Jacobian view
# ---------------------------------------------------------------------------
def test_jacobian_view_labels_blocks_and_implicit_copies():
    torch.manual_seed(1)
    app = il.apply_transform(two_bijections, four_normals.simulate())
    jac = app.jacobian
    lay = W.JacobianLayout(jac)
    assert lay.row_labels == ["model_out[a]", "model_out[b]", "model_out[c]", "model_out[d]",
                              "model_out[m][0]", "model_out[m][1]"]
    assert lay.col_labels == [l.replace("out", "in") for l in lay.row_labels]
    assert lay.row_kind == {4: "implicit", 5: "implicit"} and lay.col_kind == {4: "implicit", 5: "implicit"}
    assert lay.partner == {4: 4, 5: 5}
    assert sorted((sorted(r), sorted(c)) for r, c, _ in lay.block_groups) == [([0, 1], [0, 1]), ([2, 3], [2, 3])]
    assert [ld for _r, _c, ld in lay.block_groups] == [b.logabsdet for b in jac.blocks]
    assert any(ld == pytest.approx(math.log(7.0)) for _r, _c, ld in lay.block_groups)   # det [[2,-1],[1,3]]
    rows, cols = lay.order("block")
    assert rows[4:] == [4, 5] and cols[4:] == [4, 5]            # eliminated pairs last, on a diagonal
    assert lay.cells[(0, 1)] == (-1.0, None) and lay.cells[(4, 4)] == (1.0, "implicit")
    view = W.JacobianView(app)
    assert view.control == "toggle" and list(view.selector.options) == ["address order", "block order"]
    assert view.frames[1].count('class="imcmc-block"') == 2 and 'class="imcmc-block"' not in view.frames[0]
    header = view.children[0].value
    assert "full 6 × 6" in header and "2 eliminated (2 implicit copy)" in header
    assert "reduced 4 × 4 in 2 blocks" in header and f"{jac.logabsdet:.4g}" in header
    assert "&lt;" not in header


def test_jacobian_view_of_a_split_collapses_the_observations():
    record = split_record()
    lay = W.JacobianLayout(record.jacobian)
    n = len(DATA)
    assert lay.shape == (n + 2, n + 2)
    assert lay.row_labels == ["model_out[mu, 1]", "model_out[mu, 2]", f"model_out[x][0…{n - 1}]"]
    assert lay.col_labels == ["model_in[mu, 1]", f"model_in[x][0…{n - 1}]", "aux_in[u]"]
    assert lay.row_kind == {2: "implicit"} and lay.cells[(2, 1)] == (None, "implicit")
    assert lay.eliminated_counts() == {"implicit": n}
    (rows, cols, logdet), = lay.block_groups
    assert (rows, cols) == ([0, 1], [0, 2]) and logdet == pytest.approx(math.log(2.0))   # |det [[1,-1],[1,1]]|
    assert "kept (implicit copy) × 8" in W.jacobian.render_matrix(lay)


@il.transform
def swap_copies(model_in, aux_in, model_out, aux_out):
    copy(model_in["a"], model_out["b"])
    copy(model_in["b"], model_out["a"])
    c = read(model_in["c"], continuous)
    write(model_out["c"], -c, continuous)


def test_jacobian_view_marks_explicit_copies():
    torch.manual_seed(2)
    lay = W.JacobianLayout(il.apply_transform(swap_copies, four_normals.simulate()).jacobian)
    assert lay.row_kind[0] == "copy" and lay.row_kind[1] == "copy"
    assert lay.cells[(0, 1)] == (1.0, "copy") and lay.cells[(1, 0)] == (1.0, "copy")
    svg = W.jacobian.render_matrix(lay)
    assert "copy of model_in[b]" in svg and "copy of model_in[a]" in svg
    assert lay.block_groups[0][2] == pytest.approx(0.0)


def test_jacobian_view_prints_small_matrices_entries_and_the_determinant():
    torch.manual_seed(1)
    app = il.apply_transform(two_bijections, four_normals.simulate())
    view = W.JacobianView(app)
    # each partial derivative of this 6 x 6 matrix is printed in its cell, not only a dark square
    assert view.frames[0].count('class="imcmc-value"') == 10     # two 2 x 2 blocks and two unit entries
    assert ">2<" in view.frames[0] and ">−1<" in view.frames[0] and ">3<" in view.frames[0]
    header = view.children[0].value
    assert "(|det J| = " in header and f"{math.exp(app.jacobian.logabsdet):.4g}" in header
    assert "|det J|</td>" in view.static_html()        # the table's last line
    # the block-order subtitle fits in its picture (it was cut off at the right)
    block = view.frames[1]
    width = float(block.split('width="')[1].split('"')[0])
    subtitle = "Rows: output coordinates · columns: input coordinates · blocks on the diagonal, eliminated coordinates last"
    assert subtitle in block and width >= W._style.sans_width(subtitle, 12.5)


# ---------------------------------------------------------------------------
# large traces (issue 16, item 17): views collapse untouched coordinates
# ---------------------------------------------------------------------------
@il.gen
def many_normals(n):
    mu = il.normal(0.0, 1.0) @ "mu"
    for i in range(n):
        il.normal(mu, 1.0) @ ("x", i)


@il.gen
def mu_step(trace):
    il.normal(0.0, 0.5) @ "u"


@il.transform
def shift_mu(model_in, aux_in, model_out, aux_out):
    mu, u = read(model_in["mu"], continuous), read(aux_in["u"], continuous)
    write(model_out["mu"], mu + u, continuous)
    write(aux_out["u"], -u, continuous)


def test_views_of_a_large_trace_stay_small(monkeypatch):
    torch.manual_seed(0)
    record = il.involutive_move(many_normals.simulate(2000), mu_step, (), shift_mu)
    schematic = W.InvolutionSchematic(record)
    size = sum(map(len, schematic.frames))
    assert size < 150_000, size                        # was 20 MB: one row per choice in 3 frames
    rows, _aux = schematic.stages.pairs[0]
    assert [r.address for r in rows if not r.omitted][:1] == [("mu",)]
    assert "2,000 more choices, not touched" in schematic.frames[0]
    # the Jacobian view never builds the 2001 x 2001 dense matrix
    monkeypatch.setattr(type(record.jacobian), "dense", lambda self: pytest.fail("dense Jacobian built"))
    view = W.JacobianView(record)
    assert sum(map(len, view.frames)) < 60_000
    header = view.children[0].value
    assert "full 2,002 × 2,002" in header and "2,000 eliminated (2,000 implicit copy)" in header
    assert "kept (implicit copy) × 2,000" in view.frames[0]
    lay = view.layout_data
    assert lay.block_groups[0][2] == pytest.approx(record.jacobian.logabsdet)


# ---------------------------------------------------------------------------
# escaping
# ---------------------------------------------------------------------------
@il.gen
def evil_model():
    il.normal(0.0, 1.0) @ (EVIL, 1)
    il.bernoulli(0.5) @ "flag"


@il.gen
def evil_aux(trace):
    il.normal(0.0, 1.0) @ EVIL


@il.transform
def evil_walk(model_in, aux_in, model_out, aux_out):
    x, e = read(model_in[EVIL, 1], continuous), read(aux_in[EVIL], continuous)
    write(model_out[EVIL, 1], x + e, continuous)
    write(aux_out[EVIL], -e, continuous)


def test_user_text_is_escaped_in_every_view():
    torch.manual_seed(0)
    trace = evil_model.simulate()
    record = il.involutive_move(trace, evil_aux, (), evil_walk)
    schematic = W.InvolutionSchematic(record)
    jacobian = W.JacobianView(record)
    for view in (schematic, jacobian):
        texts = view.frames + [c.value for c in view.children if hasattr(c, "value") and isinstance(c.value, str)]
        for text in texts:
            assert "<script" not in text.lower()
        assert any("&lt;script&gt;" in t for t in texts)
        static = view.static_html()
        assert static.lower().count("<script") == 1           # only the player's own script
    tree = W.trace_tree(trace).svg()
    assert "<script" not in tree.lower() and "&lt;script&gt;" in tree
    assert "<script" not in trace._repr_html_().lower()


# ---------------------------------------------------------------------------
# trace tree
# ---------------------------------------------------------------------------
def test_trace_tree_draws_namespaces_and_leaves():
    xs, ys = gp.synthetic_data(n=6)
    torch.manual_seed(5)
    trace = gp.initial_trace(xs, ys)
    tree = W.trace_tree(trace, highlight={("cov_function", "node_type"): "written"})
    source = tree.digraph.source
    leaves = trace.flat_records()
    namespaces = {a[:d] for a in leaves for d in range(1, len(a))}
    assert source.count("->") == len(leaves) + len(namespaces)      # one edge into every node but the root
    assert "#fff1e5" in source                                       # the highlighted address
    svg = tree.svg()
    assert svg.count('class="node"') == 1 + len(leaves) + len(namespaces)
    assert "image/svg+xml" in tree._repr_mimebundle_()


def test_trace_tree_without_dot_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(W.tree.shutil, "which", lambda name: None)
    tree = W.trace_tree(initial_trace(DATA))
    with pytest.raises(W.DotNotFound, match="apt-get install graphviz"):
        tree.svg()
    bundle = tree._repr_mimebundle_()
    assert "image/svg+xml" not in bundle and "apt-get install graphviz" in bundle["text/html"]


# ---------------------------------------------------------------------------
# live sampler
# ---------------------------------------------------------------------------
@il.gen
def normal_mean(n):
    mu = il.normal(0.0, 1.0) @ "mu"
    il.iid(il.normal(mu, 1.0), n) @ "y"


def normal_stream(steps, **kwargs):
    trace, _ = normal_mean.generate((3,), {"y": torch.tensor([0.5, 1.0, 1.5])})
    kernel = il.MH(il.select("mu"), name="mh mu")
    return W.SamplerStream(kernel, trace, steps=steps, record={"mu": "mu"}, plots=["mu", "log joint", "acceptance"],
                           **kwargs)


def _wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_stream_start_pause_resume_stop_continue():
    torch.manual_seed(0)
    stream = normal_stream(steps=100_000)
    assert stream.status == "ready" and stream.start_button.description == "Start"
    stream.start()
    _wait_for(lambda: stream.chain.steps_done[0] >= 30)
    stream.pause()
    assert stream.status == "paused" and stream.start_button.description == "Resume"
    assert stream.pause_button.disabled and not stream.stop_button.disabled
    time.sleep(0.05)                       # let the worker finish the step it was in
    paused_at = stream.chain.steps_done[0]
    time.sleep(0.3)
    assert stream.chain.steps_done[0] == paused_at and stream.running      # no step while paused
    stream.start()                         # resume
    _wait_for(lambda: stream.chain.steps_done[0] >= paused_at + 30)
    stream.stop()
    stopped_at = stream.chain.steps_done[0]
    assert stream.status == "stopped" and not stream.running and stream.chain.interrupted
    assert 0 < stopped_at < stream.target
    assert len(stream.chain.samples[0]) == stopped_at == len(stream.chain.scores[0])
    assert stream.start_button.description == "Continue" and stream.stop_button.disabled
    assert stream.progress.value == stopped_at
    idata = stream.chain.to_arviz()
    assert idata.posterior["mu"].shape == (1, stopped_at)
    # Continue: the same chain goes on from its last state, for another `steps`.
    stream.steps = 50
    last = stream.chain.trace
    stream.start()
    chain = stream.wait(timeout=30)
    assert stream.status == "finished" and chain is stream.chain
    assert chain.steps_done[0] == stream.target == stopped_at + 50 == len(chain.samples[0])
    assert chain.traces[0] is not last
    assert stream.progress.value == stream.progress.max == stopped_at + 50


def test_stream_redraws_at_a_bounded_rate_on_one_thread():
    """Inside a running event loop (as in a Jupyter kernel) the worker hands redraws to the
    loop's thread; they never outpace max_rate."""
    torch.manual_seed(1)
    stream = normal_stream(steps=1_000_000, max_rate=5.0)
    threads = []
    original = stream._refresh

    def spy():
        threads.append(threading.current_thread())
        original()

    stream._refresh = spy

    async def run():
        stream.start()
        assert stream._loop is asyncio.get_running_loop()
        t0 = time.monotonic()
        await asyncio.sleep(1.5)
        stream.stop()
        return time.monotonic() - t0

    count_before = stream.refresh_count
    elapsed = asyncio.run(run())
    redraws = stream.refresh_count - count_before
    assert set(threads) == {threading.main_thread()}
    # start + stop redraw directly; the rest come from the worker, at most max_rate a second.
    assert 3 <= redraws <= 2 + math.ceil(elapsed * 5.0) + 1
    assert stream.chain.steps_done[0] > 20


def test_throttle_limits_events_and_backs_off_after_slow_ones():
    now = [0.0]
    t = W.Throttle(10.0, clock=lambda: now[0])
    assert t.ready()
    now[0] = 0.05
    assert not t.ready()
    now[0] = 0.1
    assert t.ready()
    t.cost(0.2)                       # a redraw that took 0.2 s: wait 0.4 s before the next
    now[0] = 0.3
    assert not t.ready()
    now[0] = 0.5
    assert t.ready()


def test_stream_error_is_shown_and_samples_are_kept():
    torch.manual_seed(2)
    trace, _ = normal_mean.generate((3,), {"y": torch.tensor([0.5, 1.0, 1.5])})
    calls = []

    def flaky(tr):
        calls.append(1)
        if len(calls) > 5:
            raise RuntimeError("kernel <b>broke</b>")
        return tr, True

    stream = W.SamplerStream(il.inference.kernels.as_kernel(flaky), trace, steps=50, plots=["log joint"])
    stream.start()
    stream.wait(timeout=20)
    assert stream.status == "error" and len(stream.chain.samples[0]) == 5
    assert "kernel &lt;b&gt;broke&lt;/b&gt;" in stream.progress_text.value


# ---------------------------------------------------------------------------
# packaging and the demo notebook
# ---------------------------------------------------------------------------
def test_stream_draws_names_with_dollar_signs_as_written():
    # (issue 16, item 18) "$" starts matplotlib mathtext: "x$_$y" raised a ValueError
    trace, _ = normal_mean.generate((3,), {"y": torch.tensor([0.5, 1.0, 1.5])})
    kernel = il.MH(il.select("mu"), name="mh $_$ kernel")
    stream = W.SamplerStream(kernel, trace, steps=5, record={"x$_$y": "mu"},
                             plots=["x$_$y", "acceptance"])
    stream.start().wait(20)
    assert stream.status == "finished" and stream.draw_error is None
    assert len(stream.image.value) > 1000


def test_stream_shows_a_failed_redraw_in_the_view():
    # (issue 16, item 18) under an event loop a failing redraw froze the plot without a word
    def broken(chain):
        raise ZeroDivisionError("the panel's own bug")

    trace, _ = normal_mean.generate((3,), {"y": torch.tensor([0.5, 1.0, 1.5])})
    stream = W.SamplerStream(il.MH(il.select("mu")), trace, steps=5, record={"mu": "mu"},
                             plots=[("broken panel", broken)])
    assert isinstance(stream.draw_error, ZeroDivisionError)
    assert "could not be redrawn" in stream.progress_text.value and "the panel&#x27;s own bug" in stream.progress_text.value
    stream.start().wait(20)
    assert stream.status == "finished" and len(stream.chain.samples[0]) == 5    # the chain is unharmed


def test_stream_polish_buttons_title_and_fresh_acceptance():
    first = normal_stream(20)
    first.start().wait(20)
    assert first.kernel.acceptance()
    # a new sampler with the same kernel starts fresh: no acceptance rates from the earlier chain
    second = W.SamplerStream(first.kernel, first.chain.trace, steps=5, plots=["log joint"])
    assert "accepted" not in second.progress_text.value
    # the buttons keep their size; the status line is on its own row, not squeezing them
    for button in (second.start_button, second.pause_button, second.stop_button):
        assert button.layout.flex == "0 0 auto"
    controls = second.children[1]
    assert second.progress_text not in controls.children
    # the log-joint panel says what it plots (it read "log p(x, b)" with an unexplained b)
    title = second._axes[0][0].get_title(loc="left")
    assert "b)" not in title and "log joint density" in title


def test_views_leave_a_static_picture_beside_the_widget(monkeypatch):
    """Displayed in a notebook, each view leaves two outputs: the static fallback, then the widget."""
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display",
                        lambda obj, raw=False, display_id=None: shown.append(obj) or _Handle(shown, len(shown) - 1))
    record = split_record()
    for view in (W.InvolutionSchematic(record), W.JacobianView(record)):
        shown.clear()
        view._ipython_display_()
        static, live = shown
        assert "<svg" in static["text/html"] and view.static_id in static["text/html"]
        assert "application/vnd.jupyter.widget-view+json" in live
        assert view.static_id in view.children[-1].value           # the live widget hides the fallback
    stream = normal_stream(5)
    shown.clear()
    stream._ipython_display_()
    stream.start().wait(20)
    final = shown[0]
    assert ">5</b> / 5 steps" in final["text/html"] and "finished" in final["text/html"]
    assert "data:image/png;base64," in final["text/html"]


class _Handle:
    def __init__(self, shown, index):
        self.shown, self.index = shown, index

    def update(self, obj, raw=False):
        self.shown[self.index] = obj


def test_engine_imports_no_widgets_and_il_widgets_is_lazy():
    code = ("import sys, imcmc_lab as il; assert 'ipywidgets' not in sys.modules and 'IPython' not in sys.modules; "
            "w = il.widgets; assert 'ipywidgets' in sys.modules and w.InvolutionSchematic")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_widgets_demo_notebook_runs():
    import nbformat
    from nbclient import NotebookClient

    path = pathlib.Path(__file__).parent / "notebooks" / "widgets_demo.ipynb"
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")   # committed clean
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    kinds = [set(o.get("data", {})) for o in outputs]
    assert sum("application/vnd.jupyter.widget-view+json" in k for k in kinds) == 4   # 2 schematics, Jacobian, stream
    # every widget output carries a hidden text/html (for front ends that render no widget)
    assert sum("text/html" in k and "application/vnd.jupyter.widget-view+json" in k for k in kinds) == 4
    assert any("image/svg+xml" in k for k in kinds)                                    # the trace tree
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    stacks = [m for m in state.values() if m["model_name"] == "StackModel"]
    assert len(stacks) == 3                            # frames live in widget state (static export)
    printed = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "300 samples" in printed and "posterior mean of k" in printed


def test_gp_node_types_show_their_names_in_schematic_and_tree():
    """(issue 17) node types drew as bare integers (3, 4, 5): the example's value_names hook names them."""
    from imcmc_lab.widgets.schematic import trace_rows

    xs, ys = gp.synthetic_data(12)
    torch.manual_seed(4)
    trace = gp.initial_trace(xs, ys, {"node_type": gp.PLUS, ("left_node", "node_type"): gp.PERIODIC,
                                      ("left_node", "scale"): 0.5, ("left_node", "period"): 0.3,
                                      ("right_node", "node_type"): gp.LINEAR, ("right_node", "param"): 0.2})
    shown = [r.value for r in trace_rows(trace) if r.key == "node_type"]
    assert shown == ["plus (4)", "periodic (3)", "linear (1)"]
    assert "periodic (3)" in W.trace_tree(trace).digraph.source
    move = il.involutive_move(trace, gp.subtree_aux, (gp.walk_tree,), gp.swap_subtree)
    assert "plus (4)" in W.InvolutionSchematic(move).frames[0]
