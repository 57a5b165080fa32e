"""One explorer, two front ends: ipywidgets in Jupyter, pre-rendered frames on the website.

An :class:`Explorer` is a drawing function and the controls that choose its arguments.
:meth:`Explorer.widget` wraps them in ipywidgets (a kernel redraws on every change);
:meth:`Explorer.html` draws every combination of the controls' values once, when the book
is built, and returns a self-contained block of HTML (PNG frames inline, a few lines of
script of its own, nothing loaded from anywhere) in which the same controls step through
the frames in the browser alone. Both call the same ``draw``, so they cannot disagree.

A widget lives in the kernel: a saved notebook reopened without it has no view to show. So
the widget's display output carries a still of its first view as well (``image/png``, and
the view in words as ``text/plain``), which a front end without the widget's state shows
in its place; and the kit's JupyterLab saves the widgets' state with the notebook
(``autograder/kit.py`` turns on ``saveState`` of JupyterLab's widget manager), so that the
reopened notebook shows the controls and the view they were left at.
"""

import base64
import html
import io
import itertools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt

KINDS = ("slider", "buttons", "menu")


@dataclass
class Control:
    """One argument of ``draw``: its ``name`` (the keyword), the ``options`` the reader can
    pick as ``(label, value)`` pairs, and how they are picked: a ``"slider"`` (ordered
    options), ``"buttons"`` or a ``"menu"``. ``on_page`` lists the values pre-rendered for
    the website (default all of them): a slider over a fine range of a continuous
    parameter keeps a few values there, as every combination of the controls is one frame.
    """

    name: str
    options: Sequence[tuple[str, Any]]
    kind: str = "slider"
    value: Any = None  # the first value shown; default the first option
    on_page: Sequence[Any] | None = None
    description: str | None = None  # the label beside the control; default the name

    def __post_init__(self):
        self.options = [(str(label), value) for label, value in self.options]
        if not self.options:
            raise ValueError(f"control {self.name!r} has no options")
        if self.kind not in KINDS:
            raise ValueError(f"control {self.name!r}: kind {self.kind!r} is not one of {KINDS}")
        values = [v for _, v in self.options]
        if self.value is None:
            self.value = values[0]
        for v in [self.value, *(self.on_page or [])]:
            if v not in values:
                raise ValueError(f"control {self.name!r}: {v!r} is not one of its options")
        self.description = self.description or self.name

    def page_options(self) -> list[tuple[str, Any]]:
        """The ``(label, value)`` pairs drawn for the website, in order."""
        if self.on_page is None:
            return list(self.options)
        return [(label, v) for label, v in self.options if v in list(self.on_page)]


