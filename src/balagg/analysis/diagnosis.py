"""diagnosis.md: per (model, dataset), the measured length statistics, which of token and sequence
aggregation the paper's analysis predicts to do better, and which did.

    python analysis/diagnosis.py --campaign-dir results/X --out results/X/analysis \
        [--cv-threshold 0.5] [--gap-threshold 0.25]

The paper's analysis (Sec. on aggregation bias): token aggregation couples each side's weight to its
total length (sign-length coupling), so a large positive-negative length gap hurts it; sequence
aggregation gives every response equal weight, under-weighting the tokens of long responses, so high
length variation hurts it. The paper gives no numeric thresholds; the rule below and its thresholds are
ours:

    relative gap = |mean len_gap| / mean len_mean        (len_gap = negative minus positive length)
    relative gap >= gap threshold               -> seq-agg predicted better
    else length CV (len_cv) >= cv threshold     -> token-agg predicted better
    else                                        -> no prediction (neither bias is strong)

Measured values: per cell the mean over logged steps of ``train/metrics.jsonl``, then the mean over all
cells of the setting (every aggregator and seed). "Did better": the higher benchmark-mean Acc@8 of
Table 1, on peak and on last step; "mixed" when the two disagree. Whether the last-step difference
(token-agg - seq-agg) is larger than its error: the paired test over problems and seeds of
balagg.analysis.comparison. Writes ``diagnosis.md`` and ``diagnosis.csv``.
"""

from __future__ import annotations

import math

import pandas as pd

from balagg import settings
from balagg.analysis import MEAN, peak_and_last
from balagg.analysis.comparison import comparison_table, pair_result
from balagg.analysis.seed_means import ACC, last_column, peak_column
from balagg.analysis.results import CampaignResults
from balagg.benchmarks import mean_label

TOKEN, SEQ = "token-agg", "seq-agg"
LENGTH_METRICS = ("len_cv", "len_gap", "len_mean")


def length_stats(campaign: CampaignResults) -> pd.DataFrame:
    """Per (model, dataset, aggregator) and per (model, dataset) over all aggregators (``aggregator`` =
    ``all``): mean of each cell's step-mean of ``len_cv``, ``len_gap``, ``len_mean``; ``n_cells``;
    ``rel_gap`` = |len_gap| / len_mean."""
    train = campaign.train
    present = [m for m in LENGTH_METRICS if m in train.columns]
    per_cell = train.groupby(["model", "dataset", "aggregator", "seed"])[present].mean().reset_index()
    per_cell = per_cell.reindex(columns=["model", "dataset", "aggregator", "seed", *LENGTH_METRICS])
    rows = []
    for (model, dataset), frame in per_cell.groupby(["model", "dataset"]):
        for aggregator, group in [("all", frame), *frame.groupby("aggregator")]:
            values = {m: float(group[m].mean()) for m in LENGTH_METRICS}
            rows.append({"model": model, "dataset": dataset, "aggregator": aggregator, **values,
                         "n_cells": int(group[["len_cv", "len_gap"]].notna().all(axis=1).sum()),
                         "rel_gap": abs(values["len_gap"]) / values["len_mean"]
                         if values["len_mean"] and values["len_mean"] > 0 else math.nan})
    order = {name: i for i, name in enumerate(("all", *campaign.aggregators))}
    frame = pd.DataFrame(rows, columns=["model", "dataset", "aggregator", *LENGTH_METRICS, "n_cells", "rel_gap"])
    return frame.sort_values(["model", "dataset", "aggregator"], key=lambda c: c.map(order) if c.name == "aggregator"
                             else c, kind="stable").reset_index(drop=True)


def predict(cv: float, rel_gap: float, cv_threshold: float, gap_threshold: float) -> tuple[str, str]:
    """(prediction, reason): ``seq-agg``, ``token-agg``, ``none`` or ``unknown`` (statistics missing)."""
    if not math.isnan(rel_gap) and rel_gap >= gap_threshold:
        return SEQ, f"large pos-neg gap (relative gap {rel_gap:.2f} >= {gap_threshold})"
    if math.isnan(cv) or math.isnan(rel_gap):
        return "unknown", "length statistics missing"
    if cv >= cv_threshold:
        return TOKEN, f"high length variation (CV {cv:.2f} >= {cv_threshold}) with a small gap ({rel_gap:.2f})"
    return "none", f"CV {cv:.2f} < {cv_threshold} and relative gap {rel_gap:.2f} < {gap_threshold}"


def _winner(token: float, seq: float) -> str:
    if math.isnan(token) or math.isnan(seq):
        return "unknown"
    return TOKEN if token > seq else SEQ if seq > token else "tie"


def observed(table: pd.DataFrame, model: str, dataset: str) -> dict:
    """Which of token-agg and seq-agg had the higher peak and last-step Acc@8, and the verdict."""
    def value(aggregator: str, column: str) -> float:
        row = table[(table.model == model) & (table.dataset == dataset) & (table.aggregator == aggregator)]
        return float(row[column].iloc[0]) if len(row) else math.nan

    token_peak, seq_peak = value(TOKEN, peak_column(ACC)), value(SEQ, peak_column(ACC))
    token_last, seq_last = value(TOKEN, last_column(ACC)), value(SEQ, last_column(ACC))
    peak, last = _winner(token_peak, seq_peak), _winner(token_last, seq_last)
    outcome = peak if peak == last else "unknown" if "unknown" in (peak, last) else "mixed"
    return {"peak_winner": peak, "last_winner": last, "outcome": outcome,
            "token_peak": token_peak, "seq_peak": seq_peak, "token_last": token_last, "seq_last": seq_last}


