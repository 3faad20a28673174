"""A campaign's results loaded: discovery, both eval layouts, and every kind of gap reported, never averaged over."""

from __future__ import annotations

import json

import pytest

from analysis_fixtures import train_metrics, write_cell
from balagg.analysis import Cell, load_results, peak_and_last

MEANS = {0: (0.1, 0.2), 10: (0.3, 0.4), 20: (0.5, 0.6)}
ROWS = train_metrics(range(1, 21), float, 0.5, 10.0)


def kinds(results) -> list[tuple[str, str, int | None]]:
    return [(p.kind, str(p.cell), p.step) for p in results.problems]


def test_curve_and_summary_layouts_load_the_same_numbers(tmp_path):
    write_cell(tmp_path / "a", "m", "d", "seq-agg", 0, MEANS, ROWS, layout="curve")
    write_cell(tmp_path / "b", "m", "d", "seq-agg", 0, MEANS, ROWS, layout="summary")
    curve, summary = load_results(tmp_path / "a"), load_results(tmp_path / "b")
    assert len(curve.evals) == 3 * 7  # 3 steps x (6 benchmarks + mean)
    assert curve.evals.equals(summary.evals)
    mean = curve.evals[curve.evals.benchmark == "mean"]
    assert list(mean.step) == [0, 10, 20] and list(mean["acc@8"]) == [0.1, 0.3, 0.5]
    assert curve.benchmarks == ("math500", "aime24", "aime25", "olympiadbench", "minerva", "livecodebench")


def test_discovery_ignores_non_cell_folders_and_orders_aggregators_like_the_rules(tmp_path):
    for aggregator in ("balanced-agg", "token-agg", "seq-agg"):
        write_cell(tmp_path, "m", "d", aggregator, 3, MEANS, train_metrics(range(1, 4), float, 0.5, 1.0))
    (tmp_path / "analysis" / "x" / "y" / "seed0").mkdir(parents=True)  # not a cell
    (tmp_path / "data" / "train").mkdir(parents=True)
    results = load_results(tmp_path)
    assert results.aggregators == ("seq-agg", "token-agg", "balanced-agg")
    assert results.seeds == (3,) and results.models == ("m",) and results.datasets == ("d",)
    assert results.problems == []
    assert set(results.train.columns) >= {"model", "dataset", "aggregator", "seed", "step", "pg_loss", "len_cv"}
    assert len(results.train) == 9


def test_missing_checkpoint_evaluation_is_reported(tmp_path):
    write_cell(tmp_path, "m", "d", "seq-agg", 0, MEANS, ROWS, checkpoints=(30,))
    results = load_results(tmp_path)
    assert ("missing-checkpoint", "m/d/seq-agg/seed0", 30) in kinds(results)
    assert "step 30" in results.problem_report() and "no evaluation summary" in results.problem_report()
    row = peak_and_last(results).iloc[0]
    assert row["last_step"] == 30 and row["last_acc@8"] != row["last_acc@8"]  # NaN: an explicit gap
    assert "last step 30 not evaluated" in row["note"]
    assert row["peak_acc@8"] == pytest.approx(0.5)  # the peak over what was evaluated is still given


def test_step_lacking_a_benchmark_is_left_out_and_reported(tmp_path):
    write_cell(tmp_path, "m", "d", "seq-agg", 0, MEANS, ROWS, drop_benchmark={20: "aime25"})
    results = load_results(tmp_path)
    assert ("incomplete-step", "m/d/seq-agg/seed0", 20) in kinds(results)
    assert "aime25" in results.problem_report()
    assert 20 not in set(results.evals.step)


def test_failed_and_missing_cells_are_reported_and_leave_marked_rows(tmp_path):
    write_cell(tmp_path, "m", "d", "seq-agg", 0, MEANS, ROWS)
    write_cell(tmp_path, "m", "d", "seq-agg", 1, MEANS, ROWS)
    write_cell(tmp_path, "m", "d", "token-agg", 0, MEANS, ROWS)
    failed = tmp_path / "m" / "d" / "token-agg" / "seed1"
    (failed / "train").mkdir(parents=True)  # started, crashed before any evaluation
    results = load_results(tmp_path)
    assert ("failed-cell", "m/d/token-agg/seed1", None) in kinds(results)
    assert "training unfinished" in results.problem_report()
    table = peak_and_last(results).set_index("aggregator")
    assert table.at["token-agg", "n_seeds"] == 1 and table.at["token-agg", "n_seeds_grid"] == 2
    assert "seed1 (failed)" in table.at["token-agg", "note"]
    assert table.at["seq-agg", "n_seeds"] == 2 and table.at["seq-agg", "note"] == ""

    # a whole aggregator missing in one dataset: the grid still has its row, blank and explained
    write_cell(tmp_path, "m", "e", "seq-agg", 0, MEANS, ROWS)
    results = load_results(tmp_path)
    assert ("missing-cell", "m/e/token-agg/seed0", None) in kinds(results)
    rows = peak_and_last(results)
    gap = rows[(rows.dataset == "e") & (rows.aggregator == "token-agg")].iloc[0]
    assert gap["n_seeds"] == 0 and gap["peak_acc@8"] != gap["peak_acc@8"]
    assert "seed0 (missing)" in gap["note"] and "seed1 (missing)" in gap["note"]


