"""The IPython side of the magics: the ``Magics`` class and extension loading.

Only this module imports IPython; see the package docstring for the notation.
"""

from __future__ import annotations

import sys

from IPython.core import magic_arguments
from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class, no_var_expand

from imcmc_lab.errors import ImcmcError

from .compiler import (CELL_ERROR_MARK, compile_gen_cell, compile_transform_cell,
                       parse_transform_signature, register_source)
from .frames import library_folders, tilde_operand_message, user_frames
from .rewrite import ENGINE_NAME

# Names made available unqualified in the user namespace on `%load_ext`
# (unless the user already has a name of their own there).
ENGINE_EXPORTS = (
    # distributions
    "normal", "gamma", "inv_gamma", "beta", "uniform", "uniform_discrete", "bernoulli",
    "categorical", "poisson", "poisson_plus_one", "geometric", "exponential", "lognormal",
    "dirichlet", "mvnormal", "neg_binomial", "mixture_of_normals", "iid",
    # the transform language
    "read", "write", "copy", "tcall", "discrete", "continuous",
    # `@gen` on a %%gen def that makes no choice of its own
    "gen",
)
OTHER_EXPORTS = ("torch",)

_STATE_ATTR = "_imcmc_lab_magics_state"
#: set on an exception whose display a magic has already decided
_SHOWN = "_imcmc_lab_display_decided"


class _State:
    """Per-shell bookkeeping (what we injected, the exception handler we chained)."""

    def __init__(self):
        self.engine = None          # the imcmc_lab module, given by its load hook
        self.debug = False          # `%imcmc_debug on`: library frames in every traceback
        self.injected: dict[str, object] = {}
        self.handler_types: tuple | None = None
        self.prev_types: tuple = ()
        self.prev_handler = None
        self.gen_files: set[str] = set()    # the filenames %%gen cells were compiled with


def _state(shell) -> _State:
    st = getattr(shell, _STATE_ATTR, None)
    if st is None:
        st = _State()
        setattr(shell, _STATE_ATTR, st)
    return st


def _engine(shell):
    """The engine module that ``%load_ext imcmc_lab`` passed in (no import of the facade:
    the facade imports the magics, not the other way round)."""
    engine = _state(shell).engine
    if engine is None:
        raise UsageError("load the magics with `%load_ext imcmc_lab`")
    return engine


# ---------------------------------------------------------------------------
# errors shown without the machinery's frames


def _ensure_syntax_handler(shell) -> None:
    """Show the user's mistakes without the library's frames.

    A cell magic runs inside the cell's code, so an exception it raises would
    be shown with the frames of IPython's and our machinery. Cell syntax errors
    carry a marker and are shown like a cell's own (``showsyntaxerror()``); an
    ``ImcmcError`` (the engine's word that the user's program is wrong) is shown
    with the user's frames only, unless ``%imcmc_debug on``. A custom exception
    handler (chained to any handler that was already installed) does both and
    hands every other exception to whoever would have shown it.
    """
    st = _state(shell)
    if st.handler_types is not None and shell.custom_exceptions is st.handler_types:
        return
    prev_types = tuple(shell.custom_exceptions or ())
    prev_handler = shell.CustomTB if prev_types else None

    def handler(self, etype, value, tb, tb_offset=None):
        if getattr(value, CELL_ERROR_MARK, False):
            self.showsyntaxerror()
            return []
        if prev_types and issubclass(etype, prev_types):
            return prev_handler(etype, value, tb, tb_offset=tb_offset)
        message = tilde_operand_message(value, tb, st.gen_files)
        if message is not None:
            value.args = (message,)
        if (message is not None or isinstance(value, ImcmcError)) and not st.debug \
                and not hasattr(value, _SHOWN):
            _render_user_frames(self, value, tb)
        self.showtraceback((etype, value, tb), tb_offset=tb_offset, running_compiled_code=True)
        return []

    types = prev_types + (SyntaxError, ImcmcError, TypeError)
    shell.set_custom_exc(types, handler)
    st.handler_types = shell.custom_exceptions
    st.prev_types, st.prev_handler = prev_types, prev_handler


def _remove_syntax_handler(shell) -> None:
    st = _state(shell)
    if st.handler_types is None or shell.custom_exceptions is not st.handler_types:
        return
    if st.prev_types:
        prev = st.prev_handler
        shell.set_custom_exc(st.prev_types, lambda self, etype, value, tb, tb_offset=None:
                             prev(etype, value, tb, tb_offset=tb_offset))
    else:
        shell.set_custom_exc((), None)
    st.handler_types = None


