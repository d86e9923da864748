"""The particle view (issue 19) draws what the engine recorded: one frame per generation, one
point per particle sized by weight, the retained particle and ancestor-sampling switches of a
PGAS sweep, the ESS; user text escaped."""

import re

import numpy as np
import pytest
import torch

import imcmc_lab as il
from imcmc_lab.examples import sequential as sq
from imcmc_lab.widgets import ParticleView, particle_frames
from imcmc_lab.widgets.particles import CHOSEN, RETAINED

VALUE = lambda trace, t: trace["states", t, "x"]  # noqa: E731


def _steps(T=6):
    return sq.linear_gaussian_steps(sq.simulate_linear_gaussian(T)[1])


def test_smc_frames_follow_the_particle_state():
    torch.manual_seed(0)
    state = il.smc(_steps(), 8)
    frames = particle_frames(state, VALUE)
    assert len(frames) == 6 == len(state.history)
    # frame k draws the particles of generations 0..k: 8 per generation, plus the ESS marker
    for k, frame in enumerate(frames):
        assert frame.count("<circle") == 8 * (k + 1) + 1
    # the largest point of the last generation is the particle with the largest weight
    last = frames[-1].split("<circle")[-9:-1]
    radii = [float(re.search(r'r="([0-9.]+)"', c).group(1)) for c in last]
    assert int(np.argmax(radii)) == int(np.argmax(state.weights))
    assert "retained" not in frames[-1]


def test_pgas_sweep_highlights_the_retained_particle_and_switches():
    steps = _steps(8)
    torch.manual_seed(1)
    kernel = il.PGAS(steps, 6)
    trace = il.smc(steps, 6).sample()
    for _ in range(3):
        trace, _ = kernel.step(trace)
    sweep = kernel.last_sweep
    assert len(sweep.history) == 8 and sweep.chosen is not None
    switched = sum(1 for a in sweep.ancestor_choice[1:] if a)
    frame = particle_frames(sweep, VALUE)[-1]
    assert frame.count(f'stroke="{CHOSEN}" stroke-width="2.2"') == switched
    assert frame.count(f'fill="{RETAINED}" fill-opacity="0.85"') == 8


def test_view_escapes_the_title_and_names_a_bad_value_function():
    torch.manual_seed(2)
    state = il.smc(_steps(3), 4)
    view = ParticleView(state, VALUE, title="<b>x</b>")
    assert "&lt;b&gt;x&lt;/b&gt;" in view.static_html() and "<b>x</b>" not in view.static_html()
    assert len(view.frames) == 3
    with pytest.raises(ValueError, match=r"value\(trace, 0\) failed"):
        particle_frames(state, lambda trace, t: trace["nope"])
    with pytest.raises(TypeError, match="last_sweep"):
        particle_frames(object(), VALUE)
