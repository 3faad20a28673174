"""Is each difference between two aggregators larger than its error? A paired test over problems and seeds.

For one training setting (model, dataset) and two aggregators a and b, the *units* are (seed, benchmark,
problem) triples evaluated for both: the same problem, scored with the same per-sample sampling seeds
(eval.seed), after training with the same seed index. Per unit d = x_a - x_b, where x is the problem's
Acc@8 (or Best@8) at the compared point:

- ``last``: the setting's final step;
- ``mean``: the mean over every trained checkpoint (steps > 0) evaluated for both (an area under the
  learning curve: it rewards learning faster as well as ending higher);
- ``step``: one earlier trained checkpoint evaluated for both (a row for each, before the final step),
  so that a difference that changes sign during training is seen as such.

The difference of the benchmark-mean values is the stratified mean of d (equal weight per benchmark),
its standard error the stratified SE (``balagg.analysis.uncertainty.stratified_mean_se``), z = diff / SE and
p = 2 (1 - Phi(|z|)) (a normal approximation: there are hundreds of units). ``mdd`` is the minimum
detectable difference at this SE: (z_0.975 + z_0.80) SE = 2.80 SE (a true difference of that size is
found at alpha 0.05 with 80% power). A difference is *beyond its error* when p < 0.05; otherwise the
verdict is "no difference beyond error" (which is not evidence of equality when ``mdd`` is large).

Units share their training run within a seed, so the test assumes that training noise is mostly
problem-specific; the per-seed differences (``diff_seed_sd``) show how much the whole run moves, and
with one seed the test says nothing about seed-to-seed variation at all.
"""

from __future__ import annotations

import itertools
import math

import pandas as pd

from balagg.analysis.results import CampaignResults
from balagg.analysis.seed_means import ACC
from balagg.analysis.uncertainty import load_problem_scores, stratified_mean_se

__all__ = ["COMPARISON_COLUMNS", "MDD_FACTOR", "paired_difference", "comparison_table", "pair_result", "to_markdown",
           "verdict"]

MDD_FACTOR = 1.959964 + 0.841621
"""z_{0.975} + z_{0.80}: a true difference of MDD_FACTOR * SE is detected at alpha 0.05 with 80% power."""
ALPHA = 0.05
POINTS = ("last", "mean", "step")
COMPARISON_COLUMNS = ("dataset", "model", "metric", "point", "step", "a", "b", "value_a", "value_b", "diff", "se",
                      "z", "p", "mdd", "n_units", "n_seeds", "diff_seed_sd", "beyond_error", "verdict")


def _normal_two_sided_p(z: float) -> float:
    return math.erfc(abs(z) / math.sqrt(2.0)) if math.isfinite(z) else math.nan


def verdict(a: str, b: str, diff: float, p: float) -> str:
    if not math.isfinite(p):
        return "not testable"
    if p >= ALPHA:
        return "no difference beyond error"
    return f"{a} > {b}" if diff > 0 else f"{a} < {b}"


def _unit_values(scores: pd.DataFrame, aggregator: str, metric: str, steps: list[int]) -> pd.Series:
    mine = scores[(scores.aggregator == aggregator) & scores.step.isin(steps)]
    return mine.groupby(["seed", "benchmark", "problem_id"])[metric].mean()


def paired_difference(scores: pd.DataFrame, a: str, b: str, metric: str, point: str,
                      step: int | None) -> dict:
    """The paired comparison of aggregators ``a`` and ``b`` on one setting's ``scores`` (module doc) at
    ``point``; ``step`` is the compared step of ``last`` (the final one) and ``step`` (a checkpoint)."""
    if point not in POINTS:
        raise ValueError(f"unknown comparison point {point!r}; use one of {POINTS}")
    if point != "mean":
        steps = [step] if step is not None else []
    else:
        steps_a = set(scores[(scores.aggregator == a) & (scores.step > 0)].step)
        steps_b = set(scores[(scores.aggregator == b) & (scores.step > 0)].step)
        steps = sorted(steps_a & steps_b)
    row = {"metric": metric, "point": point, "step": step if point != "mean" else None, "a": a, "b": b}
    x_a, x_b = _unit_values(scores, a, metric, steps), _unit_values(scores, b, metric, steps)
    if point == "mean":  # a unit counts only where every compared step is present for both rules
        count_a = scores[(scores.aggregator == a) & scores.step.isin(steps)].groupby(
            ["seed", "benchmark", "problem_id"]).step.nunique()
        count_b = scores[(scores.aggregator == b) & scores.step.isin(steps)].groupby(
            ["seed", "benchmark", "problem_id"]).step.nunique()
        x_a, x_b = x_a[count_a == len(steps)], x_b[count_b == len(steps)]
    joined = pd.concat({"a": x_a, "b": x_b}, axis=1).dropna()
    nan = math.nan
    if joined.empty:
        return {**row, "value_a": nan, "value_b": nan, "diff": nan, "se": nan, "z": nan, "p": nan, "mdd": nan,
                "n_units": 0, "n_seeds": 0, "diff_seed_sd": nan, "beyond_error": False,
                "verdict": "not testable"}
    benchmarks = joined.index.get_level_values("benchmark").to_series(index=joined.index)
    value_a, _ = stratified_mean_se(joined["a"], benchmarks)
    value_b, _ = stratified_mean_se(joined["b"], benchmarks)
    diff, se = stratified_mean_se(joined["a"] - joined["b"], benchmarks)
    z = diff / se if se and math.isfinite(se) and se > 0 else nan
    p = _normal_two_sided_p(z)
    per_seed = (joined["a"] - joined["b"]).groupby(level="seed").mean()
    return {**row, "value_a": value_a, "value_b": value_b, "diff": diff, "se": se, "z": z, "p": p,
            "mdd": MDD_FACTOR * se if math.isfinite(se) else nan, "n_units": len(joined),
            "n_seeds": int(per_seed.size), "diff_seed_sd": float(per_seed.std(ddof=1)) if per_seed.size > 1 else nan,
            "beyond_error": bool(math.isfinite(p) and p < ALPHA), "verdict": verdict(a, b, diff, p)}


