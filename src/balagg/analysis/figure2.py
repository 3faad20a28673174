"""Figure 2: policy-gradient loss over training steps, one line per aggregator, one panel per dataset.

    python analysis/figure2.py --campaign-dir results/X --out results/X/analysis --model Qwen2.5-Math-7B

For one model (``--model``; default the first of the campaign), as the paper's Figure 2 shows one, the
mean over seeds of ``pg_loss`` from ``train/metrics.jsonl``, lightly smoothed (``--smoothing`` logged
steps, centred moving average; stated in the caption) with the raw mean faint behind. In a campaign of
several models the title and the caption say which one is shown and name the others. Writes
``figure2.png`` and ``figure2.pdf``.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from balagg.analysis import train_curves
from balagg.analysis.results import CampaignResults
from balagg import settings
from balagg.analysis.plotting import aggregator_colors, mark_missing, plot_training_lines, smoothing_phrase

METRIC = "pg_loss"


def chosen_model(campaign: CampaignResults, model: str | None) -> str:
    if model is None:
        return campaign.models[0]
    if model not in campaign.models:
        raise ValueError(f"model {model!r} is not in campaign {campaign.name} (models: {', '.join(campaign.models)})")
    return model


def caption(model: str, smoothing: int, models: tuple[str, ...] = ()) -> str:
    """The figure's caption; ``models``: the campaign's, named when the figure shows one of several."""
    others = [m for m in models if m != model]
    shown = (f" (one model of {len(models)}, as in the paper's Figure 2; analysis.figure2_model, or --model, "
             f"shows another: {', '.join(others)})") if others else ""
    return f"Policy-gradient loss of {model} over training steps{shown}; lines: {smoothing_phrase(smoothing)}."


def make_figure(campaign: CampaignResults, model: str | None = None, smoothing: int = settings.ANALYSIS.smoothing) -> Figure:
    model = chosen_model(campaign, model)
    curves = train_curves(campaign, METRIC, models=(model,))
    colors = aggregator_colors(campaign.aggregators)
    figure = Figure(figsize=(4.2 * len(campaign.datasets), 3.6), layout="constrained")
    axes = figure.subplots(1, len(campaign.datasets), squeeze=False)[0]
    for ax, dataset in zip(axes, campaign.datasets):
        ax.axhline(0.0, color="grey", linewidth=0.6, gid="zero")
        missing = plot_training_lines(ax, curves[curves.dataset == dataset], campaign.aggregators, colors, smoothing)
        mark_missing(ax, missing)
        ax.set_title(f"{model} on {dataset}")
        ax.set_xlabel("training step")
        ax.set_ylabel("policy-gradient loss")
        ax.legend(fontsize=8)
    if len(campaign.models) > 1:
        figure.suptitle(f"{model} only: 1 of the campaign's {len(campaign.models)} models", fontsize=9, gid="scope")
    figure.text(0.01, -0.02, caption(model, smoothing, campaign.models), fontsize=7, ha="left", va="top",
                gid="caption")
    return figure