def diagnose(campaign: CampaignResults, cv_threshold: float = settings.ANALYSIS.cv_threshold,
             gap_threshold: float = settings.ANALYSIS.gap_threshold) -> pd.DataFrame:
    """One row per (model, dataset): length statistics, prediction, outcome and whether they agree."""
    stats = length_stats(campaign)
    table = peak_and_last(campaign, (MEAN,))
    comparison = comparison_table(campaign)
    rows = []
    for model, dataset in campaign.settings():
        mine = stats[(stats.model == model) & (stats.dataset == dataset) & (stats.aggregator == "all")]
        cv, gap, rel = ((float(mine[c].iloc[0]) for c in ("len_cv", "len_gap", "rel_gap")) if len(mine)
                        else (math.nan,) * 3)
        prediction, reason = predict(cv, rel, cv_threshold, gap_threshold)
        result = observed(table, model, dataset)
        if prediction in (TOKEN, SEQ) and result["outcome"] in (TOKEN, SEQ):
            agrees = "yes" if prediction == result["outcome"] else "no"
        else:
            agrees = "n/a"
        tested = pair_result(comparison, model, dataset, TOKEN, SEQ, "last")
        rows.append({"model": model, "dataset": dataset, "len_cv": cv, "len_gap": gap, "rel_gap": rel,
                     "predicted": prediction, "reason": reason, **result, "agrees": agrees,
                     "last_diff": tested["diff"], "last_diff_se": tested["se"], "last_diff_p": tested["p"],
                     "beyond_error": tested["beyond_error"], "tested": tested["verdict"]})
    return pd.DataFrame(rows)


def _fmt(value: float, spec: str = ".4f") -> str:
    return "—" if value is None or math.isnan(value) else format(value, spec)


def to_markdown(diagnosis: pd.DataFrame, stats: pd.DataFrame, campaign: CampaignResults, cv_threshold: float,
                gap_threshold: float) -> str:
    lines = [f"# Length diagnosis: {campaign.name}", "",
             "Which of token and sequence aggregation the paper's analysis predicts to do better, from the "
             f"measured response lengths, and which did ({mean_label(campaign.benchmarks)} mean Acc@8, Table 1).", "",
             "Rule and thresholds (ours; the paper states the direction of each effect, not numbers): "
             f"relative pos-neg gap |len_gap| / len_mean >= {gap_threshold} -> seq-agg (token-agg's "
             f"sign-length coupling); otherwise length CV >= {cv_threshold} -> token-agg (seq-agg "
             "under-weights long responses); otherwise no prediction. Statistics: mean over logged steps "
             "per cell, then over all cells of the setting.", "",
             "| Model | Dataset | Length CV | Gap (tokens) | Relative gap | Predicted | Peak: better | "
             "Last: better | Did better | Agrees | Last: token − seq ± SE (p) | Beyond error |",
             "|---|---|---:|---:|---:|---|---|---|---|---|---:|---|"]
    for r in diagnosis.itertuples(index=False):
        lines.append(f"| {r.model} | {r.dataset} | {_fmt(r.len_cv, '.3f')} | {_fmt(r.len_gap, '.1f')} | "
                     f"{_fmt(r.rel_gap, '.3f')} | {r.predicted} | {r.peak_winner} | {r.last_winner} | "
                     f"{r.outcome} | {r.agrees} | {_fmt(r.last_diff, '+.4f')} ± {_fmt(r.last_diff_se)} "
                     f"({_fmt(r.last_diff_p, '.3f')}) | {'yes' if r.beyond_error else 'no'} |")
    lines += ["", "Reasons and numbers:", ""]
    for r in diagnosis.itertuples(index=False):
        lines.append(f"- {r.model} / {r.dataset}: predicted {r.predicted}: {r.reason}. Acc@8 peak token-agg "
                     f"{_fmt(r.token_peak)} vs seq-agg {_fmt(r.seq_peak)}; last token-agg {_fmt(r.token_last)} "
                     f"vs seq-agg {_fmt(r.seq_last)}; paired test at the last step: {r.tested}.")
    lines += ["", "## Per aggregator", "",
              "| Model | Dataset | Aggregator | Length CV | Gap (tokens) | Mean length | Relative gap | Cells |",
              "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in stats[stats.aggregator != "all"].itertuples(index=False):
        lines.append(f"| {r.model} | {r.dataset} | {r.aggregator} | {_fmt(r.len_cv, '.3f')} | "
                     f"{_fmt(r.len_gap, '.1f')} | {_fmt(r.len_mean, '.1f')} | {_fmt(r.rel_gap, '.3f')} | {r.n_cells} |")
    if campaign.problems:
        lines += ["", "## Gaps in the campaign", "", *(f"- {p}" for p in campaign.problems)]
    return "\n".join(lines) + "\n"
