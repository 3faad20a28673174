"""The mechanism behind the aggregation rules, over training: where each rule puts the update's weight.

From every cell's ``train/metrics.jsonl`` (the trainer logs ``balagg.aggregation.length_diagnostics``
of each rollout batch), for the cell's *own* rule r:

- ``neg_share`` = M-/(M+ + M-), with M+- = ``side_weight/r/pos|neg`` = sum over the side of
  w_i |A_i| |o_i|: the share of the update's weight on the negative side (1/2 for seq-agg and BA by
  construction; above 1/2 under token-agg when wrong answers are longer);
- ``mass_ratio`` = M-/M+ (``side_mass_ratio/r``);
- ``long_short`` = ``token_weight/r/pos_long`` / ``token_weight/r/pos_short``: the effective weight
  per token (w_i |A_i|) of correct responses longer than the batch's median correct length over that of
  the shorter ones (below 1 under seq-agg, which gives long responses less weight per token);

and, whatever rule the cell trains with, ``token_agg_ratio`` (token-agg's M-/M+ on the same batch:
whether the regime keeps the sign-length coupling it is built for) and the length statistics
(``len_pos_mean``, ``len_neg_mean``, ``len_cv_within_group``). Values are seed means per logged step.

:func:`make_figure` draws one row per model (a regime of the laboratory) and dataset: Acc@8 over
checkpoints, ``neg_share``, ``long_short``, beside one another.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from balagg.analysis.results import MEAN, CampaignResults
from balagg.analysis.plotting import aggregator_colors, aggregator_styles, mark_missing
from balagg.analysis.seed_means import ACC, smooth

__all__ = ["MECHANISM_METRICS", "mechanism_frame", "mechanism_curves", "mechanism_summary", "make_figure",
           "ENGAGED_ABOVE", "ENGAGED_BELOW"]

MECHANISM_METRICS = ("neg_share", "mass_ratio", "long_short", "token_agg_ratio", "len_pos_mean", "len_neg_mean",
                     "len_cv_within_group")
ENGAGED_ABOVE, ENGAGED_BELOW = 1.5, 1 / 1.5
"""token-agg's side-mass ratio counts as clearly away from 1 beyond these."""


def _column(train: pd.DataFrame, name: str) -> pd.Series:
    return train[name] if name in train.columns else pd.Series(math.nan, index=train.index)


def mechanism_frame(campaign: CampaignResults) -> pd.DataFrame:
    """One row per (cell, logged step): ``model, dataset, aggregator, seed, step`` and
    :data:`MECHANISM_METRICS` (module doc). Cells whose rule logged no side weights get NaN."""
    parts = []
    for rule, train in campaign.train.groupby("aggregator", sort=False):  # canonical names (CellConfig's)
        pos, neg = _column(train, f"side_weight/{rule}/pos"), _column(train, f"side_weight/{rule}/neg")
        total = pos + neg
        long_, short = _column(train, f"token_weight/{rule}/pos_long"), _column(train, f"token_weight/{rule}/pos_short")
        t_pos, t_neg = _column(train, "side_weight/token-agg/pos"), _column(train, "side_weight/token-agg/neg")
        frame = train[["model", "dataset", "aggregator", "seed", "step"]].copy()
        frame["neg_share"] = (neg / total).where(total > 0)
        frame["mass_ratio"] = (neg / pos).where(pos > 0)
        frame["long_short"] = (long_ / short).where(short > 0)
        frame["token_agg_ratio"] = (t_neg / t_pos).where(t_pos > 0)
        for name in ("len_pos_mean", "len_neg_mean", "len_cv_within_group"):
            frame[name] = _column(train, name)
        parts.append(frame)
    columns = ["model", "dataset", "aggregator", "seed", "step", *MECHANISM_METRICS]
    return pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)


def mechanism_curves(frame: pd.DataFrame) -> pd.DataFrame:
    """Seed means per (model, dataset, aggregator, step) of :data:`MECHANISM_METRICS`, with ``n_seeds``."""
    keys = ["model", "dataset", "aggregator", "step"]
    grouped = frame.groupby(keys, sort=False)
    means = grouped[list(MECHANISM_METRICS)].mean()
    means["n_seeds"] = grouped["seed"].nunique()
    return means.reset_index()


