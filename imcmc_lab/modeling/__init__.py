"""Modeling layer: @gen functions, traces, update, combinators."""

from .combinators import Map, MapTrace, Unfold, UnfoldTrace
from .gen import DynamicGenFunction, DynamicTrace, GenCall, GenerativeFunction, gen
from .runtime import count_work
from .trace import CallRecord, ChoiceRecord, Trace
