"""Table 1 on a hand-made campaign with known values: numbers, steps, bold marks, gaps, paper columns."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pandas as pd
import pytest

from balagg.analysis import load_results, table1

from analysis_fixtures import (AGGREGATORS, BOOTSTRAP_GAP, DAPO, REPO, STEPS, make_campaign, train_metrics,
                               write_cell)


def row(table: pd.DataFrame, dataset: str, aggregator: str) -> pd.Series:
    return table[(table.dataset == dataset) & (table.aggregator == aggregator)].iloc[0]


def test_peak_and_last_values_and_steps_are_exact(tmp_path):
    results = load_results(make_campaign(tmp_path / "camp"))
    assert results.problems == []
    table = table1.build_table(results)
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
        # the fixture's bootstrap column is best@8 - BOOTSTRAP_GAP: same peak step, its own column
        assert r["peak_best@8_bootstrap"] == pytest.approx(pb - BOOTSTRAP_GAP)
        assert r["peak_best@8_bootstrap_step"] == pb_step
        assert r["last_best@8_bootstrap"] == pytest.approx(lb - BOOTSTRAP_GAP)
        assert r["last_step"] == 30 and r["n_seeds"] == 2 and r["note"] == ""
    seq = row(table, "dapo", "seq-agg")
    assert seq["peak_acc@8_std"] == pytest.approx(math.sqrt(2) * 0.02)  # seeds .34 and .38 at step 20


def test_bold_marks_the_best_of_each_column_per_setting(tmp_path):
    table = table1.build_table(load_results(make_campaign(tmp_path / "camp")))
    bold = table1.best_mask(table)
    dapo = table.dataset == "dapo"
    assert list(table.aggregator[dapo & bold["peak_acc@8"]]) == ["balanced-agg"]
    assert list(table.aggregator[dapo & bold["peak_best@8"]]) == ["token-agg"]
    assert list(table.aggregator[dapo & bold["last_best@8"]]) == ["balanced-agg"]
    assert list(table.aggregator[~dapo & bold["peak_acc@8"]]) == ["balanced-agg"]
    markdown = table1.to_markdown(table, "camp")
    token_line = next(line for line in markdown.splitlines() if "| token-agg |" in line and "0.48" in line)
    assert "**0.4800 ± 0.0141**" in token_line and "**0.4300 ± 0.0141**" in token_line  # best@8 and its bootstrap
    assert token_line.count("**") == 4
    latex = table1.to_latex(table, "camp")
    assert r"\textbf{0.4800 $\pm$ 0.0141}" in latex and latex.count(r"\textbf") == bold.to_numpy().sum()


def test_gaps_are_blank_and_explained_in_markdown_and_latex(tmp_path):
    root = make_campaign(tmp_path / "camp", skip={("polaris", "token-agg", 0), ("polaris", "token-agg", 1)})
    (root / "qwen-a/dapo/seq-agg/seed0/train/checkpoints/step-000040").mkdir(parents=True)  # never evaluated
    table = table1.build_table(load_results(root))
    markdown, latex = table1.to_markdown(table, "camp"), table1.to_latex(table, "camp")
    lines = markdown.splitlines()
    # step 40 exists in one dapo cell only: dapo's final step is 40, evaluated nowhere -> every dapo
    # aggregator's last-step values are blank (notes 1-3), peaks stay
    for number, aggregator in enumerate(AGGREGATORS, start=1):
        line = next(line for line in lines if f"| {aggregator} [{number}] |" in line)
        assert line.count("—") == 3 and line.endswith("| 2/2 |")  # last acc, best, best (bootstrap)
        assert f"{number}. qwen-a / dapo / {aggregator}: last step 40 not evaluated in every seed" in markdown
    token_line = next(line for line in lines if "| token-agg [4] |" in line)
    assert token_line.count("—") == 6 and token_line.endswith("| 0/2 |")
    assert "4. qwen-a / polaris / token-agg: no results for seed0 (missing), seed1 (missing)" in markdown
    assert r"seq-agg$^{1}$" in latex and r"token-agg$^{4}$ & -- & -- & -- & -- & -- & --" in latex
    bold = table1.best_mask(table)
    assert not bold.loc[table.dataset == "dapo", ["last_acc@8", "last_best@8"]].to_numpy().any()
    assert list(table.aggregator[(table.dataset == "dapo") & bold["peak_acc@8"]]) == ["balanced-agg"]
    polaris = table.dataset == "polaris"
    assert list(table.aggregator[polaris & bold["last_acc@8"]]) == ["balanced-agg"]


def test_benchmark_problems_with_an_unparsable_gold_are_named_in_the_notes(tmp_path):
    """A checkpoint's summary counts problems whose gold the verifier cannot parse (scored incorrect):
    Table 1 says so in a note, per benchmark, in the paper's order; values are not changed."""
    root = make_campaign(tmp_path / "camp")
    for seed in (0, 1):
        acc, best = DAPO["seq-agg"][seed]
        write_cell(root, "qwen-a", "dapo", "seq-agg", seed, dict(zip(STEPS, zip(acc, best))),
                   unparsable_golds={"minerva": 1, "math500": 3})
    table = table1.build_table(load_results(root))
    markdown = table1.to_markdown(table, "camp")
    assert ("1. qwen-a / dapo / seq-agg: problems with an unparsable gold answer, scored incorrect: math500 3, "
            "minerva 1 (ids in summary.json)") in markdown
    assert row(table, "dapo", "token-agg")["note"] == ""
    assert row(table, "dapo", "seq-agg")["peak_acc@8"] == pytest.approx(.36)