def mechanism_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (model, dataset, aggregator): token-agg's side-mass ratio at the start (first tenth of the
    logged steps) and the end (last tenth), its range, the share of logged steps with the ratio beyond
    1.5 or below 0.67, the cell rule's own ``neg_share`` and ``long_short`` (start / end), and the
    correct/wrong mean lengths at start and end. Seed means per step first."""
    curves = mechanism_curves(frame)
    rows = []
    for (model, dataset, aggregator), part in curves.groupby(["model", "dataset", "aggregator"], sort=False):
        part = part.sort_values("step")
        tenth = max(1, len(part) // 10)
        start, end = part.head(tenth), part.tail(tenth)
        ratio = part.token_agg_ratio.dropna()
        rows.append({
            "model": model, "dataset": dataset, "aggregator": aggregator, "n_steps": len(part),
            "n_seeds": int(part.n_seeds.max()),
            "token_agg_ratio_start": start.token_agg_ratio.mean(), "token_agg_ratio_end": end.token_agg_ratio.mean(),
            "token_agg_ratio_min": ratio.min() if len(ratio) else math.nan,
            "token_agg_ratio_max": ratio.max() if len(ratio) else math.nan,
            "share_above_1.5": float((ratio > ENGAGED_ABOVE).mean()) if len(ratio) else math.nan,
            "share_below_0.67": float((ratio < ENGAGED_BELOW).mean()) if len(ratio) else math.nan,
            "neg_share_start": start.neg_share.mean(), "neg_share_end": end.neg_share.mean(),
            "long_short_start": start.long_short.mean(), "long_short_end": end.long_short.mean(),
            "len_pos_start": start.len_pos_mean.mean(), "len_pos_end": end.len_pos_mean.mean(),
            "len_neg_start": start.len_neg_mean.mean(), "len_neg_end": end.len_neg_mean.mean(),
            "len_cv_within_start": start.len_cv_within_group.mean(),
            "len_cv_within_end": end.len_cv_within_group.mean(),
        })
    return pd.DataFrame(rows)


def _draw(ax, frame: pd.DataFrame, x: str, y: str, aggregators, colors, styles, window: int) -> list[str]:
    missing = []
    for aggregator in aggregators:
        part = frame[frame.aggregator == aggregator].sort_values(x)
        values = part[y].to_numpy(dtype=float)
        if part.empty or not np.isfinite(values).any():
            missing.append(aggregator)
            continue
        style = styles[aggregator]
        ax.plot(part[x], smooth(values, window) if window > 1 else values, color=colors[aggregator],
                linestyle=style["linestyle"], marker=style["marker"], markevery=max(1, len(part) // 8),
                markersize=4, linewidth=1.5, label=aggregator, gid="data")
    return missing


def make_figure(campaign: CampaignResults, smoothing: int = 5) -> Figure:
    """Rows: (model, dataset) settings; columns: Acc@8 (benchmark mean, seed mean over checkpoints),
    negative share of the update mass, long/short per-token weight of correct responses."""
    curves = mechanism_curves(mechanism_frame(campaign))
    settings = campaign.settings()
    colors, styles = aggregator_colors(campaign.aggregators), aggregator_styles(campaign.aggregators)
    figure = Figure(figsize=(12.0, 3.0 * len(settings)), layout="constrained")
    axes = figure.subplots(len(settings), 3, squeeze=False)
    evals = campaign.evals[campaign.evals.benchmark == MEAN]
    accuracy = evals.groupby(["model", "dataset", "aggregator", "step"], sort=False)[ACC].mean().reset_index()
    for row, (model, dataset) in zip(axes, settings):
        mine = curves[(curves.model == model) & (curves.dataset == dataset)]
        acc = accuracy[(accuracy.model == model) & (accuracy.dataset == dataset)]
        mark_missing(row[0], _draw(row[0], acc, "step", ACC, campaign.aggregators, colors, styles, 1))
        row[0].set_ylabel("mean Acc@8")
        row[0].set_title(f"{model} / {dataset}: accuracy", fontsize=9)
        row[1].axhline(0.5, color="grey", linewidth=0.6, gid="reference")
        for bound in (ENGAGED_ABOVE / (1 + ENGAGED_ABOVE), ENGAGED_BELOW / (1 + ENGAGED_BELOW)):
            row[1].axhline(bound, color="grey", linewidth=0.5, linestyle=":", gid="reference")
        mark_missing(row[1], _draw(row[1], mine, "step", "neg_share", campaign.aggregators, colors, styles, smoothing))
        row[1].set_ylabel("negative share of update mass")
        row[1].set_title(f"{model}: sum w|A||o| on wrong / total", fontsize=9)
        row[2].axhline(1.0, color="grey", linewidth=0.6, gid="reference")
        mark_missing(row[2], _draw(row[2], mine, "step", "long_short", campaign.aggregators, colors, styles,
                                   smoothing))
        row[2].set_ylabel("per-token weight, long / short correct")
        row[2].set_title(f"{model}: w|A| of long vs short correct", fontsize=9)
        for ax in row:
            ax.set_xlabel("training step")
            ax.legend(fontsize=7)
    figure.text(0.01, -0.01, "Mechanism per setting and aggregator. Middle: dotted lines at side-mass ratio 1.5 and "
                "0.67; right: 1 = equal weight per token. Training lines: "
                + (f"centred moving average over {smoothing} logged steps of the seed mean." if smoothing > 1
                   else "seed means, unsmoothed."),
                fontsize=7, ha="left", va="top", gid="caption")
    return figure
