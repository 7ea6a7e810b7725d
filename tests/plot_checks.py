"""What a reader checks on a plot, as code: a title, axis labels with units, a legend entry for
every series, and no series hidden behind another.

Used by tests/test_plots.py on the figures that servelab.plots saves (captured on their way to
the PNG file, so the checks see exactly what is drawn).
"""

from __future__ import annotations

import re
from itertools import combinations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

UNIT = re.compile(r"\([^()]*[A-Za-z/%][^()]*\)")  # "(s)", "(requests/s)", "(FLOP/byte)"


def series(ax: Axes) -> list[Line2D]:
    """The data lines of ``ax`` (matplotlib names unlabelled helper lines ``_...``)."""
    return [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]


def legend_labels(fig: Figure) -> set[str]:
    legends = [ax.get_legend() for ax in fig.axes] + list(fig.legends)
    return {t.get_text() for lg in legends if lg is not None for t in lg.get_texts()}


def titles(fig: Figure) -> list[str]:
    out = [ax.get_title(loc) for ax in fig.axes for loc in ("left", "center", "right")]
    if fig._suptitle is not None:  # no public getter in matplotlib 3.7
        out.append(fig._suptitle.get_text())
    return [t for t in out if t.strip()]


def _xy(line: Line2D) -> np.ndarray:
    return np.column_stack([np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)])


def hidden_pairs(ax: Axes) -> list[tuple[str, str]]:
    """Pairs of series of ``ax`` of which one is completely hidden by the other: every point of
    the first lies on a point of the second, drawn with the same marker and line style."""
    out = []
    for a, b in combinations(series(ax), 2):
        pa, pb = _xy(a), _xy(b)
        same = np.isclose(pa[:, None, :], pb[None, :, :], rtol=1e-9, atol=0).all(axis=2)  # [i, j]: a_i == b_j
        covered, covers = bool(same.any(axis=1).all()), bool(same.any(axis=0).all())
        same_look = (a.get_marker(), a.get_linestyle()) == (b.get_marker(), b.get_linestyle())
        if (covered or covers) and (same_look or (covered and covers)):
            out.append((a.get_label(), b.get_label()))
    return out


def problems(fig: Figure) -> list[str]:
    """Everything wrong with ``fig`` as a reader would see it; ``[]`` when it passes."""
    found = []
    if not titles(fig):
        found.append("no title")
    plotted = [ax for ax in fig.axes if series(ax)]
    if not plotted:
        found.append("no series at all")
    labels = legend_labels(fig)
    for ax in plotted:
        siblings = ax.get_shared_x_axes().get_siblings(ax)
        if not any(UNIT.search(s.get_xlabel()) for s in siblings):
            found.append(f"x axis without a label with units: {ax.get_xlabel()!r}")
        if not UNIT.search(ax.get_ylabel()):
            found.append(f"y axis without a label with units: {ax.get_ylabel()!r}")
        for ln in series(ax):
            if ln.get_label() not in labels:
                found.append(f"series {ln.get_label()!r} has no legend entry")
            if not np.isfinite(_xy(ln)).all(axis=1).any():
                found.append(f"series {ln.get_label()!r} has no finite point")
        found += [f"series {a!r} and {b!r}: one hides the other" for a, b in hidden_pairs(ax)]
        looks = [(ln.get_color(), ln.get_marker(), ln.get_linestyle()) for ln in series(ax)]
        if len(set(looks)) < len(looks):
            found.append("two series drawn alike (colour, marker and line style)")
    return found


def tick_texts(fig: Figure) -> list[str]:
    """Every tick label as drawn (the figure must have been drawn: savefig does that)."""
    return [t.get_text() for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
            for t in axis.get_ticklabels(which="both") if t.get_text()]
