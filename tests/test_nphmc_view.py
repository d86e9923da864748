"""The NP-HMC trajectory view (issue 18) draws what the kernel recorded: a line per coordinate
from the step it is created, solid where the run uses it, the dimension per step, the
look-ahead blocks and the decision; a static copy (with an <img> of each SVG) for saved
notebooks; user text escaped."""

import re
import warnings

import pytest
import torch

import imcmc_lab as il
from imcmc_lab.examples.nonparametric import geometric
from imcmc_lab.widgets import NPTrajectoryView, np_trajectory_frames
from imcmc_lab.widgets._style import address_text

U = il.select("u")


def _kernel(**options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)    # NPHMC's "experimental" warning
        return il.NPHMC(U, 0.1, 5, discontinuous=U, **options)


def _move_that_changes_dimension(seed=11):
    """A geometric-program kernel whose last move, accepted, both created coordinates in the
    middle of its trajectory and dropped some the final run does not use."""
    kernel = _kernel()
    torch.manual_seed(seed)
    trace = geometric.simulate(0.2)
    for _ in range(500):
        trace, _ = kernel(trace)
        record = kernel.last_record
        created = set(record.trajectory[-1]) - set(record.trajectory[0])
        dropped = set(record.trajectory[-1]) - set(record.used_per_step[-1])
        if record.accepted and created and dropped:
            return kernel, record
    raise AssertionError("no such move in 500 moves")


def _groups(svg):
    """``{address text: attributes}`` of the coordinate lines in one frame."""
    found = re.findall(r'<g class="imcmc-coordinate" data-address="([^"]*)" data-kind="(\w+)" '
                       r'data-created="(\d+)" data-used="([\d,]*)">', svg)
    return {a: {"kind": k, "created": int(c), "used": [int(t) for t in u.split(",") if t]} for a, k, c, u in found}


def test_the_view_draws_the_recorded_dimension_and_coordinates():
    kernel, record = _move_that_changes_dimension()
    frames = np_trajectory_frames(kernel)
    T = len(record.trajectory) - 1
    assert len(frames) == T + 1
    final = frames[-1]
    dims = [len(u) for u in record.used_per_step]
    assert f'data-dims="{",".join(map(str, dims))}"' in final and len(set(dims)) > 1
    groups = _groups(final)
    assert set(groups) == {address_text(a) for a in record.trajectory[-1]}
    for address in record.trajectory[-1]:
        g = groups[address_text(address)]
        first = min(t for t, step in enumerate(record.trajectory) if address in step)
        assert g["created"] == first and g["kind"] == "discontinuous"
        assert g["used"] == [t for t, used in enumerate(record.used_per_step) if address in used]
    # a circle for each coordinate created mid-trajectory, a cross for each the new state drops
    created = sum(g["created"] > 0 for g in groups.values())
    dropped = sum(1 for a in record.trajectory[-1] if a not in record.used_per_step[-1])
    assert created > 0 and dropped > 0
    assert final.count('class="imcmc-created"') == created and final.count('class="imcmc-dropped"') == dropped
    assert 'data-accepted="true"' in final and "accepted" in final
    # frame k draws steps 0..k only: a coordinate created later is not there yet
    for k, frame in enumerate(frames):
        assert f'data-step="{k}"' in frame
        assert all(g["created"] <= k for g in _groups(frame).values())


def test_lookahead_blocks_and_a_rejected_move_are_marked():
    @il.gen
    def half_weight():
        x = il.normal(0.0, 1.0) @ "x"
        il.bernoulli(0.5 if x < 0 else 1.0) @ "w"

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        kernel = il.NPHMC(il.select("x"), 0.3, 5, discontinuous=(), lookahead=2)
    torch.manual_seed(3)
    trace, _ = half_weight.generate((), {"w": True})
    seen = {}
    for _ in range(400):
        trace, _ = kernel(trace)
        record = kernel.last_record
        key = "rejected" if not record.accepted else record.block
        seen.setdefault(key, np_trajectory_frames(kernel)[-1])
        if "rejected" in seen and 2 in seen:
            break
    later = seen[2]         # accepted after the first look-ahead block: 10 steps, one boundary drawn
    assert 'data-steps="10"' in later and later.count('class="imcmc-block"') == 1
    assert "accepted in block 2 (look-ahead 1)" in later and _groups(later)["x"]["kind"] == "continuous"
    rejected = seen["rejected"]   # all three blocks ran
    assert 'data-steps="15"' in rejected and rejected.count('class="imcmc-block"') == 2
    assert 'data-accepted="false"' in rejected and "rejected" in rejected


