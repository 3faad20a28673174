"""Plot pieces the figure scripts share: one colour per aggregator, training curves with a stated smoothing.

Figures are built with matplotlib's object API on the Agg backend (no display needed); every script's
``make_figure`` returns the :class:`~matplotlib.figure.Figure` so tests can inspect its artists.
Lines carry a ``gid``: ``smoothed`` or ``raw`` for data, ``zero`` for the reference line at 0.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

from balagg.analysis.seed_means import smooth  # noqa: E402

__all__ = ["aggregator_colors", "aggregator_styles", "plot_training_lines", "smoothing_phrase", "mark_missing"]

_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f")


def aggregator_colors(aggregators: tuple[str, ...]) -> dict[str, str]:
    """A fixed colour per aggregator, by its position in the campaign's aggregator order."""
    return {name: _PALETTE[i % len(_PALETTE)] for i, name in enumerate(aggregators)}


_LINESTYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "x", "P", "*")


def aggregator_styles(aggregators: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """A distinct line style and marker per aggregator (by position), so lines that coincide stay
    distinguishable: a solid line under a dashed one shows through its gaps."""
    return {name: {"linestyle": _LINESTYLES[i % len(_LINESTYLES)], "marker": _MARKERS[i % len(_MARKERS)]}
            for i, name in enumerate(aggregators)}


def smoothing_phrase(window: int) -> str:
    """How the lines were smoothed, for a caption."""
    if window <= 1:
        return "unsmoothed means over seeds"
    return (f"centred moving average over {window} logged steps of the mean over seeds "
            "(raw means faint behind)")


def plot_training_lines(ax: Axes, curves: pd.DataFrame, aggregators: tuple[str, ...], colors: dict[str, str],
                        window: int) -> list[str]:
    """Draw one line per aggregator of ``curves`` (columns ``aggregator, step, mean``), smoothed over
    ``window`` points with the raw line faint behind when ``window`` > 1. Returns the aggregators
    that have no data in ``curves``."""
    missing, styles = [], aggregator_styles(aggregators)
    for aggregator in aggregators:
        frame = curves[curves.aggregator == aggregator].sort_values("step")
        if frame.empty:
            missing.append(aggregator)
            continue
        if window > 1:
            ax.plot(frame.step, frame["mean"], color=colors[aggregator], alpha=0.25, linewidth=0.8,
                    label=f"_{aggregator} raw", gid="raw")
        ax.plot(frame.step, smooth(frame["mean"], window), color=colors[aggregator], linewidth=1.6,
                linestyle=styles[aggregator]["linestyle"], marker=styles[aggregator]["marker"],
                markevery=max(1, len(frame) // 8), markersize=4, label=aggregator, gid="smoothed")
    return missing


def mark_missing(ax: Axes, missing: list[str]) -> None:
    """Say inside the panel which aggregators have no data (an explicit gap, not an absent line)."""
    if missing:
        ax.text(0.02, 0.02, "no data: " + ", ".join(missing), transform=ax.transAxes, fontsize=8,
                color="black", ha="left", va="bottom", gid="missing",
                bbox={"boxstyle": "round", "facecolor": "#fff3cd", "edgecolor": "#c09853"})
