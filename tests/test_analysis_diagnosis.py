"""diagnosis.md: measured length statistics, the prediction from our stated thresholds, the outcome."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from analysis_fixtures import REPO, make_campaign, train_metrics
from balagg.analysis import diagnosis, load_results


@pytest.mark.parametrize("cv, rel_gap, expected", [
    (0.9, 0.30, "seq-agg"),    # a large gap wins over high variation
    (0.9, 0.10, "token-agg"),
    (0.5, 0.249, "token-agg"),  # thresholds are inclusive
    (0.49, 0.10, "none"),
    (0.9, math.nan, "unknown"),
])
def test_prediction_rule(cv, rel_gap, expected):
    assert diagnosis.predict(cv, rel_gap, 0.5, 0.25)[0] == expected


def test_diagnosis_measures_predicts_and_compares_with_table1(tmp_path):
    # dapo: gap 100 / length 200, CV 0.3 -> seq-agg predicted; seq-agg beat token-agg (peak .36 vs .35,
    # last .31 vs .28). polaris: gap 10 / 200, CV 0.8 -> token-agg predicted; token-agg beat seq-agg.
    results = load_results(make_campaign(tmp_path / "camp"))
    result = diagnosis.diagnose(results, cv_threshold=0.5, gap_threshold=0.25).set_index("dataset")
    assert result.at["dapo", "len_cv"] == pytest.approx(0.3) and result.at["dapo", "rel_gap"] == pytest.approx(0.5)
    assert result.at["dapo", "predicted"] == "seq-agg" and result.at["dapo", "outcome"] == "seq-agg"
    assert result.at["dapo", "token_peak"] == pytest.approx(0.35)
    assert result.at["dapo", "seq_last"] == pytest.approx(0.31)
    assert result.at["polaris", "predicted"] == "token-agg" and result.at["polaris", "outcome"] == "token-agg"
    assert list(result.agrees) == ["yes", "yes"]
    strict = diagnosis.diagnose(results, cv_threshold=0.9, gap_threshold=0.6)
    assert list(strict.predicted) == ["none", "none"] and list(strict.agrees) == ["n/a", "n/a"]


def test_mixed_or_missing_outcomes_are_not_counted_as_agreement(tmp_path):
    root = make_campaign(tmp_path / "camp", skip={("polaris", "seq-agg", 0), ("polaris", "seq-agg", 1)})
    (root / "qwen-a/dapo/seq-agg/seed0/train/checkpoints/step-000040").mkdir(parents=True)
    result = diagnosis.diagnose(load_results(root)).set_index("dataset")
    assert result.at["dapo", "peak_winner"] == "seq-agg" and result.at["dapo", "last_winner"] == "unknown"
    assert result.at["dapo", "outcome"] == "unknown" and result.at["dapo", "agrees"] == "n/a"
    assert result.at["polaris", "outcome"] == "unknown"


def test_missing_length_metrics_give_unknown(tmp_path):
    no_lengths = lambda dataset, aggregator, seed: [{"step": s, "pg_loss": 0.0} for s in range(1, 5)]  # noqa: E731
    result = diagnosis.diagnose(load_results(make_campaign(tmp_path / "camp", metrics=no_lengths)))
    assert list(result.predicted) == ["unknown", "unknown"]


def test_command_line_writes_markdown_stating_thresholds_as_ours(tmp_path):
    root = make_campaign(tmp_path / "camp", metrics=lambda d, a, s: train_metrics(range(1, 5), float, 0.7, 30.0))
    done = subprocess.run([sys.executable, str(REPO / "analysis" / "diagnosis.py"), "--campaign-dir", str(root),
                           "--cv-threshold", "0.6", "--gap-threshold", "0.2"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = (root / "analysis" / "diagnosis.md").read_text()
    assert "thresholds (ours" in text and ">= 0.2 -> seq-agg" in text and ">= 0.6 -> token-agg" in text
    assert "| qwen-a | dapo | 0.700 | 30.0 | 0.150 | token-agg | seq-agg | seq-agg | seq-agg | no |" in text
    assert "| qwen-a | polaris | balanced-agg | 0.700 | 30.0 | 200.0 | 0.150 | 2 |" in text
    assert (root / "analysis" / "diagnosis.csv").exists()
