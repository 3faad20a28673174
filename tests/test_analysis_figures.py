"""Figures 1-3 inspected through matplotlib's objects: series, labels, axes, values and marked gaps."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from analysis_fixtures import AGGREGATORS, BENCHMARKS, REPO, STEPS, make_campaign, train_metrics, write_cell
from balagg.analysis import figure1, figure2, figure3, load_results


def lines(ax, gid: str) -> list:
    return [line for line in ax.get_lines() if line.get_gid() == gid]


def texts(figure_or_ax, gid: str) -> list[str]:
    return [t.get_text() for t in figure_or_ax.findobj(lambda a: hasattr(a, "get_text") and a.get_gid() == gid)]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return load_results(make_campaign(tmp_path_factory.mktemp("camp") / "camp"))


def test_figure1_has_a_solid_and_a_dashed_bar_per_aggregator_and_benchmark(results):
    figure = figure1.make_figure(results)
    (ax,) = figure.axes
    assert [c.get_label() for c in ax.containers] == [
        f"{a} {kind}" for a in AGGREGATORS for kind in ("peak", "last step")]
    assert all(len(c.patches) == len(BENCHMARKS) for c in ax.containers)
    peak, last = ax.containers[4], ax.containers[5]  # balanced-agg
    assert all(p.get_fill() for p in peak.patches)
    assert not any(p.get_fill() for p in last.patches) and all(p.get_linestyle() == "--" for p in last.patches)
    assert [t.get_text() for t in ax.get_xticklabels()] == list(BENCHMARKS)
    assert ax.get_ylabel() == "Acc@8"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [c.get_label() for c in ax.containers]
    # math500 = six-benchmark mean - 0.05. balanced-agg peak: dapo 0.38 (step 20), polaris 0.1505 (step 30);
    # last: dapo 0.35, polaris 0.1505; the bar is the mean over the two settings.
    assert peak.patches[0].get_height() == pytest.approx((0.33 + 0.1005) / 2)
    assert last.patches[0].get_height() == pytest.approx((0.30 + 0.1005) / 2)
    assert texts(figure, "gap") == []
    assert "averaged over 2 training setting(s): qwen-a on dapo, qwen-a on polaris" in texts(figure, "caption")[0]


def test_figure1_marks_bars_averaged_over_fewer_settings(tmp_path):
    root = make_campaign(tmp_path / "camp", skip={("polaris", "token-agg", 0), ("polaris", "token-agg", 1)})
    figure = figure1.make_figure(load_results(root))
    assert texts(figure, "gap") == ["*"] * (2 * len(BENCHMARKS))
    caption = texts(figure, "caption")[0]
    assert "token-agg peak (all benchmarks): no value from qwen-a/polaris" in caption
    assert "token-agg last-step (all benchmarks): no value from qwen-a/polaris" in caption
    token_peak = figure.axes[0].containers[2]
    assert token_peak.patches[0].get_height() == pytest.approx(0.35 - 0.05)  # dapo alone, and said so


def test_figure1_marks_bars_with_no_value_at_all(tmp_path):
    root = make_campaign(tmp_path / "camp", skip={("polaris", "token-agg", 0), ("polaris", "token-agg", 1)})
    (root / "qwen-a/dapo/seq-agg/seed0/train/checkpoints/step-000040").mkdir(parents=True)  # dapo: no last step
    figure = figure1.make_figure(load_results(root))
    marks = texts(figure, "gap")
    # token-agg last: dapo blank, polaris missing -> n/a; token-agg peak (dapo only) and the other two
    # aggregators' last-step bars (polaris only) -> *
    assert marks.count("n/a") == len(BENCHMARKS) and marks.count("*") == 3 * len(BENCHMARKS)
    token_last = figure.axes[0].containers[3]
    assert all(np.isnan(p.get_height()) for p in token_last.patches)


def test_figure2_one_panel_per_dataset_smoothed_lines_over_faint_raw(results):
    figure = figure2.make_figure(results, smoothing=3)
    assert len(figure.axes) == 2
    for ax, dataset in zip(figure.axes, ("dapo", "polaris")):
        assert ax.get_title() == f"qwen-a on {dataset}"
        assert ax.get_xlabel() == "training step" and ax.get_ylabel() == "policy-gradient loss"
        assert [line.get_label() for line in lines(ax, "smoothed")] == list(AGGREGATORS)
        assert len(lines(ax, "raw")) == 3 and all(line.get_alpha() < 0.5 for line in lines(ax, "raw"))
        assert len(lines(ax, "zero")) == 1
        assert [t.get_text() for t in ax.get_legend().get_texts()] == list(AGGREGATORS)
    token_raw, token_smoothed = lines(figure.axes[0], "raw")[1], lines(figure.axes[0], "smoothed")[1]
    steps = np.arange(1, 31)
    np.testing.assert_allclose(token_raw.get_xdata(), steps)
    np.testing.assert_allclose(token_raw.get_ydata(), -0.02 * steps)  # mean of seeds' -0.01 s and -0.03 s
    smoothed = token_smoothed.get_ydata()
    np.testing.assert_allclose(smoothed[1:-1], -0.02 * steps[1:-1])  # a centred mean of a line is the line
    assert smoothed[0] == pytest.approx(-0.02 * 1.5) and smoothed[-1] == pytest.approx(-0.02 * 29.5)
    assert "centred moving average over 3 logged steps" in texts(figure, "caption")[0]


def test_figure2_without_smoothing_draws_no_raw_lines_and_refuses_unknown_models(results):
    figure = figure2.make_figure(results, smoothing=1)
    assert all(len(lines(ax, "raw")) == 0 and len(lines(ax, "smoothed")) == 3 for ax in figure.axes)
    assert "unsmoothed" in texts(figure, "caption")[0]
    with pytest.raises(ValueError, match="model 'gpt' is not in campaign"):
        figure2.make_figure(results, model="gpt")


def test_figure2_says_which_aggregator_has_no_data(tmp_path):
    root = make_campaign(tmp_path / "camp", skip={("polaris", "token-agg", 0), ("polaris", "token-agg", 1)})
    figure = figure2.make_figure(load_results(root))
    assert texts(figure.axes[0], "missing") == []
    assert texts(figure.axes[1], "missing") == ["no data: token-agg"]
    assert len(lines(figure.axes[1], "smoothed")) == 2


def test_figure3_rows_cv_and_gap_one_column_per_setting_one_line_per_aggregator(tmp_path):
    root = tmp_path / "camp"
    for model, cv in (("m1", 0.4), ("m2", 0.9)):
        for dataset in ("d1", "d2"):
            for aggregator in AGGREGATORS:
                write_cell(root, model, dataset, aggregator, 0, {s: (0.1, 0.2) for s in STEPS},
                           train_metrics(range(1, 11), float, cv, 5.0 if dataset == "d1" else 50.0))
    figure = figure3.make_figure(load_results(root))
    axes = np.array(figure.axes).reshape(2, 4)
    assert [ax.get_title() for ax in axes[0]] == ["m1 on d1", "m2 on d1", "m1 on d2", "m2 on d2"]
    assert all(ax.get_ylabel() == "response-length CV" for ax in axes[0])
    assert all(ax.get_ylabel() == "neg − pos length gap (tokens)" for ax in axes[1])
    assert all(ax.get_xlabel() == "training step" for ax in axes[1])
    for ax in axes.flat:
        assert [line.get_label() for line in lines(ax, "smoothed")] == list(AGGREGATORS)
    np.testing.assert_allclose(lines(axes[0][1], "smoothed")[0].get_ydata(), 0.9)
    np.testing.assert_allclose(lines(axes[1][2], "smoothed")[2].get_ydata(), 50.0)


def test_figure_script_writes_png_and_pdf(tmp_path):
    # (the workflow test runs every script's command line; this one checks the files and options)
    root = make_campaign(tmp_path / "camp")
    done = subprocess.run([sys.executable, str(REPO / "analysis" / "figure2.py"), "--campaign-dir", str(root),
                           "--model", "qwen-a", "--smoothing", "3"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (root / "analysis" / "figure2.png").read_bytes()[:4] == b"\x89PNG"
    assert (root / "analysis" / "figure2.pdf").read_bytes()[:4] == b"%PDF"
    bad = subprocess.run([sys.executable, str(REPO / "analysis" / "figure2.py"), "--campaign-dir", str(root),
                          "--model", "gpt"], capture_output=True, text=True)
    assert bad.returncode == 2 and "error: model 'gpt' is not in campaign camp" in bad.stderr


def test_figure1_marks_bars_that_are_zero_and_names_a_benchmark_no_sample_solved(tmp_path):
    """The tiny world's models solve no LiveCodeBench problem: its bars are 0, drawn flat, so each carries
    a 0 and the caption says why the benchmark shows no bar (not a missing value)."""
    results = load_results(make_campaign(tmp_path / "camp"))
    results.evals.loc[results.evals.benchmark == "livecodebench", "acc@8"] = 0.0
    figure = figure1.make_figure(results)
    assert texts(figure, "zero") == ["0"] * (2 * len(AGGREGATORS)) and texts(figure, "gap") == []
    assert ("livecodebench: Acc@8 0 at every step for every aggregator and setting (no sample solved a problem)"
            in texts(figure, "caption")[0])


def test_figure1_names_a_flat_benchmark_only_when_every_setting_shows_it_and_says_if_step_0_solved(tmp_path):
    results = load_results(make_campaign(tmp_path / "camp"))
    lcb = results.evals.benchmark == "livecodebench"
    results.evals.loc[lcb & (results.evals.step > 0), "acc@8"] = 0.0  # the base model solved some at step 0
    assert figure1.zero_lines(figure1.figure_data(results)) == [
        "livecodebench: Acc@8 0 at every step after step 0 for every aggregator and setting (no sample of a "
        "trained checkpoint solved a problem); its bars are flat at 0"]
    # one setting without a LiveCodeBench value after step 0: the zero bars stand for fewer settings
    first = (results.evals.model == results.evals.model.iloc[0]) & (results.evals.dataset == results.evals.dataset.iloc[0])
    results.evals = results.evals[~(lcb & first & (results.evals.step > 0))]
    assert figure1.zero_lines(figure1.figure_data(results)) == []


def test_figure2_says_it_shows_one_model_of_several(tmp_path):
    root = make_campaign(tmp_path / "camp")
    for aggregator in AGGREGATORS:
        write_cell(root, "qwen-b", "dapo", aggregator, 0, {s: (0.3, 0.5) for s in STEPS},
                   train_metrics(range(1, 31), lambda s: -0.01 * s, 0.4, 10.0))
    results = load_results(root)
    figure = figure2.make_figure(results, smoothing=1)
    assert texts(figure, "scope") == ["qwen-a only: 1 of the campaign's 2 models"]
    assert ("(one model of 2, as in the paper's Figure 2; analysis.figure2_model, or --model, shows another: qwen-b)"
            in texts(figure, "caption")[0])
    single = figure2.make_figure(load_results(make_campaign(tmp_path / "one")), smoothing=1)
    assert texts(single, "scope") == [] and "one model of" not in texts(single, "caption")[0]