def _render_user_frames(shell, exc: BaseException, tb) -> None:
    """Make IPython show ``exc`` with the user's frames only (the library's are left out).

    Only this exception's own traceback: what the library chained to it is the
    library's business (``%imcmc_debug on`` shows all of it).
    """
    frames = user_frames(tb, library_folders(_state(shell).engine))
    saved = exc.__cause__, exc.__context__, exc.__suppress_context__
    try:
        exc.__cause__ = exc.__context__ = None
        if frames is None:
            stb = shell.InteractiveTB.get_exception_only(type(exc), exc)
        else:
            stb = shell.InteractiveTB.structured_traceback(type(exc), exc, frames, tb_offset=0)
    except Exception:  # pragma: no cover - display is best effort
        return
    finally:
        exc.__cause__, exc.__context__, exc.__suppress_context__ = saved
    exc._render_traceback_ = lambda: stb


def _trim_to_cell(shell, exc: BaseException, filename: str) -> None:
    """Make IPython show ``exc`` from the first frame in the compiled cell on.

    Errors raised while a cell's top-level code runs would otherwise start with
    the frames of IPython's ``run_cell_magic`` and of this module.
    """
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    if tb is None:
        return
    try:
        stb = shell.InteractiveTB.structured_traceback(type(exc), exc, tb, tb_offset=0)
        exc._render_traceback_ = lambda: stb
    except Exception:  # pragma: no cover - display is best effort
        pass


# ---------------------------------------------------------------------------
# the magics