def _final_step(campaign: CampaignResults, model: str, dataset: str) -> int | None:
    steps = [c.final_step for k, c in campaign.cells.items()
             if (k.model, k.dataset) == (model, dataset) and not c.failed and c.final_step is not None]
    return max(steps) if steps else None


def comparison_table(campaign: CampaignResults, scores: pd.DataFrame | None = None,
                     metrics: tuple[str, ...] = (ACC,)) -> pd.DataFrame:
    """Every pair of the campaign's aggregators in every setting: at the last step, over the mean, and at
    each earlier trained checkpoint that both rules have (:data:`POINTS`)."""
    scores = load_problem_scores(campaign) if scores is None else scores
    rows = []
    for model, dataset in campaign.settings():
        setting = scores[(scores.model == model) & (scores.dataset == dataset)]
        final = _final_step(campaign, model, dataset)
        for a, b in itertools.combinations(campaign.aggregators, 2):
            shared = set(setting[setting.aggregator == a].step) & set(setting[setting.aggregator == b].step)
            earlier = sorted(s for s in shared if 0 < s and (final is None or s < final))
            points = [("last", final), ("mean", None)] + [("step", s) for s in earlier]
            for metric in metrics:
                for point, step in points:
                    result = paired_difference(setting, a, b, metric, point, step)
                    rows.append({"dataset": dataset, "model": model, **result})
    frame = pd.DataFrame(rows, columns=list(COMPARISON_COLUMNS))
    frame["step"] = frame["step"].astype("Int64")
    return frame


def pair_result(table: pd.DataFrame, model: str, dataset: str, a: str, b: str, point: str = "last",
                metric: str = ACC) -> dict:
    """The row of ``table`` (:func:`comparison_table`) for ``a`` versus ``b``, oriented as a - b:
    ``diff, se, p, mdd, beyond_error, verdict`` (NaN / "not testable" when the pair is absent)."""
    rows = table[(table.model == model) & (table.dataset == dataset) & (table.point == point)
                 & (table.metric == metric)]
    for first, second, sign in ((a, b, 1.0), (b, a, -1.0)):
        match = rows[(rows.a == first) & (rows.b == second)]
        if len(match):
            r = match.iloc[0]
            diff = sign * float(r["diff"])
            return {"diff": diff, "se": float(r.se), "p": float(r.p), "mdd": float(r.mdd),
                    "beyond_error": bool(r.beyond_error), "verdict": verdict(a, b, diff, float(r.p))}
    nan = math.nan
    return {"diff": nan, "se": nan, "p": nan, "mdd": nan, "beyond_error": False, "verdict": "not testable"}


def _number(value: float, digits: int = 4, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def to_markdown(table: pd.DataFrame, campaign_name: str) -> str:
    lines = [f"# Aggregator comparison: {campaign_name}", "",
             "Paired test over (seed, benchmark, problem) units: the same problems and sampling seeds for both "
             "rules. diff = a − b in benchmark-mean Acc@8; SE stratified by benchmark; p two-sided (normal); "
             "MDD = 2.80 SE, the smallest true difference found at α = 0.05 with 80% power. "
             "`last`: final step; `mean`: mean over trained checkpoints; `step N`: an earlier checkpoint. "
             "Seed sd: spread of the per-seed "
             "differences (training noise the test does not see).", "",
             "| Model | Dataset | Point | a | b | a | b | diff ± SE | p | MDD | units | seed sd | verdict |",
             "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in table.itertuples(index=False):
        point = {"last": f"last (step {r.step})", "step": f"step {r.step}"}.get(r.point, "mean")
        lines.append(f"| {r.model} | {r.dataset} | {point} | {r.a} | {r.b} | {_number(r.value_a)} | "
                     f"{_number(r.value_b)} | {_number(r.diff, signed=True)} ± {_number(r.se)} | "
                     f"{_number(r.p, 3)} | {_number(r.mdd)} | {r.n_units} | {_number(r.diff_seed_sd)} | "
                     f"{'**' + r.verdict + '**' if r.beyond_error else r.verdict} |")
    return "\n".join(lines) + "\n"
