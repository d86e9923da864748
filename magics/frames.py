"""Which frames of a traceback are the user's (no IPython here).

An error the engine raises about the user's program (an ``ImcmcError``) is shown
with the user's frames only: notebook cells (the compiled ``%%gen`` and
``%%transform`` cells among them) and the user's own modules. Frames of
imcmc-lab, IPython, the standard library and installed packages are left out.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import sysconfig
from types import TracebackType

__all__ = ["library_folders", "user_frames", "tilde_operand_message"]


def library_folders(engine=None) -> tuple[str, ...]:
    """Folders whose files are library code: imcmc-lab (engine, magics, widgets),
    the standard library and installed packages."""
    here = os.path.dirname(os.path.abspath(__file__))
    folders = {here, os.path.join(os.path.dirname(here), "widgets")}
    if engine is not None and getattr(engine, "__file__", None):
        folders.add(os.path.dirname(os.path.abspath(engine.__file__)))
    widgets = sys.modules.get("imcmc_lab.widgets")   # installed elsewhere when not editable
    if widgets is not None and getattr(widgets, "__file__", None):
        folders.add(os.path.dirname(os.path.abspath(widgets.__file__)))
    paths = sysconfig.get_paths()
    folders.update(os.path.abspath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib")
                   if paths.get(k))
    return tuple(sorted(f + os.sep for f in folders))


def user_frames(tb: TracebackType | None, library: tuple[str, ...]) -> TracebackType | None:
    """A new traceback holding only the frames of ``tb`` outside ``library``, or None."""
    kept = []
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(library) or filename.startswith("<"):
            kept.append(tb)
        tb = tb.tb_next
    new = None
    for old in reversed(kept):
        new = TracebackType(new, old.tb_frame, old.tb_lasti, old.tb_lineno)
    return new


# `k ~ 3` compiles to `3 @ "k"`: Python's words for it name `@` and `str`, which the user never wrote
_NOT_SAMPLEABLE = re.compile(r"unsupported operand type\(s\) for @: '([^']+)' and '(str|tuple|int)'")


def tilde_operand_message(exc: BaseException, tb: TracebackType | None, cell_files) -> str | None:
    """A message for a TypeError raised by ``x ~ expr`` in a ``%%gen`` cell (one of
    ``cell_files``) where ``expr`` is not a distribution or a generative function call;
    None for any other exception."""
    match = _NOT_SAMPLEABLE.fullmatch(str(exc)) if isinstance(exc, TypeError) else None
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if match is None or tb is None or tb.tb_frame.f_code.co_filename not in cell_files:
        return None
    text = linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno).strip()
    if "~" not in text:
        return None
    kind = match.group(1)
    hint = {"function": " (a distribution or generative function without its arguments?)",
            "type": " (a class, not a distribution?)"}.get(kind, "")
    return (f"the right side of `~` at line {tb.tb_lineno} ({text}) has type {kind}{hint}, not a distribution: "
            f"write one of imcmc-lab's distributions with its parameters, e.g. `x ~ normal(0.0, 1.0)` "
            f"(not torch.distributions), or call a generative function with its arguments, e.g. "
            f"`{{\"sub\"}} ~ model(args)`.")
