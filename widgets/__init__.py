"""Views of what the engine reports: move records, Jacobian records, chains and traces.

* :class:`InvolutionSchematic` -- a move's traces before, after ``f`` and after
  ``f`` again, animated (paper Figs. 1f, 2f);
* :class:`JacobianView` -- the Jacobian's sparsity, eliminated coordinates and
  reduced blocks (paper Sec. 5.1);
* :class:`SamplerStream` -- a chain running in the background with live plots;
* :func:`trace_tree` -- a trace's address tree drawn with Graphviz (paper Fig. 2b);
* :class:`NPTrajectoryView` -- a nonparametric HMC move's coordinates over its steps, the
  dimension growing and shrinking, look-ahead blocks and the decision (``NPHMC.last_record``).

The views only render engine records; they never recompute MCMC logic. All
user text is escaped. Imported on demand (``il.widgets`` or ``import
imcmc_lab.widgets``): the engine itself never imports IPython or ipywidgets.
"""

from .jacobian import JacobianLayout, JacobianView
from .nphmc import NPTrajectory, NPTrajectoryView, np_trajectory_frames
from .particles import ParticleView, particle_frames
from .schematic import InvolutionSchematic, Stages, involution_stages
from .stream import SamplerStream, Throttle
from .tree import DotNotFound, TraceTree, trace_tree

__all__ = ["InvolutionSchematic", "JacobianView", "SamplerStream", "trace_tree", "TraceTree", "DotNotFound",
           "Stages", "involution_stages", "JacobianLayout", "Throttle", "NPTrajectoryView", "np_trajectory_frames",
           "NPTrajectory", "ParticleView", "particle_frames"]
