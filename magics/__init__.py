"""IPython magics for imcmc-lab: Gen's notation in a notebook.

Load with ``%load_ext imcmc_lab`` (importing :mod:`imcmc_lab` alone registers
nothing and does not import IPython). That registers

``%%gen [--show] [--dry-run]``
    Every top-level ``def`` in the cell that makes a random choice (a ``~``, or
    the plain ``dist @ "address"``) becomes a generative function (the engine's
    ``@gen``) bound in the notebook namespace; a ``def`` without one stays a
    plain helper function (write ``@gen`` above a generative function that makes
    no choice of its own); other top-level statements run as ordinary Python.
    Inside a ``def``:

    * ``name ~ expr`` as a statement is the choice (or the generative call) at
      address ``"name"``, bound to ``name``; it compiles to
      ``name = expr @ "name"``.
    * ``{addr} ~ expr`` is an expression usable anywhere (comprehensions,
      arguments, ``return``, conditions, multi-line expressions); it compiles to
      ``(expr @ addr)``. ``{"mu", j}`` and ``{("mu", j)}`` are the same address.
    * ``name ~ expr`` inside an expression compiles to ``(name := expr @ "name")``.

    The right-hand side of an *expression* ``~`` stops at ``,`` ``:`` ``;``
    ``=``, a comparison, ``not``/``and``/``or``, ``if``/``else``, ``for``, a
    closing bracket or the end of the statement; a *statement* ``name ~ expr``
    takes the whole rest of the statement. ``~`` inside strings, comments and
    f-strings is untouched, and a unary ``~`` (bitwise not) works as in Python.
    A choice takes no type annotation (``x: float ~ d`` is an error), and a
    statement that is only ``~ d`` (a choice without a name) is an error.
    A generative function defined in one cell can be called from cells run
    later; running a cell again redefines its functions.

``%%transform [--show] [--dry-run] NAME (model_in, aux_in) to (model_out, aux_out)``
    The cell is the body of a trace transform bound to ``NAME``; the one-trace
    form is ``NAME (t_in) to (t_out)`` and extra parameters follow the name:
    ``NAME(k) (model_in, aux_in) to (model_out, aux_out)``. In the body
    ``@read(...)``, ``@write(...)``, ``@copy(...)``, ``@tcall(...)`` (Gen's
    spelling; always the engine's functions) and plain ``read(...)`` etc. work.
    Real decorators and matrix products ``a @ b`` are left alone.

``%check_involution p q f [--args EXPR] [--q-args EXPR] [--observations EXPR] [--trials N] [--seed N] [--rtol X] [--atol X] [--traceback]``
    Runs ``il.check_involution`` (paper Algorithm 4) on the named programs and
    prints its report; a failed check shows the checker's report without the
    checker's internal frames, and the cell fails. ``--traceback`` shows them.

``%imcmc_debug on|off``
    An error imcmc-lab raises about the user's program (an ``ImcmcError``:
    ``AddressError``, ``TransformError``, ``LabelError``, ...), in any cell, is
    shown with the user's own frames only (their cells, the compiled ``%%gen`` /
    ``%%transform`` lines) and the message, which names the address and the
    fix. ``%imcmc_debug on`` shows the library's frames too (for reporting a
    bug in imcmc-lab); other exceptions always keep their full traceback.

``--show`` prints the plain Python a cell compiles to (``import imcmc_lab as
il``, ``@il.gen``, ``dist @ address``), which runs outside notebooks too;
``--dry-run`` prints it without running the cell.

Names put in the notebook namespace
-----------------------------------
``%load_ext imcmc_lab`` binds ``__imcmc_lab__`` (the engine module; compiled
code refers to the engine only through it, hidden from ``%who``) and, so that
cells read like the paper, these names unqualified: the distributions
``normal gamma inv_gamma beta uniform uniform_discrete bernoulli categorical
poisson poisson_plus_one geometric exponential lognormal dirichlet mvnormal
neg_binomial mixture_of_normals iid``, the transform language ``read write
copy tcall discrete continuous``, ``gen``, and ``torch``. A name the notebook already
binds to something else is kept (the load prints which), and is always
reachable as ``il.NAME`` after ``import imcmc_lab as il``.

Line numbers
------------
Errors use the numbers a notebook shows for the cell: the ``%%gen`` /
``%%transform`` line is line 1, the first line of the body is line 2. (In
JupyterLab and Notebook 7, turn on line numbers to see them; a cell magic must
be the cell's first line.) Tracebacks label frames of a compiled cell
``Cell In[N], line L`` and quote the cell as written (``~`` and all), because
the original text is registered with :mod:`linecache` under the filename the
code was compiled with. Syntax errors, including misuse of ``~``, are shown
like a cell's own: the cell line, a caret under the offending column and a
one-line explanation, with no frames from the magics' machinery. An ordinary
Python mistake (an unclosed bracket, a bad indent) is reported exactly as
Python reports it, at its own line; the advice about ``~`` comes only when
the notation is the first problem in the cell.
"""

from .compiler import (CompiledCell, TransformSignature, compile_gen_cell,
                       compile_transform_cell, parse_transform_signature)
from .rewrite import ENGINE_NAME, NotationError, rewrite

__all__ = [
    "ENGINE_NAME",
    "CompiledCell",
    "NotationError",
    "TransformSignature",
    "compile_gen_cell",
    "compile_transform_cell",
    "load_ipython_extension",
    "parse_transform_signature",
    "rewrite",
    "unload_ipython_extension",
]


def load_ipython_extension(ipython, engine=None):
    """Register the magics on ``ipython``; ``engine`` is the ``imcmc_lab`` module.

    ``%load_ext imcmc_lab`` calls this with the engine (the magics never import
    the ``imcmc_lab`` facade: it is the facade that loads them).
    """
    if engine is None:
        raise ImportError("load the magics with `%load_ext imcmc_lab` (not imcmc_lab.magics): "
                          "it hands them the engine")
    from ._ipython import load_ipython_extension as _load

    _load(ipython, engine)


def unload_ipython_extension(ipython):
    """Remove the magics and the names injected by :func:`load_ipython_extension`."""
    from ._ipython import unload_ipython_extension as _unload

    _unload(ipython)
