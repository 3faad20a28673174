"""Seed means, peaks and last steps of a :class:`~balagg.analysis.results.CampaignResults`.

Over seeds, a group (model, dataset, aggregator) is summarised by its *seed-mean curve*: at each step
evaluated in every usable seed, the mean (and sample standard deviation) over seeds. Then

    peak  = max over those steps after step 0 (the untrained model, shared by every aggregator) of
            the seed-mean curve, with the first step reaching it; step 0 counts only when it is the
            only step evaluated; its value, if evaluated, is the ``step0_*`` column;
    last  = the seed-mean curve at the setting's final step (the last checkpoint step of any cell of
            the same model and dataset).

If that final step is not evaluated in every usable seed, ``last`` is NaN and the row's ``note`` says
why; a peak taken over fewer steps or seeds than the grid holds is also noted, and so are benchmark
problems whose gold answer the verifier cannot parse (scored incorrect, counted in summary.json). Nothing is averaged over
a smaller set than the row states.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from balagg.analysis.results import MEAN, METRICS, UNPARSABLE_GOLDS, CampaignResults
from balagg.benchmarks import benchmark_order

__all__ = ["peak_and_last", "peak_and_last_of_group", "train_curves", "smooth", "PEAK_AND_LAST_COLUMNS", "ACC", "BEST",
           "BEST_BOOTSTRAP"]

ACC, BEST, BEST_BOOTSTRAP = METRICS


def peak_column(metric: str) -> str:
    """``peak_acc@8``: the seed-mean curve's maximum after step 0 (``_std``: its seed spread, ``_step``: where)."""
    return f"peak_{metric}"


def last_column(metric: str) -> str:
    """``last_acc@8``: the seed-mean at the setting's final step."""
    return f"last_{metric}"


PEAK_AND_LAST_COLUMNS: tuple[str, ...] = (
    "dataset", "model", "aggregator", "benchmark", "n_seeds", "n_seeds_grid",
    *(peak_column(m) + suffix for m in METRICS for suffix in ("", "_std", "_step")),
    "last_step", *(last_column(m) + suffix for m in METRICS for suffix in ("", "_std")),
    *(f"step0_{m}" for m in METRICS), "note",
)


def _setting_final_step(campaign: CampaignResults, model: str, dataset: str) -> int | None:
    steps = [c.final_step for k, c in campaign.cells.items()
             if (k.model, k.dataset) == (model, dataset) and not c.failed and c.final_step is not None]
    return max(steps) if steps else None


def _std(values: pd.Series) -> float:
    return float(values.std(ddof=1)) if values.count() > 1 else math.nan


def peak_and_last_of_group(campaign: CampaignResults, model: str, dataset: str, aggregator: str, benchmark: str) -> dict:
    """One row of :func:`peak_and_last`: the peak and last-step values (module docstring) of one
    (model, dataset, aggregator) on one benchmark, with the notes that explain any gap."""
    keys = campaign.group_keys(model, dataset, aggregator)
    usable = [k for k in keys if k in campaign.cells and not campaign.cells[k].failed]
    row: dict = {"dataset": dataset, "model": model, "aggregator": aggregator, "benchmark": benchmark,
                 "n_seeds": len(usable), "n_seeds_grid": len(keys)}
    row.update({c: math.nan for c in PEAK_AND_LAST_COLUMNS if c not in row})
    notes = []
    lost = sorted(set(keys) - set(usable))
    if lost:
        notes.append("no results for " + ", ".join(f"seed{k.seed} ({'failed' if k in campaign.cells else 'missing'})"
                                                    for k in lost))
    if not usable:
        row["note"] = "; ".join(notes)
        return row

    evals = campaign.evals
    group = evals[(evals.model == model) & (evals.dataset == dataset) & (evals.aggregator == aggregator)
                  & evals.seed.isin([k.seed for k in usable])]
    mine = group[group.benchmark == benchmark]
    per_seed = {m: mine.pivot(index="step", columns="seed", values=m) for m in METRICS}
    complete = per_seed[ACC].dropna().index
    partial = sorted(set(per_seed[ACC].index) - set(complete))
    if partial:
        notes.append(f"steps {partial} not evaluated in every seed, left out")

    if complete.empty:
        notes.append("no step evaluated in every seed")
        row["note"] = "; ".join(notes)
        return row
    trained = [step for step in complete if step > 0] or list(complete)
    for metric in METRICS:  # skipna=False: best@8_bootstrap is NaN in summaries scored before it existed
        table = per_seed[metric].loc[trained]
        mean = table.mean(axis=1, skipna=False)
        if mean.isna().all():
            continue
        peak_step = int(mean.idxmax())
        row[peak_column(metric)] = float(mean.loc[peak_step])
        row[peak_column(metric) + "_std"] = _std(table.loc[peak_step])
        row[peak_column(metric) + "_step"] = peak_step
        if 0 in complete:
            row[f"step0_{metric}"] = float(per_seed[metric].loc[0].mean(skipna=False))

    final = _setting_final_step(campaign, model, dataset)
    row["last_step"] = final
    if final in complete:
        for metric in METRICS:
            row[last_column(metric)] = float(per_seed[metric].loc[final].mean(skipna=False))
            row[last_column(metric) + "_std"] = _std(per_seed[metric].loc[final])
    else:
        notes.append(f"last step {final} not evaluated in every seed (last complete step {max(complete)}): "
                     "last-step values left blank")
    unparsable = _unparsable_golds(group, benchmark)
    if unparsable:
        notes.append("problems with an unparsable gold answer, scored incorrect: " + ", ".join(
            f"{name} {count}" for name, count in unparsable.items()) + " (ids in summary.json)")
    unfinished = [k for k in usable if not campaign.cells[k].has_manifest]
    if unfinished:
        notes.append("no manifest.json (training may be unfinished) for "
                     + ", ".join(f"seed{k.seed}" for k in unfinished))
    row["note"] = "; ".join(notes)
    return row


