"""Reading back what a figure drew: the mean lines and min-max bands of a seaborn ``lineplot``."""

from __future__ import annotations

import numpy as np


def drawn_lines(ax) -> list:
    """The data lines of ``ax`` (seaborn's legend proxies have no data and are left out)."""
    return [ln for ln in ax.lines if len(ln.get_xdata())]


def band(collection) -> dict[float, tuple[float, float]]:
    """``{x: (lowest, highest)}`` of a ``fill_between`` polygon."""
    out: dict[float, tuple[float, float]] = {}
    for x, y in collection.get_paths()[0].vertices:
        lo, hi = out.get(float(x), (np.inf, -np.inf))
        out[float(x)] = (min(lo, float(y)), max(hi, float(y)))
    return out


def lines_and_bands(ax) -> list[tuple[np.ndarray, np.ndarray, dict]]:
    """``(x, y, band)`` per hue level of one seaborn ``lineplot`` with ``errorbar``: the k-th
    data line with the k-th band."""
    lines = drawn_lines(ax)
    assert len(lines) == len(ax.collections), (len(lines), len(ax.collections))
    return [(np.asarray(ln.get_xdata(), float), np.asarray(ln.get_ydata(), float), band(c))
            for ln, c in zip(lines, ax.collections)]
