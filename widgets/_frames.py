"""A stack of pre-rendered frames with a control that switches between them in the browser.

The frames (HTML/SVG strings made in Python) live in the widget state, and the
control is linked to the visible frame with ``jslink``: the browser changes
frames without the kernel, so the view keeps working in a static HTML export
that embeds widget state. Where no widget manager runs at all (a notebook
exported without widget state, a GitHub preview), the mime bundle's
``text/html`` fallback is a self-contained page fragment with the same frames
and a few lines of inline JavaScript; with JavaScript stripped it shows every
frame one below the other.

Saved notebooks: a notebook reopened without its widget state (JupyterLab does
not save it by default), a GitHub or nbviewer preview and an HTML export read
offline all lack the live widget. So a view displays *two* outputs (see
:func:`display_with_fallback`): first the static fallback (``text/html``), then
the widget. A view that changes after the cell that shows it (a live sampler)
sends its state again from within a later cell (:func:`after_cell`), as headless
runs save only what is sent during a cell. When the widget renders, a ``<style>``
inside it hides the fallback (by a class unique to this view); where it does not
render, the fallback stays, and its own ``<style>`` hides the widget's "Error
displaying widget" line.

Untrusted notebooks: JupyterLab sanitises the HTML of a notebook it did not sign
(one saved by ``nbconvert --execute`` or downloaded): ``<svg>``, ``<style>`` and
``<script>`` are removed, an ``<svg>``'s text is left behind as loose text, and
widget outputs show their ``text/html`` or ``text/plain`` (so the widget's output
carries a hidden ``text/html``: its text repr would show beside the picture).
``<img>`` with a ``data:`` URI and the ``hidden`` attribute survive, so every
inline SVG of the fallback also comes as an ``<img>`` of the same SVG
(:func:`sanitizer_proof`): the fallback's ``<style>`` shows the inline SVG and
hides the image; where that style was removed, the ``hidden`` inline copy (and
its loose text) stays hidden and the image shows.
"""

from __future__ import annotations

import base64
import json
import re
import uuid

import ipywidgets as W

from ._style import INK, MUTED, SANS, esc


