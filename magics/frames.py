"""Which frames of a traceback are the user's (no IPython here).

An error the engine raises about the user's program (an ``ImcmcError``) is shown
with the user's frames only: notebook cells (the compiled ``%%gen`` and
``%%transform`` cells among them) and the user's own modules. Frames of
imcmc-lab, IPython, the standard library and installed packages are left out.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from types import TracebackType

__all__ = ["library_folders", "user_frames"]


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