@dataclass
class Explorer:
    """``draw(**values)`` returns a matplotlib Figure for one value of each control.

    ``available(values)``, if given, says whether a combination exists (a decoder step
    past the end of a shorter example does not): a slider then stops at the last value
    that exists for the other controls' values, in Jupyter and on the page alike.
    ``alt`` opens the alternative text of every frame, followed by the values shown.
    """

    draw: Callable[..., Any]
    controls: list[Control]
    available: Callable[[dict], bool] | None = None
    alt: str = "explorer"

    def __post_init__(self):
        names = [c.name for c in self.controls]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"an explorer needs controls with distinct names, got {names}")

    def _exists(self, values: dict) -> bool:
        return self.available is None or bool(self.available(values))

    def initial(self) -> dict:
        return {c.name: c.value for c in self.controls}

    def describe(self, values: dict) -> str:
        """'step 3: “vier”, example 2': the labels of the chosen values, in words."""
        parts = []
        for c in self.controls:
            label = next(label for label, v in c.options if v == values[c.name])
            parts.append(f"{c.description} {label}")
        return ", ".join(parts)

    # -----------------------------------------------------------------------------------
    # Jupyter: ipywidgets, redrawn by the kernel

    def widget(self):
        """An ``ipywidgets.interactive`` that redraws on every change (and draws once when
        no browser is attached, so a notebook stays executable under nbval)."""
        import ipywidgets as widgets

        made = {c.name: _make_widget(widgets, c) for c in self.controls}
        if self.available is not None:
            self._follow_limits(made)
        still = {}  # the first view, as a PNG and in words

        def show(**values):
            fig = self.draw(**values)
            if not still and fig is not None and hasattr(fig, "savefig"):
                still.update(
                    png=_b64(_png(fig, dpi=72)), alt=f"{self.alt}: {self.describe(values)}"
                )
            plt.show()

        view = _interactive_with_a_still(widgets)(show, **made)
        view.still = still
        return view

    def _follow_limits(self, made: dict) -> None:
        """Keep each slider within the values that exist for the other controls' values;
        registered before ``interactive``'s own observers, so it runs before a redraw."""

        def fit(change=None):
            current = {name: w.value for name, w in made.items()}
            for c in self.controls:
                w = made[c.name]
                if c.kind != "slider" or not hasattr(w, "max"):
                    continue
                last = max(
                    (
                        i
                        for i, (_, v) in enumerate(c.options)
                        if self._exists({**current, c.name: v})
                    ),
                    default=0,
                )
                last_value = c.options[last][1]
                if w.value > last_value:
                    w.value = last_value
                w.max = last_value

        for w in made.values():
            w.observe(fit, names="value")
        fit()

    # -----------------------------------------------------------------------------------
    # The website: every frame drawn at build time, stepped by the browser

    def frames(self) -> tuple[dict[str, int], list[bytes], list[str]]:
        """Draw every combination of the controls' page values that exists.

        Returns ``(keys, images, alts)``: ``keys`` maps "i,j,..." (the index of each
        control's page value) to the index of its PNG in ``images``; identical frames are
        stored once. ``alts[k]`` describes ``images[k]``."""
        keys, images, alts, seen = {}, [], [], {}
        page = [c.page_options() for c in self.controls]
        for index in itertools.product(*(range(len(p)) for p in page)):
            values = {
                c.name: page[i][k][1]
                for i, (c, k) in enumerate(zip(self.controls, index, strict=True))
            }
            if not self._exists(values):
                continue
            fig = self.draw(**values)
            png = _png(fig)
            plt.close(fig)
            if png not in seen:
                seen[png] = len(images)
                images.append(png)
                alts.append(f"{self.alt}: {self.describe(values)}")
            keys[",".join(map(str, index))] = seen[png]
        if not keys:
            raise ValueError("no combination of the controls' values exists: nothing to draw")
        return keys, images, alts

    def html(self) -> str:
        """A self-contained ``<div>``: the controls, the first frame as an ``<img>`` and the
        other frames inline (base64 PNG), switched by a few lines of script."""
        keys, images, alts = self.frames()
        page = [c.page_options() for c in self.controls]
        start = []
        for c, options in zip(self.controls, page, strict=True):
            values = [v for _, v in options]
            start.append(values.index(c.value) if c.value in values else 0)
        first_key = ",".join(map(str, start))
        if first_key not in keys:  # the initial values were not drawn: start at the first frame
            first_key = next(iter(keys))
            start = [int(i) for i in first_key.split(",")]
        first = keys[first_key]
        uid = f"ac-explorer-{next(_COUNTER)}"
        data = {
            "keys": keys,
            # the first frame is the <img>'s own src: not stored twice
            "images": [None if k == first else _b64(png) for k, png in enumerate(images)],
            "alt": self.alt,
            "start": start,
            "controls": [
                {"kind": c.kind, "name": c.description, "labels": [label for label, _ in p]}
                for c, p in zip(self.controls, page, strict=True)
            ],
        }
        rows, fixed = [], []
        for i, (c, options) in enumerate(zip(self.controls, page, strict=True)):
            if len(options) == 1 and len(c.options) > 1:
                fixed.append(f"{c.description} {options[0][0]}")
                continue
            rows.append(_control_html(i, c, options, start[i]))
        note = (
            f'<p class="ac-fixed">On this page: {html.escape(", ".join(fixed))} '
            "(run the notebook to change them).</p>"
            if fixed
            else ""
        )
        status = html.escape(
            ", ".join(
                f"{c.description} {p[k][0]}"
                for c, p, k in zip(self.controls, page, start, strict=True)
            )
        )
        json_text = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
        return (
            f'<div class="ac-explorer" id="{uid}">'
            f"<style>{_CSS}</style>"
            f'<div class="ac-controls">{"".join(rows)}</div>{note}'
            f'<p class="ac-status" aria-live="polite">{status}</p>'
            f'<img class="ac-frame" src="data:image/png;base64,{_b64(images[first])}" '
            f'alt="{html.escape(alts[first])}">'
            f'<script type="application/json" class="ac-data">{json_text}</script>'
            f"<script>{_JS.replace('ROOT_ID', uid)}</script>"
            "</div>"
        )


_COUNTER = itertools.count()
_CLASSES: dict = {}


def _interactive_with_a_still(widgets):
    """``ipywidgets.interactive`` whose display output also holds ``still``: a PNG of its first
    view and that view in words, what a front end shows when the widget cannot be drawn (no
    kernel, no saved widget state, an untrusted notebook)."""
    if "interactive" not in _CLASSES:

        class Interactive(widgets.interactive):
            still: dict = {}

            def _repr_mimebundle_(self, **kwargs):
                bundle = super()._repr_mimebundle_(**kwargs)
                if bundle is not None and self.still:
                    bundle["image/png"] = self.still["png"]
                    bundle["text/plain"] = self.still["alt"]
                return bundle

        _CLASSES["interactive"] = Interactive
    return _CLASSES["interactive"]


def _make_widget(widgets, c: Control):
    values = [v for _, v in c.options]
    # options that are their own labels are passed plainly (widget.options then lists them)
    options = values if all(label == v for label, v in c.options) else c.options
    if c.kind == "menu":
        return widgets.Dropdown(options=options, value=c.value, description=c.description)
    if c.kind == "buttons":
        return widgets.ToggleButtons(options=options, value=c.value, description=c.description)
    if values == list(range(len(values))):  # positions: a plain integer slider
        return widgets.IntSlider(
            value=c.value, min=0, max=len(values) - 1, description=c.description
        )
    return widgets.SelectionSlider(options=c.options, value=c.value, description=c.description)


