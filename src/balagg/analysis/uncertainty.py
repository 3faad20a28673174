"""Per-problem scores and the standard errors of Table 1's values.

Every evaluated checkpoint's ``scores.jsonl`` (docs/files.md) holds one line per problem with its
sample flags; a problem's Acc@8 is the mean of its flags and its Best@8 their maximum. A Table 1 value
is a mean over benchmarks of per-benchmark means over problems (of the seed mean per problem), so its
standard error over problems is the stratified

    SE = sqrt( sum_b  var_b(x) / n_b ) / B,        x_p = mean over seeds of problem p's metric,

with var_b the sample variance over the n_b problems of benchmark b and B benchmarks. It measures how
much the value would move with another draw of problems and samples; it does not contain the
seed-to-seed variation of training shared by all problems, which Table 1 shows separately as the
sample standard deviation over seeds where there are several. A peak's SE is taken at the peak step
(the choice of the maximum is not corrected for).

Step 0 (the untrained model) is scored once per model, under ``{model}/initial/``; its scores serve
every cell of the model.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from balagg.analysis.results import CampaignResults, Cell
from balagg.analysis.seed_means import ACC, BEST, last_column, peak_column
from balagg.io import read_jsonl_lines
from balagg.layout import INITIAL_RUN, SCORES_FILE, eval_step_relpath

__all__ = ["SCORE_COLUMNS", "load_problem_scores", "stratified_mean_se", "add_standard_errors", "value_se"]

SCORE_COLUMNS = ("model", "dataset", "aggregator", "seed", "step", "benchmark", "problem_id", ACC, BEST)


def read_scores(path: Path) -> list[dict]:
    rows = []
    for number, record in read_jsonl_lines(path):
        try:
            flags = [1.0 if f else 0.0 for f in record["correct"]]
            benchmark, problem_id = str(record["benchmark"]), str(record["problem_id"])
        except (KeyError, TypeError) as error:
            raise ValueError(f"{path}:{number}: not a scores.jsonl line ({error})") from None
        if not flags:
            raise ValueError(f"{path}:{number}: problem {problem_id} has no samples")
        rows.append({"benchmark": benchmark, "problem_id": problem_id,
                     ACC: sum(flags) / len(flags), BEST: max(flags)})
    return rows


def load_problem_scores(campaign: CampaignResults) -> pd.DataFrame:
    """One row per (cell, evaluated step, problem), columns :data:`SCORE_COLUMNS`, for the steps the
    campaign counts as complete (``campaign.evals``); step 0 comes from the model's ``initial/``
    folder when the cell has none. Steps without a scores file are left out (their SE is NaN: a marked
    gap); an unreadable scores file is a ``ValueError`` naming it."""
    complete = campaign.evals[["model", "dataset", "aggregator", "seed", "step"]].drop_duplicates()
    rows: list[dict] = []
    cache: dict[Path, list[dict]] = {}
    for model, dataset, aggregator, seed, step in complete.itertuples(index=False):
        key = Cell(model, dataset, aggregator, int(seed))
        scores_file = eval_step_relpath(int(step), SCORES_FILE)
        path = campaign.root / key.relpath / scores_file
        if not path.is_file() and int(step) == 0:
            path = campaign.root / model / INITIAL_RUN / scores_file
        if not path.is_file():
            continue
        if path not in cache:
            cache[path] = read_scores(path)
        coords = {"model": model, "dataset": dataset, "aggregator": aggregator, "seed": int(seed), "step": int(step)}
        rows.extend({**coords, **row} for row in cache[path])
    return pd.DataFrame(rows, columns=list(SCORE_COLUMNS))


def stratified_mean_se(values: pd.Series, benchmarks: pd.Series) -> tuple[float, float]:
    """(mean over benchmarks of the per-benchmark mean, its stratified SE; module doc). A benchmark
    with a single problem contributes no variance estimate, so the SE is NaN then."""
    means, variances = [], []
    for _, part in values.groupby(benchmarks.to_numpy(), sort=False):
        part = part.dropna()
        if part.empty:
            return math.nan, math.nan
        means.append(float(part.mean()))
        variances.append(float(part.var(ddof=1)) / len(part) if len(part) > 1 else math.nan)
    if not means:
        return math.nan, math.nan
    return float(np.mean(means)), math.sqrt(sum(variances)) / len(means)


def value_se(scores: pd.DataFrame, model: str, dataset: str, aggregator: str, step: int, metric: str,
             seeds: list[int] | None = None) -> float:
    """SE over problems of one group's value at ``step`` (problem values averaged over ``seeds``)."""
    mine = scores[(scores.model == model) & (scores.dataset == dataset) & (scores.aggregator == aggregator)
                  & (scores.step == step)]
    if seeds is not None:
        mine = mine[mine.seed.isin(seeds)]
    if mine.empty:
        return math.nan
    per_problem = mine.groupby(["benchmark", "problem_id"], sort=False)[metric].mean().reset_index()
    return stratified_mean_se(per_problem[metric], per_problem["benchmark"])[1]


def add_standard_errors(table: pd.DataFrame, campaign: CampaignResults, scores: pd.DataFrame | None = None) -> pd.DataFrame:
    """``table`` (rows of :func:`balagg.analysis.peak_and_last`) with ``<value>_se`` beside each of
    ``peak_acc@8, peak_best@8, last_acc@8, last_best@8``: the SE over problems at that value's step."""
    scores = load_problem_scores(campaign) if scores is None else scores
    table = table.copy()
    columns = [*((m, peak_column(m), f"{peak_column(m)}_step") for m in (ACC, BEST)),
               *((m, last_column(m), "last_step") for m in (ACC, BEST))]
    for metric, column, step_column in columns:
        values = []
        for _, row in table.iterrows():
            value, step = row[column], row[step_column]
            if pd.isna(value) or pd.isna(step):
                values.append(math.nan)
                continue
            usable = [k.seed for k in campaign.group_keys(row.model, row.dataset, row.aggregator)
                      if k in campaign.cells and not campaign.cells[k].failed]
            values.append(value_se(scores, row.model, row.dataset, row.aggregator, int(step), metric, usable))
        position = list(table.columns).index(column) + 1
        table.insert(position, f"{column}_se", values)
    return table

