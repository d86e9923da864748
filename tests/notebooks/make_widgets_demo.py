"""Write tests/notebooks/widgets_demo.ipynb: the four views of imcmc_lab.widgets in one notebook.

Run ``python tests/notebooks/make_widgets_demo.py`` after changing the cells below. The
notebook is committed without outputs; tests/test_widgets.py runs it under nbclient and
tests/test_browser.py opens it in Chromium through Voilà.
"""

import pathlib

import nbformat

CELLS = [
    ("markdown", """# imcmc-lab widgets

Four views of what the engine reports: the **involution schematic** of a move
(paper Figs. 1f and 2f), the **Jacobian** of a move (Sec. 5.1), a **live sampler**,
and a trace's **address tree** (Fig. 2b)."""),
    ("code", """import torch
import imcmc_lab as il
from imcmc_lab.examples import gp_structure as gp, mixture
from imcmc_lab.examples.two_clusters import initial_trace, split_aux, split_merge, two_cluster_kernel
from imcmc_lab.widgets import InvolutionSchematic, JacobianView, SamplerStream, trace_tree

torch.manual_seed(0)
data = torch.cat([torch.randn(15) - 1.0, torch.randn(15) + 1.0]).double()
trace = initial_trace(data)
trace"""),
    ("markdown", "## A trace's address tree (Fig. 2b)"),
    ("code", """xs, ys = gp.synthetic_data(n=20)
torch.manual_seed(1)
gp_trace = gp.initial_trace(xs, ys)
while gp_trace["cov_function"].size != 3:   # a small tree, as in Fig. 2f
    gp_trace = gp.initial_trace(xs, ys)
trace_tree(gp_trace)"""),
    ("markdown", "## Involution schematic: split / merge (Fig. 1f)\n\nPress Play, or drag the slider."),
    ("code", """record = il.involutive_move(trace, split_aux, (), split_merge)
InvolutionSchematic(record)"""),
    ("markdown", "## Involution schematic: swapping a subtree (Fig. 2f)"),
    ("code", """torch.manual_seed(3)
gp_record = il.involutive_move(gp_trace, gp.subtree_aux, (gp.walk_tree,), gp.swap_subtree)
# a move below the root that grows the tree, as in Fig. 2f
while gp_record.aux_in[()] == ("cov_function",) or gp_record.model_out["cov_function"].size <= 3:
    gp_record = il.involutive_move(gp_trace, gp.subtree_aux, (gp.walk_tree,), gp.swap_subtree)
InvolutionSchematic(gp_record)"""),
    ("markdown", "## The Jacobian of a Richardson–Green split (Sec. 5.1)"),
    ("code", """torch.manual_seed(4)
mix_data = mixture.synthetic_data(n=60)
mix_trace, _ = mixture.gmm.generate((len(mix_data),), {"k": 3, "x": mix_data})
mix_record = il.involutive_move(mix_trace, mixture.split_merge_aux, (), mixture.split_merge)
while mix_record.model_out["k"] != 4:   # show a split
    mix_record = il.involutive_move(mix_trace, mixture.split_merge_aux, (), mixture.split_merge)
JacobianView(mix_record)"""),
    ("markdown", "## A live sampler\n\nStart, Pause and Stop run the chain in the background; "
                 "Continue runs it further. The chain stays available as `stream.chain`."),
    ("code", """import numpy as np

def mixture_picture(ax, trace):
    \"\"\"The data and the mixture density of the latest state (a posterior-predictive view).\"\"\"
    ax.hist(data.numpy(), bins=24, density=True, color="#d0d7de")
    grid = np.linspace(-5, 5, 300)
    k = trace["k"]
    density = sum(np.exp(-0.5 * (grid - float(trace["mu", j])) ** 2) for j in range(1, k + 1)) / (k * np.sqrt(2 * np.pi))
    ax.plot(grid, density, color="#bc4c00", lw=2)

stream = SamplerStream(two_cluster_kernel(), trace, steps=300, record={"k": "k"},
                       plots=["k", "log joint", "acceptance"], picture=mixture_picture)
stream.start()
stream"""),
    ("code", """chain = stream.wait()
idata = chain.to_arviz()
print(chain, "posterior mean of k:", float(idata.posterior["k"].mean()))"""),
]


def build() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for kind, source in CELLS:
        make = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        nb.cells.append(make(source))
    return nb


if __name__ == "__main__":
    path = pathlib.Path(__file__).with_name("widgets_demo.ipynb")
    nbformat.write(build(), path)
    print(f"wrote {path}")
