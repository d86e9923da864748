"""Modeling layer: @gen functions, traces, update, combinators.

The public update path is ``trace.update(constraints, args)`` and, for callers that
need what it learned (the addresses sampled from the prior, the discarded values),
``trace.update_detailed(constraints, args, strict=True)`` returning a :class:`Result`;
``gen_fn.generate_detailed(args, constraints, strict=True)`` is its counterpart.
"""

from .combinators import Map, MapTrace, Unfold, UnfoldTrace
from .execution import Execution, Result, count_work
from .gen import DynamicGenFunction, DynamicTrace, GenCall, GenerativeFunction, gen
from .runtime import differentiable_score
from .trace import CallRecord, ChoiceRecord, Trace
