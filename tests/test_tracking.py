"""MLflow being unreachable costs a warning, never the run."""

from __future__ import annotations

import logging
import time

from balagg.tracking import Tracker


def test_no_uri_means_no_tracking():
    tracker = Tracker(None)
    assert tracker.start(experiment="e", run_name="r", run_id=None, tags={}, params={}) is None
    tracker.log_metrics({"x": 1.0}, step=1)  # a no-op, no error
    tracker.end()


def test_unreachable_server_warns_and_switches_tracking_off(caplog):
    tracker = Tracker("http://127.0.0.1:9")  # discard port: nothing listens
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="balagg.tracking"):
        run_id = tracker.start(experiment="e", run_name="r", run_id=None, tags={}, params={"a": 1})
    assert run_id is None and not tracker.active
    assert "unreachable" in caplog.text
    assert time.monotonic() - start < 10
    tracker.log_metrics({"x": 1.0}, step=1)
    tracker.end()


def test_workflow_logging_against_an_unreachable_server_reports_skipped(tmp_path):
    from balagg.cli import main
    from balagg.tracking import log_eval_curve, setup_experiment

    uri = "http://127.0.0.1:9"
    assert setup_experiment(uri, "campaign")["status"] == "skipped"
    manifest = {"mlflow_run_id": "abc", "config": {"mlflow_experiment": "campaign"}}
    rows = [{"step": "0", "benchmark": "mean", "acc@8": "0.5", "best@8": "0.75"}]
    assert log_eval_curve(uri, manifest, rows)["status"] == "skipped"
    out = tmp_path / "experiment.json"  # the workflow's rule still gets its output and goes on
    assert main(["track", "setup", "--tracking-uri", uri, "--experiment", "campaign", "--out", str(out)]) == 0
    assert '"skipped"' in out.read_text()


def test_eval_metric_names_avoid_characters_mlflow_refuses():
    from balagg.tracking import eval_metrics

    rows = [{"step": "4", "benchmark": "math500", "acc@8": "0.25", "best@8": "0.5", "best@8_bootstrap": "0.375"},
            {"step": "4", "benchmark": "mean", "acc@8": "nan", "best@8": ""}]
    assert eval_metrics(rows) == {4: {"eval/math500/acc_at_8": 0.25, "eval/math500/best_at_8": 0.5,
                                      "eval/math500/best_at_8_bootstrap": 0.375}}


def test_campaign_experiment_opens_as_model_training_and_runs_filter_by_aggregator(tmp_path):
    """Through MLflow's own API: the experiment kind tag (MLflow 3's UI view), and cell runs that a
    person can find by name and filter by model, dataset and aggregator."""
    import mlflow

    from balagg.tracking import EXPERIMENT_TAGS, _cell_run_id, setup_experiment

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    mlflow.create_experiment("old")  # made before the tags existed: setup adds them
    for name in ("campaign", "old"):
        status = setup_experiment(uri, name)
        assert status["status"] == "ok", status
        tags = mlflow.get_experiment(status["experiment_id"]).tags
        assert tags["mlflow.experimentKind"] == "custom_model_development"
        assert tags == {**tags, **EXPERIMENT_TAGS}
    for aggregator in ("seq-agg", "token-agg", "balanced-agg"):
        cell = f"tiny-s/arith-long/{aggregator}/seed0"
        manifest = {"cell": cell, "model": "tiny-s", "dataset": "arith-long", "aggregator": aggregator, "seed": 0,
                    "config_hash": "abc", "config": {"mlflow_experiment": "campaign"}}
        _cell_run_id(mlflow, manifest)
    runs = mlflow.search_runs(experiment_names=["campaign"], output_format="list",
                              filter_string="tags.model = 'tiny-s' and tags.dataset = 'arith-long'")
    assert sorted(run.info.run_name for run in runs) == [
        "tiny-s/arith-long/balanced-agg/seed0", "tiny-s/arith-long/seq-agg/seed0", "tiny-s/arith-long/token-agg/seed0"]
    (only,) = mlflow.search_runs(experiment_names=["campaign"], output_format="list",
                                 filter_string="tags.aggregator = 'token-agg'")
    assert only.info.run_name == "tiny-s/arith-long/token-agg/seed0" and only.data.tags["seed"] == "0"