def test_paper_values_stand_beside_ours_with_the_difference(tmp_path):
    root = tmp_path / "paper"
    for aggregator in AGGREGATORS:
        acc, best = DAPO[aggregator][0]
        write_cell(root, "qwen2.5-math-7b", "dapo_17k", aggregator, 0,
                   {s: (a, b) for s, a, b in zip(STEPS, acc, best)}, train_metrics(range(1, 4), float, .5, 1.))
    paper = table1.load_paper_values(REPO / "analysis" / "paper_values.csv")
    table = table1.build_table(load_results(root), paper)
    balanced = row(table, "dapo_17k", "balanced-agg")
    assert balanced["paper_peak_acc@8"] == 0.3634 and balanced["paper_peak_acc@8_source"] == "paper"
    assert balanced["diff_peak_acc@8"] == pytest.approx(0.37 - 0.3634)
    assert balanced["diff_last_best@8"] == pytest.approx(0.47 - 0.4627)
    comparison = table1.compare_with_paper(table, paper)
    assert comparison.in_campaign.sum() == 12  # the paper's own rows; the digest rows are other settings
    digest = comparison[comparison.source == "digest-unconfirmed"]
    assert len(digest) == 9 and not digest.in_campaign.any()
    markdown = table1.to_markdown(table, "paper", comparison)
    assert "| DAPO-17k | Qwen2.5-Math-7B | balanced-agg | Peak Acc@8 | 0.3634 | paper | 0.3700 | +0.0066 |" in markdown
    assert ("| Polaris | Qwen3-1.7B | seq-agg | Last Acc@8 | 0.4614 | digest-unconfirmed | not in campaign | — |"
            in markdown)