def _unparsable_golds(evals: pd.DataFrame, benchmark: str) -> dict[str, int]:
    """{benchmark: problems with an unparsable gold} over ``evals`` (every benchmark for :data:`MEAN`),
    in the paper's order; benchmarks without any are left out."""
    rows = evals[(evals.benchmark != MEAN) & ((benchmark == MEAN) | (evals.benchmark == benchmark))]
    counts = rows.groupby("benchmark")[UNPARSABLE_GOLDS].max().dropna()
    return {name: int(counts[name]) for name in benchmark_order(counts.index) if counts[name] > 0}


def peak_and_last(campaign: CampaignResults, benchmarks: tuple[str, ...] = (MEAN,)) -> pd.DataFrame:
    """One row per (dataset, model, aggregator, benchmark) of the grid, columns :data:`PEAK_AND_LAST_COLUMNS`.

    Rows are ordered dataset, model, aggregator (display order). Groups with no usable seed have NaN
    values and a ``note`` saying which seeds failed or are missing.
    """
    rows = [peak_and_last_of_group(campaign, model, dataset, aggregator, benchmark)
            for dataset in campaign.datasets for model in campaign.models for aggregator in campaign.aggregators
            for benchmark in benchmarks if campaign.group_keys(model, dataset, aggregator)]
    frame = pd.DataFrame(rows, columns=list(PEAK_AND_LAST_COLUMNS))
    for column in (*(peak_column(m) + "_step" for m in METRICS), "last_step"):
        frame[column] = frame[column].astype("Int64")
    return frame


def train_curves(campaign: CampaignResults, metric: str, models: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Seed mean of a ``metrics.jsonl`` metric per (model, dataset, aggregator, step).

    Columns ``model, dataset, aggregator, step, mean, std, n_seeds``. A step is kept only where every
    seed of the group that logged ``metric`` logged it at that step. Raises ``ValueError`` when no cell
    logged ``metric``.
    """
    train = campaign.train
    if metric not in train.columns or train[metric].notna().sum() == 0:
        raise ValueError(f"metric {metric!r} is in no train/metrics.jsonl of {campaign.root}")
    if models is not None:
        train = train[train.model.isin(models)]
    columns = ["model", "dataset", "aggregator", "step", "mean", "std", "n_seeds"]
    parts = []
    for (model, dataset, aggregator), frame in train.groupby(["model", "dataset", "aggregator"], sort=False):
        table = frame.pivot(index="step", columns="seed", values=metric).dropna(axis=1, how="all").dropna()
        if table.empty:
            continue
        parts.append(pd.DataFrame({"model": model, "dataset": dataset, "aggregator": aggregator,
                                   "step": table.index.astype(int), "mean": table.mean(axis=1).to_numpy(),
                                   "std": table.std(axis=1, ddof=1).to_numpy(), "n_seeds": table.shape[1]}))
    return pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)


def smooth(values: np.ndarray | pd.Series, window: int) -> np.ndarray:
    """Centred moving average over ``window`` consecutive logged points (shrinking at the ends).

    ``window`` 1 returns the values unchanged.
    """
    if window < 1:
        raise ValueError(f"smoothing window must be >= 1, got {window}")
    series = pd.Series(np.asarray(values, dtype=float))
    return series.rolling(window, center=True, min_periods=1).mean().to_numpy()
