"""Explorers (tailtheory.core.explore): sliders in a kernel with ipywidgets, the static figure at
the defaults without one, nothing saved either way."""

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from tailtheory.core import io  # noqa: E402
from tailtheory.core import explore  # noqa: E402
from tailtheory.core.explore import Control, explorer  # noqa: E402

CONTROLS = dict(a=Control(0.5, 0.0, 1.0, 0.1), b=Control(0.01, 1e-4, 1.0, log=True),
                n=Control(3, 1, 8), k=Control(4, options=(2, 4, 8)))


class Draw:
    """A drawing function that records its calls and the figures it made."""

    def __init__(self, table: bool = False):
        self.calls, self.figs, self.table = [], [], table

    def __call__(self, **values):
        self.calls.append(values)
        fig, ax = plt.subplots()
        ax.plot([0, 1], [values["a"], values["b"]])
        self.figs.append(fig)
        return (fig, pd.DataFrame(values, index=[0])) if self.table else fig


@pytest.fixture
def figures_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILTHEORY_FIGURES", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("table", [False, True])
def test_outside_a_kernel_draws_the_defaults_once_and_saves_nothing(figures_dir, capsys, table):
    assert not io.in_kernel() and not explore.widgets_available()
    draw = Draw(table)
    assert explorer(draw, "caption", **CONTROLS) is None
    assert draw.calls == [{"a": 0.5, "b": 0.01, "n": 3, "k": 4}]
    assert not plt.fignum_exists(draw.figs[0].number)
    assert list(figures_dir.iterdir()) == []
    assert capsys.readouterr().out == ""


def _shown(monkeypatch):
    """Pretend to be in a kernel; collect what IPython would display."""
    import IPython.display

    shown = []
    monkeypatch.setattr(io, "in_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))
    return shown


@pytest.mark.parametrize("why", ["env", "no ipywidgets"])
def test_kernel_without_widgets_shows_the_static_figure(figures_dir, monkeypatch, why):
    from IPython.display import HTML, Image

    shown = _shown(monkeypatch)
    if why == "env":
        monkeypatch.setenv(explore.WIDGETS_ENV, "0")
    else:
        monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import fails
    draw = Draw()
    assert explorer(draw, "M3 here.", **CONTROLS) is None
    assert len(draw.calls) == 1 and not plt.fignum_exists(draw.figs[0].number)
    assert isinstance(shown[0], Image) and shown[0].data[:4] == b"\x89PNG"
    assert isinstance(shown[1], HTML)
    assert "M3 here. Static figure at a = 0.5, b = 0.01, n = 3, k = 4" in shown[1].data
    assert list(figures_dir.iterdir()) == []


def _leaves(widget):
    """Every widget under ``widget`` (itself included)."""
    return [widget, *(w for c in getattr(widget, "children", ()) for w in _leaves(c))]


def test_kernel_with_widgets_returns_sliders_over_an_image(figures_dir, monkeypatch):
    ipywidgets = pytest.importorskip("ipywidgets")

    shown = _shown(monkeypatch)
    draw = Draw(table=True)
    w = explorer(draw, "caption", **CONTROLS)
    assert isinstance(w, ipywidgets.VBox)
    leaves = _leaves(w)
    # no Output widget: nbclient echoes an Output widget's outputs to the kernel while it waits
    # for the cell's reply, where a known lost wake-up of its handling stalls the cell
    assert not any(isinstance(x, ipywidgets.Output) for x in leaves)
    sliders = {c.description: c for c in leaves if isinstance(c, ipywidgets.widgets.ValueWidget)
               and getattr(c, "description", "")}
    assert isinstance(sliders["a"], ipywidgets.FloatSlider) and sliders["a"].value == 0.5
    assert isinstance(sliders["b"], ipywidgets.FloatLogSlider)
    assert sliders["b"].value == pytest.approx(0.01) and (sliders["b"].min, sliders["b"].max) == (
        -4, 0)
    assert isinstance(sliders["n"], ipywidgets.IntSlider) and sliders["n"].max == 8
    assert isinstance(sliders["k"], ipywidgets.SelectionSlider) and sliders["k"].value == 4
    assert not sliders["a"].continuous_update
    (image,) = [x for x in leaves if isinstance(x, ipywidgets.Image)]
    assert draw.calls == [{"a": 0.5, "b": pytest.approx(0.01), "n": 3, "k": 4}]
    first = bytes(image.value)
    assert first[:4] == b"\x89PNG"
    sliders["n"].value = 5                                    # a slider move redraws
    assert draw.calls[-1]["n"] == 5 and len(draw.calls) == 2
    sliders["a"].value = 0.9                                  # the image shows the new figure
    assert bytes(image.value)[:4] == b"\x89PNG" and bytes(image.value) != first
    assert not any(plt.fignum_exists(f.number) for f in draw.figs)
    assert shown == []                                        # nothing displayed outside the box
    assert any("caption" in x.value for x in leaves if isinstance(x, ipywidgets.HTML))
    assert list(figures_dir.iterdir()) == []


def test_a_drawing_error_on_a_slider_move_shows_in_the_box(monkeypatch):
    ipywidgets = pytest.importorskip("ipywidgets")
    _shown(monkeypatch)
    draw = Draw()

    def fails_at_n_7(**values):
        if values["n"] == 7:
            raise ValueError("n = 7 is out of range")
        return draw(**values)

    leaves = _leaves(explorer(fails_at_n_7, **CONTROLS))
    (image,) = [x for x in leaves if isinstance(x, ipywidgets.Image)]
    n = next(x for x in leaves if getattr(x, "description", "") == "n")
    before = bytes(image.value)
    n.value = 7
    assert bytes(image.value) == before
    assert any("n = 7 is out of range" in x.value for x in leaves
               if isinstance(x, ipywidgets.HTML))
    n.value = 2
    assert not any("out of range" in x.value for x in leaves if isinstance(x, ipywidgets.HTML))


def test_controls_are_checked():
    with pytest.raises(ValueError, match="not one of"):
        Control(3, options=(2, 4))
    with pytest.raises(ValueError, match="low and high"):
        Control(1.0)
    with pytest.raises(ValueError, match="outside"):
        Control(2.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="log slider"):
        Control(0.5, 0.0, 1.0, log=True)
    with pytest.raises(ValueError, match="at least one"):
        explorer(Draw())
    with pytest.raises(TypeError, match="Control"):
        explorer(Draw(), a=0.5)


def test_fast_log_ticks_leaves_decades_only_on_log_axes():
    fig, ax = plt.subplots()
    ax.plot([1e-12, 1.0], [0.0, 1.0])
    ax.set_xscale("log")
    explore.fast_log_ticks(ax)
    fig.canvas.draw()
    assert ax.xaxis.get_minorticklocs().size == 0
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert labels and not any("$" in t for t in labels) and len(labels) <= 8
    assert ax.yaxis.get_scale() == "linear"
    plt.close(fig)