def test_a_list_of_records_gives_one_frame_per_move():
    kernel = _kernel()
    torch.manual_seed(2)
    trace, records = geometric.simulate(0.2), []
    for _ in range(5):
        trace, _ = kernel(trace)
        records.append(kernel.last_record)
    view = NPTrajectoryView(records, kernel=kernel)
    assert len(view.frames) == 5 and view.frame_labels[0].startswith("move 1: dim ")
    for record, frame in zip(records, view.frames):
        assert f'data-dims="{",".join(str(len(u)) for u in record.used_per_step)}"' in frame
    # each move is a different picture: the static fallback keeps all of them
    html = view.static_html()
    assert html.count("<svg") == 5 and "imcmc-range" in html
    # without the kernel, the records still say which coordinates are discontinuous
    assert 'data-kind="discontinuous"' in np_trajectory_frames(records)[0]
    assert 'data-kind="continuous"' not in np_trajectory_frames(records)[0]


def test_static_fallback_and_escaping():
    kernel, record = _move_that_changes_dimension()
    view = NPTrajectoryView(kernel, title="<b>geometric</b>")
    html = view.static_html()
    assert "&lt;b&gt;geometric&lt;/b&gt;" in html and "<b>geometric</b>" not in html
    # the last frame (the whole move), twice: an inline SVG and an <img> of it (JupyterLab's sanitiser
    # of untrusted notebooks keeps the image, and with scripts stripped every frame would show)
    assert len(view.frames) == len(record.trajectory) and html.count("<svg") == 1
    assert 'data-step="5"' in html and "<script" not in html
    images = re.findall(r"<img class='imcmc-raster' alt=\"([^\"]*)\"[^>]*src='data:image/svg\+xml;base64,", html)
    assert len(images) == 1 and images[0].startswith("NP-HMC trajectory, step 5 of 5: accepted: log α = "), images
    bundle = view._repr_mimebundle_()
    assert "imcmc-nptrajectory" in bundle["text/html"] and "NPTrajectoryView" in bundle["text/plain"]


def test_bad_sources_are_named():
    with pytest.raises(TypeError, match="last_record"):
        NPTrajectoryView(object())
    with pytest.raises(ValueError, match="no move yet"):
        NPTrajectoryView(_kernel())



@il.gen
def _discrete_and_continuous():
    k = il.poisson(2.0) @ "k"
    x = il.normal(k * 1.0, 1.0) @ "x"
    return il.normal(x, 1.0) @ "y"


def test_coordinates_moved_as_discontinuous_come_from_the_record():
    """A discrete choice is moved as a discontinuous coordinate without being listed in
    ``discontinuous=``; the record says so, and the view draws it as such."""
    torch.manual_seed(3)
    trace, _ = _discrete_and_continuous.generate((), {"y": 2.5})
    kernel = il.NPHMC(il.select("k", "x"), 0.1, 5)
    trace, _ = kernel(trace)
    record = kernel.last_record
    assert record.discontinuous == [("k",)]
    groups = _groups(np_trajectory_frames(kernel)[-1])
    assert groups[address_text(("k",))]["kind"] == "discontinuous"
    assert groups[address_text(("x",))]["kind"] == "continuous"


def test_the_axis_names_the_coordinates_the_record_says_were_used():
    """A discontinuous uniform moves in a unit coordinate (U(0, 1)) by default, in an N(0, 1)
    one with coordinates="normal": the record lists the unit ones, and the axis says which."""
    torch.manual_seed(3)
    trace = geometric.simulate(0.2)
    for coordinates, label in (("unit", "u (U(0, 1) reference)"), ("normal", "z (N(0, 1) reference)")):
        kernel = _kernel(coordinates=coordinates)
        kernel(trace)
        record = kernel.last_record
        assert set(record.unit) == (set(record.instantiated) if coordinates == "unit" else set())
        assert all(0.0 <= z <= 1.0 for step in record.trajectory for z in step.values()) or coordinates == "normal"
        final = np_trajectory_frames(kernel)[-1]
        assert f">{label}</text>" in final
        if coordinates == "unit":      # the axis spans [0, 1] (padded), not the N(0, 1) span [-1, 1]
            assert ">-1.1</text>" not in final and ">1</text>" in final and ">0</text>" in final
