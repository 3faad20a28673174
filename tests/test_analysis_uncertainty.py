"""Error bars, the paired comparison and the mechanism figure (balagg.analysis.uncertainty / comparison / mechanism)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from analysis_fixtures import BENCHMARKS, write_cell
from balagg.analysis import diagnosis as diagnosis_lib, table1

from balagg.analysis import load_results
from balagg.analysis.comparison import MDD_FACTOR, comparison_table, pair_result, paired_difference, to_markdown
from balagg.analysis.uncertainty import add_standard_errors, load_problem_scores, stratified_mean_se
from balagg.analysis.mechanism import make_figure, mechanism_frame, mechanism_summary

PROBLEMS = 8  # per benchmark


def write_scores(folder, accs):
    """scores.jsonl with, for each benchmark, problems whose Acc@8 is accs[i] (k/8)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for bench in BENCHMARKS:
        for i, acc in enumerate(accs):
            k = round(acc * 8)
            lines.append({"benchmark": bench, "problem_id": f"{bench}-{i}", "correct": [1] * k + [0] * (8 - k),
                          "truncated": [0] * 8})
    (folder / "scores.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


BASE = [0.0, 0.25, 0.5, 0.75, 1.0, 0.5, 0.25, 0.75]


def shifted(shift, jitter):
    """BASE + shift, with +-jitter alternating over problems (clipped to [0, 1] never needed here)."""
    return [b + shift + (jitter if i % 2 else -jitter) for i, b in enumerate(BASE)]


def side_metrics(aggregator, pos, neg, long_, short):
    """Logged steps 1-20 with the cell's own side masses and per-token weights; token-agg's masses on the
    same batches are 1 / 2 unless the cell is token-agg's own."""
    return [{"step": s, "pg_loss": 0.0, "len_cv": 0.4, "len_gap": 5.0, "len_mean": 30.0,
             "side_weight/token-agg/pos": 1.0, "side_weight/token-agg/neg": 2.0,
             f"side_weight/{aggregator}/pos": pos, f"side_weight/{aggregator}/neg": neg,
             f"token_weight/{aggregator}/pos_long": long_, f"token_weight/{aggregator}/pos_short": short,
             "len_pos_mean": 20.0, "len_neg_mean": 40.0, "len_cv_within_group": 0.3} for s in range(1, 21)]


@pytest.fixture()
def results(tmp_path):
    """m/d x {seq-agg, token-agg} x seeds {0, 1}, steps 0 and 10; at step 10 token-agg is 0.125 better on
    three problems in four and equal on the rest (a difference far beyond its error)."""
    root = tmp_path / "lab"
    for aggregator in ("seq-agg", "token-agg"):
        for seed in (0, 1):
            metrics = side_metrics(aggregator, 1.0, 1.0 if aggregator == "seq-agg" else 3.0, 0.5, 1.0)
            cell = write_cell(root, "m", "d", aggregator, seed, {0: (0.5, 0.9), 10: (0.55, 0.95)}, metrics)
            step10 = [a + 0.125 * (aggregator == "token-agg") for a in BASE]
            step10 = [a - 0.125 if (aggregator == "token-agg" and i % 4 == 0) else a for i, a in enumerate(step10)]
            write_scores(cell / "eval/step-000010", [min(1.0, a) for a in step10])
    write_scores(root / "m/initial/eval/step-000000", BASE)
    return load_results(root)


def test_stratified_se_matches_the_formula_by_hand():
    values = pd.Series([0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    benchmarks = pd.Series(["a", "a", "b", "b", "b", "b"])
    mean, se = stratified_mean_se(values, benchmarks)
    assert mean == pytest.approx(0.75)  # (0.5 + 1.0) / 2: equal weight per benchmark, not per problem
    assert se == pytest.approx(math.sqrt(0.5 / 2 + 0.0) / 2)
    assert math.isnan(stratified_mean_se(pd.Series([1.0, 0.0]), pd.Series(["a", "b"]))[1])


def test_problem_scores_take_step0_from_the_initial_model(results):
    scores = load_problem_scores(results)
    assert set(scores.step) == {0, 10}
    step0 = scores[scores.step == 0]
    assert len(step0) == 4 * len(BENCHMARKS) * PROBLEMS  # every cell shares the initial model's scores
    assert step0.groupby(["aggregator", "seed"])["acc@8"].mean().round(6).nunique() == 1


def test_table1_standard_errors_are_over_problems_at_the_value_step(results):
    table = table1.build_table(results)
    seq = table[table.aggregator == "seq-agg"].iloc[0]
    # every benchmark holds BASE at step 10 for both seeds: SE = sqrt(B * var(BASE) / n) / B
    expected = math.sqrt(len(BENCHMARKS) * pd.Series(BASE).var(ddof=1) / PROBLEMS) / len(BENCHMARKS)
    assert seq["last_acc@8_se"] == pytest.approx(expected)
    assert seq["peak_acc@8_se"] == pytest.approx(expected)  # the peak is step 10 too
    markdown = table1.to_markdown(table, "lab")
    assert f"(SE {expected:.4f})" in markdown


def test_standard_errors_are_blank_without_scores(tmp_path):
    root = tmp_path / "c"
    write_cell(root, "m", "d", "seq-agg", 0, {0: (0.5, 0.9), 10: (0.6, 0.9)}, side_metrics("seq-agg", 1, 1, 1, 1))
    results = load_results(root)
    from balagg.analysis import peak_and_last

    table = add_standard_errors(peak_and_last(results), results)
    assert table["last_acc@8_se"].isna().all()


def test_paired_comparison_finds_a_real_difference_and_orients_it(results):
    table = comparison_table(results)
    last = table[(table.point == "last")].iloc[0]
    assert (last.a, last.b, last.step) == ("seq-agg", "token-agg", 10)
    assert last.n_units == 2 * len(BENCHMARKS) * PROBLEMS and last.n_seeds == 2
    assert last["diff"] < 0 and last.beyond_error and last.verdict == "seq-agg < token-agg"
    assert last.mdd == pytest.approx(MDD_FACTOR * last.se)
    flipped = pair_result(table, "m", "d", "token-agg", "seq-agg", "last")
    assert flipped["diff"] == pytest.approx(-last["diff"]) and flipped["verdict"] == "token-agg > seq-agg"
    mean = table[(table.point == "mean")].iloc[0]
    assert mean["diff"] == pytest.approx(last["diff"])  # one trained checkpoint: the same comparison


def test_an_earlier_checkpoint_gets_its_own_row_so_a_sign_change_is_seen(tmp_path):
    """token-agg is 0.125 ahead at step 5 and 0.125 behind at the final step 10."""
    root = tmp_path / "flip"
    for aggregator in ("seq-agg", "token-agg"):
        for seed in (0, 1):
            cell = write_cell(root, "m", "d", aggregator, seed, {0: (0.5, 0.9), 5: (0.5, 0.9), 10: (0.5, 0.9)},
                              side_metrics(aggregator, 1.0, 1.0, 1.0, 1.0))
            for step, shift in ((5, 0.125), (10, -0.125)):
                own = [min(1.0, max(0.0, a + shift * (aggregator == "token-agg"))) for a in BASE]
                write_scores(cell / f"eval/step-{step:06d}", own)
    write_scores(root / "m/initial/eval/step-000000", BASE)
    table = comparison_table(load_results(root))
    assert list(zip(table.point, table.step.astype(object))) == [("last", 10), ("mean", pd.NA), ("step", 5)]
    by_point = table.set_index("point")
    assert by_point.loc["step", "verdict"] == "seq-agg < token-agg"
    assert by_point.loc["last", "verdict"] == "seq-agg > token-agg"
    assert "| step 5 | seq-agg | token-agg |" in to_markdown(table, "flip")


def test_a_difference_inside_the_noise_is_reported_as_such():
    rows = []
    for aggregator, accs in (("seq-agg", shifted(0.0, 0.0)), ("token-agg", shifted(0.0, 0.125))):
        for i, acc in enumerate(accs):
            rows.append({"model": "m", "dataset": "d", "aggregator": aggregator, "seed": 0, "step": 10,
                         "benchmark": "math500", "problem_id": str(i), "acc@8": acc, "best@8": 1.0})
    result = paired_difference(pd.DataFrame(rows), "seq-agg", "token-agg", "acc@8", "last", 10)
    assert result["diff"] == pytest.approx(0.0, abs=1e-12) and result["p"] > 0.5
    assert not result["beyond_error"] and result["verdict"] == "no difference beyond error"
    untestable = paired_difference(pd.DataFrame(rows), "seq-agg", "balanced-agg", "acc@8", "last", 10)
    assert untestable["verdict"] == "not testable" and untestable["n_units"] == 0


def test_diagnosis_says_whether_token_minus_seq_is_beyond_error(results):
    diagnosis = diagnosis_lib.diagnose(results)
    row = diagnosis.iloc[0]
    assert row.last_diff > 0 and row.beyond_error and row.tested == "token-agg > seq-agg"


def test_mechanism_shares_ratios_and_figure(results):
    frame = mechanism_frame(results)
    token = frame[frame.aggregator == "token-agg"]
    assert token.neg_share.eq(0.75).all() and token.mass_ratio.eq(3.0).all()
    seq = frame[frame.aggregator == "seq-agg"]
    assert seq.neg_share.eq(0.5).all() and seq.long_short.eq(0.5).all()
    assert seq.token_agg_ratio.eq(2.0).all() and token.token_agg_ratio.eq(3.0).all()  # on every cell's batches
    summary = mechanism_summary(frame).set_index("aggregator")
    assert summary.loc["token-agg", "share_above_1.5"] == 1.0 and summary.loc["seq-agg", "n_seeds"] == 2
    figure = make_figure(results, smoothing=1)
    assert len(figure.axes) == 3
    for ax in figure.axes:
        lines = [line for line in ax.get_lines() if line.get_gid() == "data"]
        assert sorted(line.get_label() for line in lines) == ["seq-agg", "token-agg"]
        assert len({line.get_linestyle() for line in lines}) == 2  # coinciding lines stay distinguishable
