"""`python -m balagg curve`: per-checkpoint summaries into one table."""

from __future__ import annotations

import csv
import json

import pytest

from balagg.cli import main


def summary(step, math, code):
    return {"step": step, "n": 8, "benchmarks": {
        "math500": {"acc@8": math, "best@8": min(1.0, 2 * math), "n_problems": 4, "n_samples": 32, "truncation_rate": 0.0},
        "livecodebench": {"acc@8": code, "best@8": code, "n_problems": 2, "n_samples": 16, "truncation_rate": 0.5}},
        "mean": {"acc@8": (math + code) / 2, "best@8": (min(1.0, 2 * math) + code) / 2, "best@8_bootstrap": math}}


def test_curve_collects_steps_in_order_with_mean_rows(tmp_path):
    paths = []
    for step, math, code in [(10, 0.5, 0.25), (0, 0.125, 0.0)]:
        path = tmp_path / f"step-{step:06d}" / "summary.json"
        path.parent.mkdir()
        path.write_text(json.dumps(summary(step, math, code)))
        paths.append(str(path))
    out = tmp_path / "curve.csv"
    assert main(["curve", "--out", str(out), *paths]) == 0
    rows = list(csv.DictReader(out.open()))
    assert [(r["step"], r["benchmark"]) for r in rows] == [
        ("0", "livecodebench"), ("0", "math500"), ("0", "mean"),
        ("10", "livecodebench"), ("10", "math500"), ("10", "mean")]
    assert float(rows[5]["acc@8"]) == pytest.approx(0.375)
    assert float(rows[5]["best@8_bootstrap"]) == 0.5 and rows[4]["best@8_bootstrap"] == ""  # absent: empty
    assert rows[4]["truncation_rate"] == "0.0" and rows[3]["truncation_rate"] == "0.5"


def test_curve_refuses_duplicate_steps_and_non_summaries(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(summary(5, 0.5, 0.5)))
    b.write_text(json.dumps(summary(5, 0.5, 0.5)))
    assert main(["curve", "--out", str(tmp_path / "c.csv"), str(a), str(b)]) == 2
    assert "step 5 appears twice" in capsys.readouterr().err
    b.write_text(json.dumps({"step": 3}))
    assert main(["curve", "--out", str(tmp_path / "c.csv"), str(b)]) == 2
    assert "not an evaluation summary" in capsys.readouterr().err
    assert not (tmp_path / "c.csv").exists()