class FramePlayer(W.VBox):
    """``header`` above a control and a :class:`ipywidgets.Stack` of ``frames``.

    ``frames``: list of HTML strings; ``labels``: one short name per frame.
    ``control="play"``: a Play button with a slider (animation, paper Figs. 1f/2f);
    ``control="toggle"``: toggle buttons (alternative views of one thing).
    """

    def __init__(self, frames, labels, header_html="", footer_html="", control="play",
                 interval_ms=1600, title="frames"):
        if len(frames) != len(labels) or not frames:
            raise ValueError("FramePlayer needs one label per frame and at least one frame")
        self.frames, self.frame_labels, self._title = list(frames), list(labels), title
        self._header_html, self._footer_html = header_html, footer_html
        self.stack = W.Stack([W.HTML(f) for f in self.frames], selected_index=0,
                             layout=W.Layout(width="100%", overflow="auto"))
        if control == "play":
            self.play = W.Play(value=0, min=0, max=len(frames) - 1, step=1, interval=interval_ms,
                               repeat=True, show_repeat=False, description="Play",
                               layout=W.Layout(width="auto", margin="0 12px 0 0"))
            self.selector = W.SelectionSlider(options=self.frame_labels, index=0, continuous_update=True,
                                              readout=True, layout=W.Layout(width="60%", min_width="260px"),
                                              style={"description_width": "0px"})
            self.links = [W.jslink((self.play, "value"), (self.selector, "index")),
                          W.jslink((self.selector, "index"), (self.stack, "selected_index"))]
            controls = [self.play, self.selector]
        elif control == "toggle":
            self.play = None
            self.selector = W.ToggleButtons(options=self.frame_labels, index=0,
                                            style={"button_width": "auto"})
            self.links = [W.jslink((self.selector, "index"), (self.stack, "selected_index"))]
            controls = [self.selector]
        else:
            raise ValueError(f"control must be 'play' or 'toggle', not {control!r}")
        self.control = control
        self.static_id = new_static_id()
        children = []
        if header_html:
            children.append(W.HTML(header_html))
        children += [W.HBox(controls, layout=W.Layout(align_items="center")), self.stack]
        if footer_html:
            children.append(W.HTML(footer_html))
        children.append(hide_fallback(self.static_id))
        super().__init__(children, layout=W.Layout(width="100%"))
        self.add_class("imcmc-frames")
        self.add_class("imcmc-live")

    def show(self, index: int):
        """Show frame ``index`` (sets the control and the stack from Python too)."""
        if self.play is not None:
            self.play.value = index
        self.selector.index = index
        self.stack.selected_index = index

    def __repr__(self):
        return f"<{type(self).__name__}: {self._title}, {len(self.frames)} frames>"

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = repr(self)
        bundle["text/html"] = self.static_html()
        return bundle

    def _ipython_display_(self):
        display_with_fallback(self, {"text/html": self.static_html(), "text/plain": repr(self)})

    #: which frames the static fallback holds (``None``: all); a view whose last frame shows
    #: everything (a trajectory step by step) keeps only that one, as a notebook whose scripts
    #: were stripped shows every frame of the fallback one below the other
    static_frames = None

    def static_html(self) -> str:
        """The self-contained fallback: the same frames, switched by inline JavaScript."""
        uid = "imcmc-" + uuid.uuid4().hex[:12]
        kept = [(f, label) for i, (f, label) in enumerate(zip(self.frames, self.frame_labels))
                if self.static_frames is None or i in self.static_frames]
        if len(kept) == 1:
            return (f"<div id='{uid}' class='imcmc-static {self.static_id}'>{sanitizer_proof(self._header_html)}"
                    f"{sanitizer_proof(kept[0][0])}{sanitizer_proof(self._footer_html)}</div>"
                    f"{fallback_style(self.static_id)}")
        frames = "".join(f"<div class='imcmc-frame' data-frame='{i}'>{sanitizer_proof(f)}</div>"
                         for i, (f, _) in enumerate(kept))
        labels = json.dumps([label for _, label in kept]).replace("<", "\\u003c").replace(">", "\\u003e")
        play = self.control == "play"
        controls = (
            f'<div class="imcmc-controls" style="display:none;align-items:center;gap:10px;margin:6px 0;'
            f'font:13px {SANS};color:{MUTED}">'
            + ("<button type='button' class='imcmc-play' style='min-width:76px'>&#9654; Play</button>" if play else "")
            + f"<input type='range' class='imcmc-range' min='0' max='{len(kept) - 1}' value='0' step='1'"
              f" style='width:50%'><span class='imcmc-label'></span></div>"
        )
        script = f"""<script>(function(){{
var root=document.getElementById('{uid}'); if(!root) return;
var frames=root.querySelectorAll('.imcmc-frame'), range=root.querySelector('.imcmc-range'),
    label=root.querySelector('.imcmc-label'), btn=root.querySelector('.imcmc-play'), labels={labels}, timer=null;
function show(i){{ for(var k=0;k<frames.length;k++) frames[k].style.display=(k==i)?'block':'none';
  range.value=i; label.textContent=labels[i]; root.setAttribute('data-shown', i); }}
root.querySelector('.imcmc-controls').style.display='flex';
range.addEventListener('input', function(){{ show(+range.value); }});
if(btn) btn.addEventListener('click', function(){{
  if(timer){{ clearInterval(timer); timer=null; btn.innerHTML='&#9654; Play'; return; }}
  btn.innerHTML='&#10074;&#10074; Pause';
  timer=setInterval(function(){{ show((+range.value+1)%frames.length); }}, {int(self.play.interval) if play else 0});
}});
show(0);
}})();</script>"""
        return (f"<div id='{uid}' class='imcmc-static {self.static_id}'>{sanitizer_proof(self._header_html)}"
                f"{controls}{frames}{sanitizer_proof(self._footer_html)}</div>{fallback_style(self.static_id)}{script}")


def caption(title: str, detail: str = "") -> str:
    """A header line: ``title`` in bold and ``detail`` (already HTML) in grey."""
    return (f'<div style="font:14px {SANS};margin:2px 0 4px;color:{INK}"><b>{esc(title)}</b>'
            f"<span style='color:{MUTED};margin-left:10px'>{detail}</span></div>")


# ---------------------------------------------------------------------------------------------
# The static fallback beside the widget (saved notebooks, exports, previews)

def new_static_id() -> str:
    return "imcmc-static-" + uuid.uuid4().hex[:12]