def _png(fig, dpi: int = 80) -> bytes:
    """The figure as a PNG of at most 256 colours (a third of the size, same look)."""
    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    image = Image.open(buffer).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    out = io.BytesIO()
    image.save(out, format="png", optimize=True)
    return out.getvalue()


def _b64(png: bytes) -> str:
    return base64.b64encode(png).decode("ascii")


def _control_html(i: int, c: Control, options, start: int) -> str:
    name = html.escape(c.description)
    labels = [html.escape(label) for label, _ in options]
    if c.kind == "slider":
        return (
            f'<label class="ac-control"><span>{name}</span>'
            f'<input type="range" data-control="{i}" min="0" max="{len(options) - 1}" '
            f'step="1" value="{start}" aria-label="{name}">'
            f'<output data-label="{i}">{labels[start]}</output></label>'
        )
    if c.kind == "menu":
        items = "".join(
            f'<option value="{k}"{" selected" if k == start else ""}>{label}</option>'
            for k, label in enumerate(labels)
        )
        return (
            f'<label class="ac-control"><span>{name}</span>'
            f'<select data-control="{i}" aria-label="{name}">{items}</select></label>'
        )
    buttons = "".join(
        f'<button type="button" data-control="{i}" data-value="{k}" '
        f'aria-pressed="{"true" if k == start else "false"}">{label}</button>'
        for k, label in enumerate(labels)
    )
    return (
        f'<div class="ac-control" role="group" aria-label="{name}">'
        f"<span>{name}</span>{buttons}</div>"
    )


_CSS = re.sub(
    r"\s+",
    " ",
    """
.ac-explorer { margin: 1em 0; }
.ac-explorer .ac-controls { display: flex; flex-wrap: wrap; gap: 0.4em 1.5em; }
.ac-explorer .ac-control { display: flex; flex-wrap: wrap; align-items: center; gap: 0.4em;
  margin: 0; }
.ac-explorer .ac-control > span { font-weight: bold; }
.ac-explorer input[type=range] { width: min(18em, 60vw); }
.ac-explorer output { min-width: 3em; font-family: monospace; }
.ac-explorer select { max-width: 100%; }
.ac-explorer button { border: 1px solid #888; border-radius: 4px; background: #f4f4f4;
  padding: 0.15em 0.7em; min-width: 2.4em; }
.ac-explorer button[aria-pressed=true] { background: #0072B2; color: #fff; }
.ac-explorer .ac-status { margin: 0.4em 0; font-size: 0.9em; }
.ac-explorer .ac-fixed { font-size: 0.9em; margin: 0.3em 0; }
.ac-explorer img.ac-frame { max-width: 100%; height: auto; display: block; }
""",
).strip()

# Steps through the frames: reads the state of every control, lowers a slider's end to the
# last value that has a frame for the others' values, and swaps the image and its labels.
_JS = """
(function () {
  var root = document.getElementById("ROOT_ID");
  var data = JSON.parse(root.querySelector("script.ac-data").textContent);
  var img = root.querySelector("img.ac-frame");
  var firstSrc = img.getAttribute("src");
  var state = data.start.slice();
  function key(s) { return s.join(","); }
  function fit() {
    data.controls.forEach(function (c, i) {
      if (c.kind !== "slider") return;
      var input = root.querySelector('input[data-control="' + i + '"]');
      if (!input) return;
      var s = state.slice(), last = 0;
      for (var v = 0; v < c.labels.length; v++) { s[i] = v; if (key(s) in data.keys) last = v; }
      input.max = last;
      if (state[i] > last) state[i] = last;
      input.value = state[i];
    });
  }
  function show() {
    fit();
    var k = data.keys[key(state)];
    if (k === undefined) return;
    var b64 = data.images[k];
    img.setAttribute("src", b64 === null ? firstSrc : "data:image/png;base64," + b64);
    var status = data.controls.map(function (c, i) { return c.name + " " + c.labels[state[i]]; });
    root.querySelector(".ac-status").textContent = status.join(", ");
    img.setAttribute("alt", data.alt + ": " + status.join(", "));
    data.controls.forEach(function (c, i) {
      var out = root.querySelector('output[data-label="' + i + '"]');
      if (out) out.textContent = c.labels[state[i]];
      root.querySelectorAll('button[data-control="' + i + '"]').forEach(function (b) {
        b.setAttribute("aria-pressed", String(Number(b.dataset.value) === state[i]));
      });
    });
  }
  root.querySelectorAll("input[data-control], select[data-control]").forEach(function (el) {
    el.addEventListener("input", function () {
      state[Number(el.dataset.control)] = Number(el.value); show();
    });
  });
  root.querySelectorAll("button[data-control]").forEach(function (b) {
    b.addEventListener("click", function () {
      state[Number(b.dataset.control)] = Number(b.dataset.value); show();
    });
  });
  show();
})();
"""
