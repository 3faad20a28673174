"""Figure 3: response-length coefficient of variation and positive-negative length gap over training.

    python analysis/figure3.py --campaign-dir results/X --out results/X/analysis

One column per training setting (dataset, and model when the campaign has several), top row the
length CV (``len_cv`` of ``train/metrics.jsonl``, std / mean of response lengths in the batch), bottom
row the gap ``len_gap`` = mean length of negative minus positive responses in mixed groups (tokens);
one line per aggregator, the mean over seeds (``--smoothing`` > 1 smooths, raw faint behind).
Writes ``figure3.png`` and ``figure3.pdf``.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from balagg.analysis import train_curves
from balagg.analysis.results import CampaignResults
from balagg import settings
from balagg.analysis.plotting import aggregator_colors, mark_missing, plot_training_lines, smoothing_phrase

ROWS = {"len_cv": "response-length CV", "len_gap": "neg − pos length gap (tokens)"}


def caption(smoothing: int, cv_metric: str) -> str:
    return (f"Response-length statistics over training ({cv_metric}: std/mean of lengths; len_gap: mean "
            f"negative minus mean positive length in mixed groups); lines: {smoothing_phrase(smoothing)}.")


def make_figure(campaign: CampaignResults, smoothing: int = settings.ANALYSIS.smoothing,
                cv_metric: str = "len_cv") -> Figure:
    rows = {cv_metric: ROWS.get(cv_metric, cv_metric), "len_gap": ROWS["len_gap"]}
    columns = [(m, d) for d in campaign.datasets for m in campaign.models]  # one per model and dataset
    colors = aggregator_colors(campaign.aggregators)
    figure = Figure(figsize=(3.8 * len(columns), 6.0), layout="constrained")
    axes = figure.subplots(len(rows), len(columns), squeeze=False, sharex="col")
    for r, (metric, label) in enumerate(rows.items()):
        curves = train_curves(campaign, metric)
        for c, (model, dataset) in enumerate(columns):
            ax = axes[r][c]
            mine = curves[(curves.model == model) & (curves.dataset == dataset)]
            mark_missing(ax, plot_training_lines(ax, mine, campaign.aggregators, colors, smoothing))
            ax.set_title(dataset if len(campaign.models) == 1 else f"{model} on {dataset}")
            ax.set_ylabel(label)
            if r == len(rows) - 1:
                ax.set_xlabel("training step")
            if r == 0 and c == 0:
                ax.legend(fontsize=8)
    figure.text(0.01, -0.02, caption(smoothing, cv_metric), fontsize=7, ha="left", va="top", gid="caption")
    return figure