def hide_fallback(static_id: str) -> W.HTML:
    """A widget child whose ``<style>`` hides the fallback output ``static_id`` (and the output
    area holding it) wherever the live widget renders.

    It also keeps one "disconnected" mark per view: a view restored from saved widget state
    without a kernel has ipywidgets' broken-link icon on each of its parts (seven on a
    sampler, one on a line of its own); the view's own icon says it all."""
    return W.HTML(f"<style>.{static_id}{{display:none!important}}"
                  f".jp-OutputArea-child:has(.{static_id}){{display:none!important}}"
                  f".imcmc-live .jupyter-widgets-disconnected::before{{display:none}}</style>",
                  layout=W.Layout(display="none"))


def fallback_style(static_id: str) -> str:
    """The fallback's own ``<style>``: the output right after it (the widget) is hidden unless
    the widget really rendered there (JupyterLab's "Error displaying widget: model not found",
    an export's text/plain repr); the inline SVGs are shown and their image copies hidden
    (:func:`sanitizer_proof`)."""
    return (f"<style>.jp-OutputArea-child:has(.{static_id}) + .jp-OutputArea-child"
            f":not(:has(.imcmc-live)){{display:none}}"
            f".{static_id} .imcmc-vector{{display:block!important}}"
            f".{static_id} .imcmc-raster{{display:none!important}}</style>")


# hidden where no style sheet reaches: both forms, as sanitisers keep one or the other (JupyterLab's
# drops a bare ``hidden``, keeps ``hidden='hidden'`` and inline styles)
_HIDDEN = "hidden='hidden' style='display:none'"
_INLINE_SVG = re.compile(r"<svg\b.*?</svg>", re.S)      # the views' SVGs are never nested
_SVG_TITLE = re.compile(r"<title>(.*?)</title>", re.S)


def sanitizer_proof(html: str) -> str:
    """``html`` with each inline ``<svg>`` kept, ``hidden``, and followed by an ``<img>`` of the
    same SVG: what survives JupyterLab's sanitiser of untrusted notebooks (module docstring).
    :func:`fallback_style` shows the inline SVG and hides the image wherever styles survive."""
    def both(match):
        svg = match.group(0)
        title = _SVG_TITLE.search(svg)
        data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
        return (f"<div class='imcmc-vector' {_HIDDEN}>{svg}</div>"
                f"<img class='imcmc-raster' alt=\"{title.group(1) if title else 'picture'}\" "
                f"style='max-width:100%;height:auto' src='data:image/svg+xml;base64,{data}'>")
    return _INLINE_SVG.sub(both, html)


def after_cell(callback):
    """Call ``callback()`` once, at the end of the IPython cell now running, or of the next one
    to run (``post_run_cell``); outside IPython, never.

    Why: a headless run (``jupyter nbconvert --execute``, nbclient, papermill) saves the widget
    state and display updates it received *during* a cell's execution; messages a widget sends
    between cells (from an event-loop callback, such as a background run's end) are dropped. A
    view that changes between cells sends its state again here, inside a cell, so the saved
    notebook holds its final state."""
    try:
        from IPython import get_ipython
    except ImportError:       # (ipywidgets needs IPython, but a view must not fail over this)
        return
    shell = get_ipython()
    if shell is None:
        return

    def once(_result):
        shell.events.unregister("post_run_cell", once)
        callback()
    shell.events.register("post_run_cell", once)


def resend_state(widget):
    """Send the whole state of ``widget`` and of every widget inside it (see :func:`after_cell`)."""
    widget.send_state()
    for child in getattr(widget, "children", ()):
        resend_state(child)


def display_with_fallback(widget, fallback: dict, display_id=None):
    """Display ``fallback`` (a mime bundle) and then ``widget``, as two outputs of the cell
    (module docstring). Returns the fallback's display handle when ``display_id`` is true,
    so a view that changes (a live sampler) can update what a saved notebook shows."""
    from IPython.display import display

    handle = display(fallback, raw=True, display_id=display_id)
    live = widget._repr_mimebundle_()
    # Where no widget renders, the view's output shows nothing: a frame player's own copy of the
    # fallback would show it twice, and an untrusted notebook would show the widget's text repr
    # ("<SamplerStream ...: running, 17 steps>", stale) below the picture. So its text/html, which
    # such front ends prefer to text/plain, is hidden (where styles survive, fallback_style hides
    # the output too).
    live["text/html"] = f"<div class='imcmc-duplicate' {_HIDDEN}>{live.get('text/html', '')}</div>"
    display(live, raw=True)
    return handle