@magics_class
class ImcmcMagics(Magics):
    """``%%gen``, ``%%transform`` and ``%check_involution``."""

    # -- helpers ---------------------------------------------------------------

    def _filename(self, text: str) -> str:
        """Register the cell text for tracebacks; return the filename to compile with.

        Goes through IPython's caching compiler so that tracebacks label the
        frame ``Cell In[N], line L`` like any other cell.
        """
        shell = self.shell
        # The number IPython labels the running cell with (IPython >= 9 has
        # already advanced execution_count when the cell's code runs).
        running = getattr(getattr(shell, "displayhook", None), "exec_result", None)
        number = getattr(running, "execution_count", None)
        if number is None:
            number = shell.execution_count
        try:
            return shell.compile.cache(text, number, raw_code="# imcmc_lab magic cell\n" + text)
        except Exception:
            return register_source(text, f"<imcmc-lab cell {number}>")

    def _raise_cell_error(self, err: SyntaxError):
        __tracebackhide__ = True
        _ensure_syntax_handler(self.shell)
        err.__cause__ = None
        err.__suppress_context__ = True
        raise err

    def _run(self, compiled, args):
        __tracebackhide__ = True
        shell = self.shell
        if getattr(args, "show", False) or getattr(args, "dry_run", False):
            self._show(compiled)
        if getattr(args, "dry_run", False):
            return
        if shell.user_ns.get(ENGINE_NAME) is not _engine(shell):
            shell.user_ns[ENGINE_NAME] = _engine(shell)
        try:
            exec(compiled.code, shell.user_ns)
        except Exception as exc:
            _trim_to_cell(shell, exc, compiled.filename)
            raise

    def _show(self, compiled):
        st = _state(self.shell)
        ns = self.shell.user_ns
        used = compiled.referenced_names()
        ours = sorted(n for n in used if n in st.injected and ns.get(n) is st.injected[n]
                      and n not in OTHER_EXPORTS)
        torch_used = "torch" in used and "torch" in st.injected and ns.get("torch") is st.injected["torch"]
        text = compiled.plain_python(from_imcmc_lab=ours, import_torch=torch_used)
        try:
            from IPython.display import Code, display

            display(Code(text, language="python"))
        except Exception:  # pragma: no cover
            print(text)

    @staticmethod
    def _header(magic: str, line: str) -> str:
        return f"%%{magic} {line}".rstrip() if line.strip() else f"%%{magic}"

    # -- %%gen -----------------------------------------------------------------

    @no_var_expand
    @cell_magic
    @magic_arguments.magic_arguments()
    @magic_arguments.argument("--show", "-s", action="store_true",
                              help="print the plain Python (`@il.gen`, `dist @ address`) "
                                   "the cell compiles to, then run it")
    @magic_arguments.argument("--dry-run", "-n", action="store_true",
                              help="print the compiled Python without running it")
    def gen(self, line, cell):
        """Define generative functions in Gen's notation.

        Every top-level ``def`` in the cell becomes a generative function bound
        in the notebook namespace. Inside it::

            k ~ poisson_plus_one(1)            # choice at "k", bound to k
            {("mu", j)} ~ normal(0, 10)        # choice at ("mu", j): an expression
            {"left"} ~ walk_tree(node.left)    # a generative call mounted under "left"

        ``name ~ expr`` compiles to ``name = expr @ "name"`` and ``{addr} ~ expr``
        to ``(expr @ addr)``. Line numbers in errors are the notebook's: the
        ``%%gen`` line is line 1.
        """
        __tracebackhide__ = True
        args = magic_arguments.parse_argstring(self.gen, line)
        header = self._header("gen", line)
        original = header + "\n" + cell
        filename = self._filename(original)
        _state(self.shell).gen_files.add(filename)
        try:
            compiled = compile_gen_cell(cell, filename, header)
        except SyntaxError as err:
            self._raise_cell_error(err)
        self._run(compiled, args)

    # -- %%transform -----------------------------------------------------------

    @no_var_expand
    @cell_magic
    @magic_arguments.magic_arguments()
    @magic_arguments.argument("--show", "-s", action="store_true",
                              help="print the plain Python (`@il.transform def ...`) the cell "
                                   "compiles to, then run it")
    @magic_arguments.argument("--dry-run", "-n", action="store_true",
                              help="print the compiled Python without running it")
    @magic_arguments.argument("signature", nargs="*",
                              help="NAME (model_in, aux_in) to (model_out, aux_out), or "
                                   "NAME (t_in) to (t_out); extra parameters: NAME(k) (...) to (...)")
    def transform(self, line, cell):
        """Define a trace transform; the cell is its body.

        ``%%transform f (model_in, aux_in) to (model_out, aux_out)`` binds ``f``
        to ``il.transform(def f(model_in, aux_in, model_out, aux_out): <cell>)``.
        In the body, ``@read(...)``, ``@write(...)``, ``@copy(...)``,
        ``@tcall(...)`` and the plain ``read(...)`` etc. all work::

            k = @read(model_in["k"], discrete)
            @write(model_out["k"], k + 1, discrete)
            @copy(aux_in["cluster_to_split"], aux_out["cluster_to_merge"])
        """
        __tracebackhide__ = True
        args = magic_arguments.parse_argstring(self.transform, line)
        header = self._header("transform", line)
        original = header + "\n" + cell
        filename = self._filename(original)
        sig_text = " ".join(args.signature)
        try:
            sig = parse_transform_signature(sig_text)
        except ValueError as e:
            start = len("%%transform")
            col = (header.find(" " + args.signature[0], start) + 2 if args.signature
                   else len(header) + 1)
            err = SyntaxError(str(e), (filename, 1, max(col, 1), header + "\n", 1, len(header) + 1))
            setattr(err, CELL_ERROR_MARK, True)
            self._raise_cell_error(err)
        try:
            compiled = compile_transform_cell(sig, cell, filename, header)
        except SyntaxError as err:
            self._raise_cell_error(err)
        self._run(compiled, args)

    # -- %check_involution -----------------------------------------------------

    @no_var_expand
    @line_magic
    @magic_arguments.magic_arguments()
    @magic_arguments.argument("p", help="the model (a generative function)")
    @magic_arguments.argument("q", help="the auxiliary program (a generative function taking "
                                        "the model trace first), or None")
    @magic_arguments.argument("f", help="the transform")
    @magic_arguments.argument("--args", "-a", default="()",
                              help="Python expression for the model's arguments, e.g. \"(10,)\"")
    @magic_arguments.argument("--q-args", default="()",
                              help="Python expression for q's extra arguments (after the trace)")
    @magic_arguments.argument("--observations", "-o", default=None,
                              help="Python expression for a choice map (dict) of observations "
                                   "fixed in every trial")
    @magic_arguments.argument("--trials", "-t", type=int, default=100,
                              help="number of randomized trials (default 100)")
    @magic_arguments.argument("--seed", type=int, default=None, help="random seed")
    @magic_arguments.argument("--rtol", type=float, default=None,
                              help="relative tolerance of the involution check")
    @magic_arguments.argument("--atol", type=float, default=None,
                              help="absolute tolerance of the involution check")
    @magic_arguments.argument("--traceback", action="store_true",
                              help="on an error, show the library's frames too (for reporting "
                                   "a bug in imcmc-lab)")
    def check_involution(self, line):
        """Run ``il.check_involution(p, args, q, f)`` and print its report.

        Example: ``%check_involution p q f --args "(10,)" --trials 50``.
        A failed check is shown as the checker's report (which trial, which
        move, which addresses); the cell then counts as failed.
        """
        __tracebackhide__ = True
        args = magic_arguments.parse_argstring(self.check_involution, line)
        ns = self.shell.user_ns

        def ev(expr, what):
            # magic_arguments keeps the quotes of a quoted argument
            if len(expr) >= 2 and expr[0] == expr[-1] and expr[0] in "'\"":
                expr = expr[1:-1]
            try:
                return eval(expr, ns)
            except Exception as e:
                raise UsageError(f"%check_involution: cannot evaluate {what} `{expr}`: "
                                 f"{type(e).__name__}: {e}") from None

        p, q, f = ev(args.p, "p"), ev(args.q, "q"), ev(args.f, "f")
        p_args = ev(args.args, "--args")
        if not isinstance(p_args, tuple):
            p_args = (p_args,)
        q_args = ev(args.q_args, "--q-args")
        if not isinstance(q_args, tuple):
            q_args = (q_args,)
        kwargs = {"trials": args.trials, "q_args": q_args}
        if args.observations is not None:
            kwargs["observations"] = ev(args.observations, "--observations")
        for opt in ("seed", "rtol", "atol"):
            if getattr(args, opt) is not None:
                kwargs[opt] = getattr(args, opt)
        try:
            report = _engine(self.shell).check_involution(p, p_args, q, f, **kwargs)
        except ImcmcError as exc:
            # the user's program is wrong: the message, and the user's lines, say where
            # (from the checker down: the frames above it are the magic's machinery)
            if not (args.traceback or _state(self.shell).debug):
                _render_user_frames(self.shell, exc, exc.__traceback__)
            setattr(exc, _SHOWN, True)
            raise
        print(report)

    # -- %imcmc_debug ------------------------------------------------------------

    @line_magic
    def imcmc_debug(self, line):
        """``%imcmc_debug on|off``: show the library's frames in tracebacks of imcmc-lab's
        errors (off by default: an error about your program shows your lines only)."""
        st = _state(self.shell)
        word = line.strip().lower()
        if word not in ("", "on", "off"):
            raise UsageError("usage: %imcmc_debug on|off")
        if word:
            st.debug = word == "on"
        print(f"imcmc_lab debug tracebacks: {'on' if st.debug else 'off'}")


