"""A live sampler in a notebook executed headless and saved (``jupyter nbconvert --execute``,
nbclient) is saved as it ended, widget and static picture alike (issue 17).

nbclient keeps only the widget messages and display updates sent *during* a cell's
execution; a sampler's run ends in the background, usually between cells, and its last
redraw went unrecorded: the saved widget read "0 / 3 steps · running" with empty plots.
The browser side (the notebook reopened in JupyterLab) is tests/test_browser_reopen.py.
"""

from __future__ import annotations

import base64
import re

import nbformat
import pytest
from nbclient import NotebookClient

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
STEPS = 3
CELLS = [
    "import time\n"
    "import torch\n"
    "from imcmc_lab.examples import mixture as m\n"
    "from imcmc_lab.widgets import SamplerStream\n"
    "data = m.synthetic_data(60, means=(-6.0, 0.0, 6.0), seed=0)\n"
    "torch.manual_seed(0)",
    f"stream = SamplerStream(m.mixture_kernel(), m.initial_trace(data, k=1), steps={STEPS}, record={{'k': 'k'}},\n"
    "                       plots=('k', 'log joint'), autostart=True)\n"
    "stream",
    # the run ends while this cell blocks the kernel's event loop: its last redraw comes after
    "while stream.running:\n    time.sleep(0.02)",
    "print(stream.status)",
]


@pytest.fixture(scope="module")
def saved():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    NotebookClient(nb, timeout=300, kernel_name="python3", store_widget_state=True).execute()
    return nbformat.reads(nbformat.writes(nb), as_version=4)


def _models(nb, name):
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    return [m for m in state.values() if m["model_name"] == name]


def test_saved_widget_state_is_the_final_one(saved):
    assert saved.cells[3].outputs[0]["text"].strip() == "finished"
    (bar,) = _models(saved, "IntProgressModel")
    assert bar["state"]["value"] == bar["state"]["max"] == STEPS and bar["state"]["bar_style"] == "success"
    status = [m["state"]["value"] for m in _models(saved, "HTMLModel") if "imcmc-stream-status" in m["state"]["value"]]
    assert len(status) == 1 and f">{STEPS}</b> / {STEPS} steps" in status[0] and "finished" in status[0]
    buttons = {m["state"]["description"]: m["state"]["disabled"] for m in _models(saved, "ButtonModel")}
    assert buttons == {"Continue": False, "Pause": True, "Stop": True}
    # the plot saved in the widget is the final one: the same PNG as the static picture of the end
    (image,) = _models(saved, "ImageModel")
    (buffer,) = image["buffers"]
    fallback = saved.cells[1].outputs[0]["data"]["text/html"]
    assert f">{STEPS}</b> / {STEPS} steps" in fallback and "finished" in fallback
    png = re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)", fallback).group(1)
    assert base64.b64decode(buffer["data"]) == base64.b64decode(png)


def test_widget_output_hides_its_text_repr(saved):
    """Where no widget renders (an untrusted notebook, a preview), the widget's output shows
    nothing beside the picture: not its text repr, which is stale ("running, 1 steps")."""
    fallback, live = saved.cells[1].outputs
    assert WIDGET_VIEW not in fallback["data"] and WIDGET_VIEW in live["data"]
    html = live["data"]["text/html"]
    assert html.startswith("<div class='imcmc-duplicate' hidden='hidden' style='display:none'>"), html
