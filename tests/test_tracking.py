"""MLflow as a window onto the files: an unreachable server costs a warning, never the run; the campaign's
experiment, its cells' runs and their dataset inputs as the UI reads them; the link that opens them."""

from __future__ import annotations

import logging
import time

import pytest

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


@pytest.mark.slow  # an MLflow SQLite store (its migrations)
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


def prepared_file(folder, name: str, rows: list[dict], location: str):
    """A prepared training set or benchmark and the prepare-data report beside it (docs/files.md)."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / f"{name}.report.json").write_text(json.dumps({"source": name, "location": location, "out": str(path)}))
    return path


@pytest.mark.slow  # an MLflow SQLite store (its migrations)
def test_a_cells_training_set_and_benchmarks_are_its_runs_dataset_inputs_with_their_revisions(tmp_path):
    """Through MLflow's own API on a SQLite store, as the runs table reads them: the training set and every
    benchmark, each once (a rerun adds nothing), named as the campaign names them, with the context it was
    used in, a digest of the file, and its hub repository at the revision fetch.json recorded (a local or
    tiny-world source: the file itself)."""
    import hashlib
    import json

    import mlflow

    from balagg.cli import main
    from balagg.tracking import dataset_inputs, setup_experiment

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert setup_experiment(uri, "campaign")["status"] == "ok"
    data = tmp_path / "results" / "data"
    train = prepared_file(data / "train", "arith", [{"id": "dapo-0000", "problem": "1+1", "answer": "2"}],
                          "owner/dapo-hub")
    math500 = prepared_file(data / "bench", "math500", [{"id": "math500-0000", "problem": "2+2", "answer": "4"}],
                            str(tmp_path / "raw" / "math500"))
    aime24 = prepared_file(data / "bench", "aime24", [{"id": "aime24-0000", "problem": "3+3", "answer": "6"}],
                           "owner/aime-hub")
    fetch = tmp_path / "results" / "fetch.json"
    fetch.write_text(json.dumps({"repos": [
        {"repo_id": "owner/dapo-hub", "repo_type": "dataset", "commit": "c0ffee1", "name": "dapo-math-17k"},
        {"repo_id": "owner/model", "repo_type": "model", "commit": "beef", "name": None}]}))
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({
        "cell": "tiny-s/arith/balanced-agg/seed0", "model": "tiny-s", "dataset": "arith", "aggregator": "balanced-agg",
        "seed": 0, "config_hash": "abc", "mlflow_tracking_uri": uri,
        "config": {"mlflow_experiment": "campaign", "train_files": [str(train)]}}))
    curve = tmp_path / "curve.csv"
    curve.write_text("step,benchmark,acc@8,best@8\n0,math500,0.5,0.75\n0,aime24,0.25,0.5\n")
    command = ["track", "eval", "--manifest", str(manifest), "--curve", str(curve), "--fetch", str(fetch),
               "--benchmark-data", str(math500), str(aime24)]
    for attempt in range(2):
        out = tmp_path / f"mlflow-{attempt}.json"
        assert main([*command, "--out", str(out)]) == 0
        status = json.loads(out.read_text())
        assert status["status"] == "ok" and status["datasets"] == ["arith", "math500", "aime24"], status

    mlflow.set_tracking_uri(uri)
    (run,) = mlflow.search_runs(experiment_names=["campaign"], output_format="list")
    found = {}
    for item in run.inputs.dataset_inputs:
        context = {tag.key: tag.value for tag in item.tags}["mlflow.data.context"]
        found[item.dataset.name] = (context, item.dataset.digest, item.dataset.source_type, json.loads(item.dataset.source))
    assert len(run.inputs.dataset_inputs) == 3  # the rerun logged nothing twice

    def digest(path):
        return hashlib.sha256(path.read_bytes()).hexdigest()[:12]

    assert found["arith"][:3] == ("training", digest(train), "hugging_face")
    assert (found["arith"][3]["path"], found["arith"][3]["revision"]) == ("owner/dapo-hub", "c0ffee1")
    assert found["math500"] == ("evaluation", digest(math500), "local", {"uri": str(math500.resolve())})
    assert found["aime24"][:3] == ("evaluation", digest(aime24), "hugging_face")
    assert found["aime24"][3]["path"] == "owner/aime-hub" and found["aime24"][3]["revision"] is None  # not fetched
    assert [d["name"] for d in dataset_inputs([train], [], None)] == ["arith"]


def test_the_printed_mlflow_link_opens_the_experiments_runs_table():
    """MLflow 3's UI opens ``#/experiments/<id>`` on the GenAI traces overview, whatever the experiment's
    kind tag; ``#/experiments/<id>/runs`` is the runs table (tests/test_pipeline.py opens it in Chromium)."""
    from balagg.commands.results import mlflow_command

    local = mlflow_command({"tracking_uri": "sqlite:////r/mlflow.db", "experiment_id": "3"})
    assert local.endswith("# then open http://127.0.0.1:5000/#/experiments/3/runs")
    assert "ui --backend-store-uri sqlite:////r/mlflow.db" in local
    assert mlflow_command({"tracking_uri": "http://mlflow:5000/", "experiment_id": "7"}) == (
        "open http://mlflow:5000/#/experiments/7/runs")
