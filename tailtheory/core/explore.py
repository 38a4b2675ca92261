"""Explorers: a figure with sliders in a Jupyter kernel, the same figure once, static, elsewhere.

An explorer is a drawing function ``draw(**values) -> figure`` (or ``(figure, table)``, as the
figure helpers of the theory modules return) and one :class:`Control` per argument.
:func:`explorer` returns a widget box in a kernel where ipywidgets can be imported: the sliders
over an image widget holding the figure as PNG bytes, redrawn when a slider's value changes.
Without a widget front end it draws the figure once, at the controls' defaults: inline (with a
caption saying so) in a kernel without ipywidgets, not at all outside a kernel (a notebook run as
a script, ``make repro``). An explorer never writes a file: the figures of record are the ones
:func:`~tailtheory.core.display.show_figure` saves.

No Output widget, on purpose. ``ipywidgets.interactive`` draws into an Output widget, and
nbclient (under ``jupyter nbconvert --execute``, papermill, nbmake, Jupyter Book) mimics a front
end's Output widget by echoing each of its outputs back to the kernel on the shell channel while
it waits for the cell's reply there: a known lost wake-up in nbclient's Output-widget handling,
which left a cell idle until nbclient's cell timeout (for ever without one) in about one
execution of notebook 01 in sixteen. An image widget's value is widget state the kernel sends;
nbclient only stores it, sends nothing back, and the cell's reply is never missed.

``$TAILTHEORY_WIDGETS=0`` forces the static figure in a kernel too: a notebook rendered for
readers who open it without running anything (a code host shows images, not widgets).
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from typing import Any, Callable

WIDGETS_ENV = "TAILTHEORY_WIDGETS"
"""``0`` (or ``false``, ``no``, ``off``): no sliders, the static figure at the defaults."""


@dataclass(frozen=True)
class Control:
    """One argument of an explorer's drawing function.

    A slider from ``low`` to ``high`` by ``step`` (an int slider when ``default``, ``low`` and
    ``high`` are ints; ``log=True``: a slider over ``log10`` of the value, ``step`` in decades),
    or over the listed ``options``. ``label`` is the slider's caption (default: the argument's
    name).
    """

    default: Any
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    options: tuple = ()
    label: str = ""

    def __post_init__(self):
        if self.options:
            if self.default not in self.options:
                raise ValueError(f"default {self.default!r} is not one of {self.options!r}")
            return
        if self.low is None or self.high is None:
            raise ValueError("a Control needs options or both low and high")
        if not self.low <= self.default <= self.high:
            raise ValueError(f"default {self.default!r} outside [{self.low}, {self.high}]")
        if self.log and not self.low > 0:
            raise ValueError(f"a log slider needs low > 0, got {self.low}")

    def widget(self, name: str):
        """The ipywidgets slider of this control (redrawn when released, not while dragged)."""
        import math

        import ipywidgets as w

        common = dict(description=self.label or name, continuous_update=False,
                      style={"description_width": "initial"})
        if self.options:
            return w.SelectionSlider(options=list(self.options), value=self.default, **common)
        if self.log:
            lo, hi = math.log10(self.low), math.log10(self.high)
            return w.FloatLogSlider(value=self.default, base=10, min=lo, max=hi,
                                    step=self.step or (hi - lo) / 100, readout_format=".3g",
                                    **common)
        if all(isinstance(x, int) for x in (self.default, self.low, self.high)):
            return w.IntSlider(value=self.default, min=self.low, max=self.high,
                               step=int(self.step or 1), **common)
        return w.FloatSlider(value=self.default, min=self.low, max=self.high,
                             step=self.step or (self.high - self.low) / 100,
                             readout_format=".3g", **common)


def defaults(controls: dict[str, Control]) -> dict[str, Any]:
    """The value of every control before anything is moved."""
    return {k: c.default for k, c in controls.items()}


def _figure(drawn):
    """The figure of a drawing function's result (a figure, or ``(figure, table)``)."""
    return drawn[0] if isinstance(drawn, tuple) else drawn