def test_command_line_writes_the_three_files_and_strict_mode_refuses_gaps(tmp_path):
    root = make_campaign(tmp_path / "camp", skip={("dapo", "seq-agg", 1)})
    out = tmp_path / "out"
    script = str(REPO / "analysis" / "table1.py")
    done = subprocess.run([sys.executable, script, "--campaign-dir", str(root), "--out", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "[missing-cell] qwen-a/dapo/seq-agg/seed1: no cell folder" in done.stderr
    csv = pd.read_csv(out / "table1.csv")
    assert len(csv) == 6 and csv.loc[0, "n_seeds"] == 1 and "seed1 (missing)" in csv.loc[0, "note"]
    assert (out / "table1.md").read_text().startswith("# Table 1: camp")
    assert r"\begin{tabular}" in (out / "table1.tex").read_text()
    strict = subprocess.run([sys.executable, script, "--campaign-dir", str(root), "--out", str(tmp_path / "s"),
                             "--strict"], capture_output=True, text=True)
    assert strict.returncode == 2 and "error: 1 problem(s)" in strict.stderr
    assert not (tmp_path / "s" / "table1.csv").exists()


def test_summaries_scored_before_the_bootstrap_column_keep_their_other_values(tmp_path):
    root = tmp_path / "camp"
    for layout in ("curve", "summary"):
        write_cell(root, "qwen-a", layout, "seq-agg", 0, {0: (.2, .3), 10: (.3, .45), 20: (.35, .4)}, layout=layout,
                   bootstrap=False)
    results = load_results(root)
    assert {p.kind for p in results.problems} == {"no-train-metrics"}  # no step is left out
    table = table1.build_table(results)
    assert list(table["last_best@8"]) == pytest.approx([.4, .4])
    assert table["peak_best@8_bootstrap"].isna().all() and table["last_best@8_bootstrap"].isna().all()
    markdown = table1.to_markdown(table, "camp")
    assert "Peak Best@8 (bootstrap)" in markdown and "Last Best@8 (bootstrap)" in markdown


def test_benchmark_rows_skipped_by_prepare_data_are_named_in_the_notes(tmp_path):
    """A benchmark file that lost a line (cut in half) changes that benchmark's denominator: Table 1's notes
    name it with its line; a training set's skipped rows do not belong there; the CSV's rows are unchanged."""
    from balagg.cli import main

    root = make_campaign(tmp_path / "camp")
    rows = [json.dumps({"problem": f"What is {i}+{i}?", "answer": str(2 * i)}) for i in range(4)]
    rows[2] = rows[2][:15]
    (tmp_path / "math500.jsonl").write_text("\n".join(rows) + "\n")
    (tmp_path / "polaris.jsonl").write_text("\n".join(rows) + "\n")
    reports = [root / "data" / "bench" / "math500.report.json", root / "data" / "train" / "polaris-53k.report.json"]
    for flag, name, source, report in (("--benchmark", "math500", "math500.jsonl", reports[0]),
                                       ("--dataset", "polaris-53k", "polaris.jsonl", reports[1])):
        assert main(["prepare-data", flag, name, "--source", str(tmp_path / source), "--on-bad-row", "skip",
                     "--out", str(report.with_name(f"{name}.jsonl")), "--report", str(report)]) == 0
    script = str(REPO / "analysis" / "table1.py")
    for out, extra in ((tmp_path / "plain", []), (tmp_path / "noted", ["--data-reports", *map(str, reports)])):
        done = subprocess.run([sys.executable, script, "--campaign-dir", str(root), "--out", str(out), *extra],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    markdown = (tmp_path / "noted" / "table1.md").read_text()
    notes = markdown.split("Benchmark files:", 1)[1].strip().splitlines()
    assert notes == [f"- math500: 1 of 4 rows of the benchmark file skipped (data.on_bad_row: skip), so every value "
                     f"on math500 is over its 3 remaining problems: math500-0002, line 3 of {tmp_path}/math500.jsonl: "
                     "not valid JSON (Unterminated string starting at column 13)"]
    assert "polaris.jsonl" not in markdown and "polaris-0002" not in markdown
    assert "line 3 of" in (tmp_path / "noted" / "table1.tex").read_text()
    assert (tmp_path / "noted" / "table1.csv").read_text() == (tmp_path / "plain" / "table1.csv").read_text()


def test_the_table_names_the_mean_by_the_campaigns_own_benchmarks(tmp_path):
    """A campaign of five benchmarks (the laboratory's: no code benchmark) reports five-benchmark means."""
    six = table1.build_table(load_results(make_campaign(tmp_path / "six")))
    assert "\nSix-benchmark means. Peak:" in table1.to_markdown(six, "six")
    steps = {0: (0.1, 0.2), 10: (0.3, 0.4)}
    write_cell(tmp_path / "five", "m", "d", "seq-agg", 0, steps, drop_benchmark=dict.fromkeys(steps, "livecodebench"))
    results = load_results(tmp_path / "five")
    assert len(results.benchmarks) == 5
    assert "\nFive-benchmark means. Peak:" in table1.to_markdown(table1.build_table(results), "five")