def test_seed_missing_a_step_keeps_that_step_out_of_the_seed_mean(tmp_path):
    write_cell(tmp_path, "m", "d", "seq-agg", 0, {0: (.1, .2), 10: (.9, .9), 20: (.3, .4)}, ROWS)
    write_cell(tmp_path, "m", "d", "seq-agg", 1, {0: (.1, .2), 20: (.5, .6)}, ROWS)
    row = peak_and_last(load_results(tmp_path)).iloc[0]
    # step 10 exists in seed 0 only; its 0.9 must not become the "peak over seeds"
    assert row["peak_acc@8"] == pytest.approx(0.4) and row["peak_acc@8_step"] == 20
    assert "steps [10] not evaluated in every seed" in row["note"]


def test_unreadable_lines_are_counted_and_skipped(tmp_path):
    cell = write_cell(tmp_path, "m", "d", "seq-agg", 0, MEANS, train_metrics(range(1, 3), float, 0.5, 1.0))
    with (cell / "train" / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 3, "pg_loss": 0.1\n')  # truncated by a crash
    (cell / "eval" / "step-000010" / "summary.json").write_text("{not json")  # shadowed by curve.csv: ignored
    results = load_results(tmp_path)
    assert len(results.train) == 2
    assert [p.kind for p in results.problems] == ["bad-file"]
    assert "skipped 1 unreadable line" in results.problems[0].message


def test_explicit_cells_define_the_grid(tmp_path):
    write_cell(tmp_path, "m", "d", "seq-agg", 0, MEANS, ROWS)
    write_cell(tmp_path, "m", "d", "token-agg", 0, MEANS, ROWS)
    results = load_results(tmp_path, [tmp_path / "m/d/seq-agg/seed0/eval/curve.csv",
                                        tmp_path / "m/d/balanced-agg/seed0/eval/curve.csv"])
    assert results.aggregators == ("seq-agg", "balanced-agg")
    assert list(results.cells) == [Cell("m", "d", "seq-agg", 0)]
    assert kinds(results) == [("missing-cell", "m/d/balanced-agg/seed0", None)]


def test_unusable_campaign_folders_raise_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_results(tmp_path / "nope")
    with pytest.raises(ValueError, match="no cell folders"):
        load_results(tmp_path)
    with pytest.raises(ValueError, match="not inside a cell folder"):
        load_results(tmp_path, [tmp_path / "m" / "d"])


def test_manifest_checkpoint_steps_count_as_expected(tmp_path):
    cell = write_cell(tmp_path, "m", "d", "seq-agg", 0, MEANS, ROWS, manifest=False)
    (cell / "manifest.json").write_text(json.dumps({"checkpoints": [{"step": 10, "path": "x"}, {"step": 40}]}))
    results = load_results(tmp_path)
    assert kinds(results) == [("missing-checkpoint", "m/d/seq-agg/seed0", 40)]


def test_the_untrained_step_0_is_a_baseline_not_a_peak(tmp_path):
    write_cell(tmp_path, "m", "d", "seq-agg", 0, {0: (.6, .7), 10: (.3, .4), 20: (.2, .5)}, ROWS)
    row = peak_and_last(load_results(tmp_path)).iloc[0]
    assert row["peak_acc@8"] == pytest.approx(.3) and row["peak_acc@8_step"] == 10
    assert row["peak_best@8"] == pytest.approx(.5) and row["peak_best@8_step"] == 20
    assert row["step0_acc@8"] == pytest.approx(.6) and row["last_acc@8"] == pytest.approx(.2)


def test_seeds_sharing_no_step_give_a_blank_row_not_an_error(tmp_path):
    write_cell(tmp_path, "m", "d", "seq-agg", 0, {10: (.3, .4)}, ROWS)
    write_cell(tmp_path, "m", "d", "seq-agg", 1, {20: (.5, .6)}, ROWS)
    row = peak_and_last(load_results(tmp_path)).iloc[0]
    assert row["peak_acc@8"] != row["peak_acc@8"] and "no step evaluated in every seed" in row["note"]