# ---------------------------------------------------------------------------
# loading


def _inject_names(shell) -> list[str]:
    """Bind the engine's distributions, transform language and ``torch`` unqualified.

    A name the user already bound to something else is left alone; returns
    those names.
    """
    engine = _engine(shell)
    st = _state(shell)
    ns = shell.user_ns
    values = {}
    for name in ENGINE_EXPORTS:
        if hasattr(engine, name):
            values[name] = getattr(engine, name)
    import torch

    values["torch"] = torch
    kept = []
    push = {}
    for name, value in values.items():
        if name in ns and ns[name] is not value and ns[name] is not st.injected.get(name):
            kept.append(name)
            continue
        push[name] = value
    shell.push(push, interactive=False)
    st.injected.update(push)
    return kept


def load_ipython_extension(shell, engine) -> None:
    """Register the magics; ``engine`` is the ``imcmc_lab`` module that compiled cells use."""
    _state(shell).engine = engine
    shell.register_magics(ImcmcMagics)
    shell.push({ENGINE_NAME: engine}, interactive=False)
    kept = _inject_names(shell)
    _ensure_syntax_handler(shell)
    if kept:
        names = ", ".join(f"`{n}`" for n in kept)
        quals = ", ".join(f"il.{n}" for n in kept if n != "torch")
        print(f"imcmc_lab: kept your own {names}" + (f" (the engine's: {quals})" if quals else ""),
              file=sys.stdout)


def unload_ipython_extension(shell) -> None:
    st = _state(shell)
    ns = shell.user_ns
    for name, value in list(st.injected.items()):
        if ns.get(name) is value:
            del ns[name]
            shell.user_ns_hidden.pop(name, None)
    st.injected.clear()
    _remove_syntax_handler(shell)
    mm = shell.magics_manager
    for kind, names in (("cell", ("gen", "transform")), ("line", ("check_involution", "imcmc_debug"))):
        for n in names:
            mm.magics[kind].pop(n, None)
    mm.registry.pop("ImcmcMagics", None)
