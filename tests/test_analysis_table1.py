"""Table 1 on a hand-made campaign with known values: numbers, steps, bold marks, gaps, paper columns."""

from __future__ import annotations

import math
import subprocess
import sys

import pandas as pd
import pytest

from balagg.analysis import load_campaign

from analysis_fixtures import REPO, load_script, train_metrics, write_cell

table1 = load_script("table1")

AGGREGATORS = ("seq-agg", "token-agg", "balanced-agg")
STEPS = (0, 10, 20, 30)
# (dataset "dapo", model "qwen-a"): per aggregator and seed, the six-benchmark mean (acc@8, best@8) per step.
DAPO = {
    "seq-agg": {0: ([.20, .30, .34, .32], [.30, .40, .45, .47]),
                1: ([.20, .32, .38, .30], [.30, .42, .45, .45])},
    "token-agg": {0: ([.20, .36, .33, .28], [.30, .49, .43, .40]),
                  1: ([.20, .34, .33, .28], [.30, .47, .43, .40])},
    "balanced-agg": {0: ([.20, .33, .37, .36], [.30, .43, .48, .47]),
                     1: ([.20, .35, .39, .34], [.30, .43, .46, .47])},
}
# Seed means: seq acc [.20 .31 .36 .31] best [.30 .41 .45 .46]; token acc [.20 .35 .33 .28] best [.30 .48 .43 .40];
# balanced acc [.20 .34 .38 .35] best [.30 .43 .47 .47] (tie: the first step, 20, is the peak's step).


def polaris_means(aggregator: str, seed: int) -> dict[int, tuple[float, float]]:
    rank = AGGREGATORS.index(aggregator)
    return {s: (0.1 + 0.001 * s + 0.01 * rank + 0.001 * seed, 0.2 + 0.001 * s + 0.01 * rank) for s in STEPS}


def make_campaign(root, skip=()):
    """The grid qwen-a x {dapo, polaris} x 3 aggregators x seeds {0, 1}; ``skip``: cells left out."""
    for aggregator in AGGREGATORS:
        for seed in (0, 1):
            for dataset in ("dapo", "polaris"):
                if (dataset, aggregator, seed) in skip:
                    continue
                if dataset == "dapo":
                    acc, best = DAPO[aggregator][seed]
                    means = {s: (a, b) for s, a, b in zip(STEPS, acc, best)}
                else:
                    means = polaris_means(aggregator, seed)
                write_cell(root, "qwen-a", dataset, aggregator, seed, means,
                           train_metrics(range(1, 31), lambda s: 0.0, 0.5, 20.0),
                           layout="summary" if seed == 1 else "curve")
    return root


def row(table: pd.DataFrame, dataset: str, aggregator: str) -> pd.Series:
    return table[(table.dataset == dataset) & (table.aggregator == aggregator)].iloc[0]


def test_peak_and_last_values_and_steps_are_exact(tmp_path):
    campaign = load_campaign(make_campaign(tmp_path / "camp"))
    assert campaign.problems == []
    table = table1.build_table(campaign)
    assert list(table.dataset) == ["dapo"] * 3 + ["polaris"] * 3
    assert list(table.aggregator[:3]) == list(AGGREGATORS)
    expected = {  # aggregator: (peak acc, step, peak best, step, last acc, last best)
        "seq-agg": (.36, 20, .46, 30, .31, .46),
        "token-agg": (.35, 10, .48, 10, .28, .40),
        "balanced-agg": (.38, 20, .47, 20, .35, .47),
    }
    for aggregator, (pa, pa_step, pb, pb_step, la, lb) in expected.items():
        r = row(table, "dapo", aggregator)
        assert r["peak_acc@8"] == pytest.approx(pa) and r["peak_acc@8_step"] == pa_step
        assert r["peak_best@8"] == pytest.approx(pb) and r["peak_best@8_step"] == pb_step
        assert r["last_acc@8"] == pytest.approx(la) and r["last_best@8"] == pytest.approx(lb)
        assert r["last_step"] == 30 and r["n_seeds"] == 2 and r["note"] == ""
    seq = row(table, "dapo", "seq-agg")
    assert seq["peak_acc@8_std"] == pytest.approx(math.sqrt(2) * 0.02)  # seeds .34 and .38 at step 20


def test_bold_marks_the_best_of_each_column_per_setting(tmp_path):
    table = table1.build_table(load_campaign(make_campaign(tmp_path / "camp")))
    bold = table1.best_mask(table)
    dapo = table.dataset == "dapo"
    assert list(table.aggregator[dapo & bold["peak_acc@8"]]) == ["balanced-agg"]
    assert list(table.aggregator[dapo & bold["peak_best@8"]]) == ["token-agg"]
    assert list(table.aggregator[dapo & bold["last_best@8"]]) == ["balanced-agg"]
    assert list(table.aggregator[~dapo & bold["peak_acc@8"]]) == ["balanced-agg"]
    markdown = table1.to_markdown(table, "camp")
    token_line = next(line for line in markdown.splitlines() if "| token-agg |" in line and "0.48" in line)
    assert "**0.4800 ± 0.0141**" in token_line and token_line.count("**") == 2
    latex = table1.to_latex(table, "camp")
    assert r"\textbf{0.4800 $\pm$ 0.0141}" in latex and latex.count(r"\textbf") == bold.to_numpy().sum()