def widgets_available() -> bool:
    """True in a Jupyter kernel with ipywidgets importable, unless ``$TAILTHEORY_WIDGETS=0``."""
    from tailtheory.core.io import in_kernel

    if os.environ.get(WIDGETS_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if not in_kernel():
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def fast_log_ticks(ax, numticks: int = 6) -> None:
    """Log axes of ``ax`` with at most ``numticks`` decade ticks, plain-text labels (``1e-05``)
    and no minor ticks: over many decades, tick labels typeset as math are most of a redraw's
    time. Linear axes are left alone."""
    from matplotlib.ticker import LogFormatter, LogLocator, NullLocator

    for axis in (ax.xaxis, ax.yaxis):
        if axis.get_scale() == "log":
            axis.set_major_locator(LogLocator(numticks=numticks))
            axis.set_major_formatter(LogFormatter(labelOnlyBase=True))
            axis.set_minor_locator(NullLocator())


def _png(fig) -> bytes:
    """The figure as PNG bytes, in memory, at :func:`~tailtheory.core.io.save_figure`'s
    resolution; drawn once (the figure helpers lay themselves out, so no ``bbox_inches="tight"``,
    which draws twice). The figure is closed, so the kernel's inline backend does not draw it a
    second time."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=110)
    finally:
        plt.close(fig)
    return buf.getvalue()


def _caption(text: str) -> str:
    return f'<div style="font-size:0.9em;color:#444;margin:0 0 1em 0">{html.escape(text)}</div>'


def _widget_explorer(draw: Callable[..., Any], caption: str, controls: dict[str, Control]):
    """The sliders of ``controls`` over an image widget of ``draw``'s figure (and ``caption``),
    the image redrawn when a slider's value changes; no Output widget (module docstring). A
    drawing error shows as one line under the sliders, and the last figure stays."""
    import ipywidgets

    sliders = {k: c.widget(k) for k, c in controls.items()}
    values = lambda: {k: s.value for k, s in sliders.items()}  # noqa: E731
    image = ipywidgets.Image(value=_png(_figure(draw(**values()))), format="png")  # errors here
    problem = ipywidgets.HTML("")                                                  # fail the cell

    def redraw(_change=None) -> None:
        now = values()
        try:
            image.value = _png(_figure(draw(**now)))
        except Exception as exc:  # shown in the box: a callback's error has no cell to go to
            problem.value = _caption(f"Could not draw at {now}: {type(exc).__name__}: {exc}")
            return
        problem.value = ""

    for s in sliders.values():
        s.observe(redraw, names="value")
    parts = [*sliders.values(), problem, image]
    if caption:
        parts.append(ipywidgets.HTML(_caption(caption)))
    return ipywidgets.VBox(parts)


def explorer(draw: Callable[..., Any], caption: str = "", **controls: Control):
    """Sliders for ``draw``'s arguments, or its figure at the defaults without a widget front end.

    ``draw(**values)`` returns a matplotlib figure or ``(figure, table)``; each keyword of
    ``controls`` names one of its arguments. In a kernel with ipywidgets: returns an
    ``ipywidgets.VBox`` (the sliders, the figure as an image widget redrawn on each change, and
    ``caption``; end a cell with it). Otherwise: the figure at the defaults, shown inline in a
    kernel (``caption`` says it is static) and closed; returns None. Nothing is saved either way.
    """
    import matplotlib.pyplot as plt

    from tailtheory.core.io import in_kernel

    if not controls:
        raise ValueError("an explorer needs at least one Control")
    bad = [k for k, c in controls.items() if not isinstance(c, Control)]
    if bad:
        raise TypeError(f"controls must be Control instances: {bad}")

    if widgets_available():
        return _widget_explorer(draw, caption, controls)

    fig = _figure(draw(**defaults(controls)))
    if not in_kernel():
        plt.close(fig)
        return None
    from IPython.display import HTML, Image, display

    display(Image(data=_png(fig), format="png"))
    shown = ", ".join(f"{k} = {v:g}" if isinstance(v, (int, float)) else f"{k} = {v}"
                      for k, v in defaults(controls).items())
    display(HTML(_caption(f"{caption} Static figure at {shown} (sliders need ipywidgets "
                          f"and a Jupyter front end).".strip())))
    return None


__all__ = ["Control", "WIDGETS_ENV", "defaults", "explorer", "fast_log_ticks",
           "widgets_available"]
