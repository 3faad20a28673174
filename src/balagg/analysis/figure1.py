"""Figure 1: per benchmark, peak (solid) and last-step (dashed outline) Acc@8 of each aggregator.

    python analysis/figure1.py --campaign-dir results/X --out results/X/analysis

Each bar is averaged over the campaign's training settings (model x dataset); peak and last step are
taken per setting from the seed-mean curve of that benchmark (as in Table 1). A bar averaged over fewer
settings than the campaign has carries a ``*`` and the caption names what is missing; a bar with no
value is marked ``n/a``, and a bar of height 0 (no sample solved any problem: the tiny world's models on
LiveCodeBench) is marked ``0``, its benchmark named in the caption when every bar of it is 0 from every
setting. Writes ``figure1.png`` and ``figure1.pdf``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from balagg.analysis import peak_and_last
from balagg.analysis.results import CampaignResults
from balagg.analysis.plotting import aggregator_colors
from balagg.analysis.seed_means import ACC, last_column, peak_column

PEAK, LAST = peak_column(ACC), last_column(ACC)


def figure_data(campaign: CampaignResults) -> pd.DataFrame:
    """Per (benchmark, aggregator): mean over settings of peak and last-step Acc@8, how many of the
    campaign's settings each mean covers (``n_peak``, ``n_last`` of ``n_settings``), and the largest
    step-0 Acc@8 over settings (``step0``; NaN where no setting evaluated step 0)."""
    per_setting = peak_and_last(campaign, campaign.benchmarks)
    n_settings = len(campaign.settings())
    rows = []
    for benchmark in campaign.benchmarks:
        for aggregator in campaign.aggregators:
            mine = per_setting[(per_setting.benchmark == benchmark) & (per_setting.aggregator == aggregator)]
            lacking = {kind: ", ".join(f"{m}/{d}" for m, d in zip(gaps.model, gaps.dataset))
                       for kind, gaps in (("peak", mine[mine[PEAK].isna()]), ("last", mine[mine[LAST].isna()]))}
            rows.append({"benchmark": benchmark, "aggregator": aggregator,
                         "peak": mine[PEAK].mean(), "last": mine[LAST].mean(),
                         "n_peak": int(mine[PEAK].count()), "n_last": int(mine[LAST].count()),
                         "n_settings": n_settings, "step0": mine[f"step0_{ACC}"].max(),
                         "lacking_peak": lacking["peak"], "lacking_last": lacking["last"]})
    return pd.DataFrame(rows)


def caption(campaign: CampaignResults, incomplete: bool) -> str:
    settings = ", ".join(f"{m} on {d}" for m, d in campaign.settings())
    text = (f"Peak (solid) and last-step (dashed outline) Acc@8 per benchmark, averaged over "
            f"{len(campaign.settings())} training setting(s): {settings}.")
    if incomplete:
        text += " *: averaged over fewer settings (a run failed or is missing); n/a: no value."
    return text


def zero_lines(data: pd.DataFrame) -> list[str]:
    """One line per benchmark whose every bar, peak and last step, is 0 from every one of the campaign's
    settings (so drawn flat, not missing): Acc@8 0 at every step after step 0 for every aggregator and
    setting; the line says "at every step" only where step 0 is 0 too (or not evaluated)."""
    lines = []
    for benchmark, rows in data.groupby("benchmark", sort=False):
        complete = (rows.n_peak == rows.n_settings) & (rows.n_last == rows.n_settings)
        if not (complete & (rows.peak == 0) & (rows["last"] == 0)).all():
            continue
        steps, solved = (("every step after step 0", "no sample of a trained checkpoint solved a problem")
                         if (rows.step0 > 0).any() else ("every step", "no sample solved a problem"))
        lines.append(f"{benchmark}: Acc@8 0 at {steps} for every aggregator and setting ({solved}); "
                     "its bars are flat at 0")
    return lines


def gap_lines(data: pd.DataFrame) -> list[str]:
    """One line per (aggregator, peak/last, lacking settings): which bars miss which settings."""
    lines = []
    for kind, label in (("peak", "peak"), ("last", "last-step")):
        column = f"lacking_{kind}"
        for (aggregator, lacking), rows in data[data[column] != ""].groupby(["aggregator", column], sort=False):
            where = "all benchmarks" if len(rows) == data.benchmark.nunique() else ", ".join(rows.benchmark)
            lines.append(f"{aggregator} {label} ({where}): no value from {lacking}")
    return lines


def make_figure(campaign: CampaignResults) -> Figure:
    data = figure_data(campaign)
    aggregators, benchmarks = campaign.aggregators, campaign.benchmarks
    colors = aggregator_colors(aggregators)
    width = 0.8 / (2 * len(aggregators))
    x = np.arange(len(benchmarks))
    figure = Figure(figsize=(max(6.0, 1.6 * len(benchmarks)), 4.2), layout="constrained")
    ax = figure.add_subplot()
    incomplete = False
    for i, aggregator in enumerate(aggregators):
        mine = data[data.aggregator == aggregator].set_index("benchmark").loc[list(benchmarks)]
        peak_x = x - 0.4 + width * (2 * i + 0.5)
        last_x = peak_x + width
        ax.bar(peak_x, mine["peak"], width, color=colors[aggregator], label=f"{aggregator} peak")
        ax.bar(last_x, mine["last"], width, fill=False, edgecolor=colors[aggregator], linestyle="--",
               linewidth=1.2, label=f"{aggregator} last step")
        for xs, column, count in ((peak_x, "peak", "n_peak"), (last_x, "last", "n_last")):
            for xi, value, n, total in zip(xs, mine[column], mine[count], mine["n_settings"]):
                if np.isnan(value):
                    ax.text(xi, 0, "n/a", rotation=90, ha="center", va="bottom", fontsize=7, gid="gap")
                    incomplete = True
                elif n < total:
                    ax.text(xi, value, "*", ha="center", va="bottom", fontsize=9, gid="gap")
                    incomplete = True
                elif value == 0:
                    ax.text(xi, 0, "0", ha="center", va="bottom", fontsize=7, gid="zero")
    ax.set_xticks(x, list(benchmarks))
    ax.set_ylabel("Acc@8")
    ax.set_xlabel("benchmark")
    ax.set_title(f"Peak vs last-step Acc@8 ({campaign.name})")
    ax.legend(ncols=len(aggregators), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15))
    notes = "\n".join([caption(campaign, incomplete), *zero_lines(data), *gap_lines(data)])
    figure.text(0.01, -0.02, notes, fontsize=7, wrap=True, ha="left", va="top", gid="caption")
    return figure
