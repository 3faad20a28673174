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


def curve_rows(values: dict[int, tuple[float, float]]) -> list[dict]:
    """eval/curve.csv rows: the six-benchmark mean (and one benchmark) at each step: step -> (acc@8, best@8)."""
    return [{"step": str(step), "benchmark": benchmark, "acc@8": str(acc), "best@8": str(best),
             "best@8_bootstrap": str(best - 0.1)}
            for step, (acc, best) in values.items() for benchmark in ("math500", "mean")]


def test_headline_values_are_table1s_peak_and_last_for_one_seed():
    from balagg.tracking import HEADLINE_METRICS, final_step, headline_values

    assert HEADLINE_METRICS == ("peak/acc_at_8", "peak/best_at_8", "last/acc_at_8", "last/best_at_8")
    rows = curve_rows({0: (0.9, 0.95), 2: (0.3, 0.6), 4: (0.2, 0.7)})
    assert headline_values(rows, last_step=4) == {"peak/acc_at_8": 0.3, "peak/best_at_8": 0.7,
                                                  "last/acc_at_8": 0.2, "last/best_at_8": 0.7}  # step 0 is no peak
    assert "last/acc_at_8" not in headline_values(rows, last_step=6)  # the final checkpoint is not evaluated
    assert headline_values(curve_rows({0: (0.4, 0.5)})) == {"peak/acc_at_8": 0.4, "peak/best_at_8": 0.5,
                                                           "last/acc_at_8": 0.4, "last/best_at_8": 0.5}
    assert final_step({"checkpoints": [{"step": 2}, {"step": 4}]}) == 4 and final_step({"steps": {"0": "p"}}) == 0


@pytest.mark.slow  # an MLflow SQLite store (its migrations)
def test_a_cells_run_shows_its_headline_metrics_and_a_reevaluation_replaces_them(tmp_path):
    """What the runs table shows for a metric is its latest point: after a re-evaluation it is the new value."""
    import mlflow

    from balagg.tracking import Tracker, log_eval_curve

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(store)
    run_id = tracker.start(experiment="e", run_name="c", run_id=None, tags={"cell": "c"}, params={})
    tracker.end()
    manifest = {"mlflow_run_id": run_id, "config": {"mlflow_experiment": "e"},
                "checkpoints": [{"step": 2}, {"step": 4}]}
    assert log_eval_curve(store, manifest, curve_rows({0: (0.1, 0.2), 2: (0.3, 0.6), 4: (0.2, 0.7)}))["status"] == "ok"
    client = mlflow.MlflowClient(tracking_uri=store)
    assert {k: v for k, v in client.get_run(run_id).data.metrics.items() if "/" in k and not k.startswith("eval/")} == {
        "peak/acc_at_8": 0.3, "peak/best_at_8": 0.7, "last/acc_at_8": 0.2, "last/best_at_8": 0.7}
    log_eval_curve(store, manifest, curve_rows({0: (0.1, 0.2), 2: (0.3, 0.6), 4: (0.2, 0.7)}))  # nothing new
    assert len(client.get_metric_history(run_id, "peak/acc_at_8")) == 1
    log_eval_curve(store, manifest, curve_rows({0: (0.1, 0.2), 2: (0.25, 0.6), 4: (0.5, 0.8)}))  # re-scored
    held = client.get_run(run_id).data.metrics
    assert held["peak/acc_at_8"] == 0.5 and held["last/best_at_8"] == 0.8
    # re-scored lower: the latest point wins, not the largest (MLflow breaks a tie of step and time by value)
    log_eval_curve(store, manifest, curve_rows({0: (0.1, 0.2), 2: (0.15, 0.6), 4: (0.1, 0.4)}))
    held = client.get_run(run_id).data.metrics
    assert held["peak/acc_at_8"] == 0.15 and held["last/best_at_8"] == 0.4
    assert len(client.get_metric_history(run_id, "peak/acc_at_8")) == 3


def live_runs(store: str, experiment: str, cell: str) -> list:
    import mlflow

    mlflow.set_tracking_uri(store)
    return mlflow.search_runs(experiment_names=[experiment], output_format="list", filter_string=f"tags.cell = '{cell}'")


@pytest.mark.slow  # an MLflow SQLite store (its migrations)
def test_a_run_made_for_evaluation_supersedes_the_cells_earlier_run(tmp_path):
    """Training ran with tracking on under one config, the evaluation of a later config finds no run of its
    config hash (training ran with tracking off) and makes one: that run replaces the earlier one, so the
    cell keeps one live run, as after a retrain."""
    import mlflow

    from balagg.tracking import Tracker, cell_run_tags, log_eval_curve

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cell = "tiny-s/arith/balanced-agg/seed0"
    tracker = Tracker(store)
    old_id = tracker.start(experiment="e", run_name=cell, run_id=None, params={},
                           tags=cell_run_tags(cell, "tiny-s", "arith", "balanced-agg", 0, "old", None))
    tracker.end()
    manifest = {"cell": cell, "model": "tiny-s", "dataset": "arith", "aggregator": "balanced-agg", "seed": 0,
                "config_hash": "new", "config": {"mlflow_experiment": "e"}, "checkpoints": [{"step": 2}]}
    status = log_eval_curve(store, manifest, curve_rows({0: (0.1, 0.2), 2: (0.3, 0.6)}))
    assert status["status"] == "ok" and status["run_id"] != old_id
    assert [run.info.run_id for run in live_runs(store, "e", cell)] == [status["run_id"]]
    old = mlflow.MlflowClient(tracking_uri=store).get_run(old_id)
    assert old.data.tags["superseded_by"] == status["run_id"] and old.info.lifecycle_stage == "deleted"
    assert log_eval_curve(store, manifest, curve_rows({0: (0.1, 0.2), 2: (0.3, 0.6)}))["run_id"] == status["run_id"]


@pytest.mark.slow  # an MLflow SQLite store (its migrations)
def test_an_earlier_run_that_cannot_be_superseded_costs_a_warning_not_the_new_run(tmp_path, monkeypatch, caplog):
    """One earlier run deleted meanwhile (by a concurrent retrain): superseding it fails, with one warning
    naming it; the other earlier run is superseded, and the new run is tracked and its id returned, to be
    written beside the cell."""
    import mlflow

    from balagg import tracking

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(store)
    mlflow.set_experiment("e")
    earlier = []
    for _ in range(2):  # two live runs of the cell (made before runs were superseded)
        with mlflow.start_run(run_name="c", tags={"cell": "c"}) as run:
            earlier.append(run.info.run_id)
    client = mlflow.MlflowClient(tracking_uri=store)
    found = tracking.live_cell_runs

    def deleted_meanwhile(mlflow_module, experiment, cell):
        runs = found(mlflow_module, experiment, cell)
        client.delete_run(earlier[0])
        return runs

    monkeypatch.setattr(tracking, "live_cell_runs", deleted_meanwhile)
    tracker = tracking.Tracker(store)
    with caplog.at_level(logging.WARNING, logger="balagg.tracking"):
        run_id = tracker.start(experiment="e", run_name="c", run_id=None, tags={"cell": "c"}, params={"a": 1})
    assert run_id is not None and tracker.run_id == run_id and tracker.active
    warnings = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) == 1 and earlier[0] in warnings[0] and "\n" not in warnings[0]
    tracker.log_metrics({"pg_loss": 1.0}, step=1)
    tracker.end()
    assert client.get_run(run_id).info.status == "FINISHED" and client.get_run(run_id).data.metrics == {"pg_loss": 1.0}
    assert client.get_run(earlier[1]).data.tags["superseded_by"] == run_id
    assert [run.info.run_id for run in live_runs(store, "e", "c")] == [run_id]


@pytest.mark.slow  # an MLflow SQLite store (its migrations)
def test_the_experiment_holds_a_saved_runs_view_with_the_aggregator_and_headline_columns(tmp_path):
    """The view is an experiment tag in the envelope MLflow 3.17's UI reads (name, createdAt, state) and
    `balagg results` links to it; a second set-up leaves it as it is."""
    import json

    import mlflow

    from balagg.commands.results import mlflow_command
    from balagg.tracking import HEADLINE_METRICS, RUNS_VIEW_ID, setup_experiment

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    status = setup_experiment(store, "campaign")
    assert status["status"] == "ok" and status["view"] == RUNS_VIEW_ID
    tags = mlflow.MlflowClient(tracking_uri=store).get_experiment(status["experiment_id"]).tags
    envelope = json.loads(tags[f"mlflow.sharedViewState.{RUNS_VIEW_ID}"])
    assert isinstance(envelope["name"], str) and isinstance(envelope["createdAt"], int)
    state = json.loads(envelope["state"])
    assert state["selectedColumns"][0] == "tags.`aggregator`" and state["columnOrder"][1] == "tags.`aggregator`"
    assert [f"metrics.`{name}`" for name in HEADLINE_METRICS] == [c for c in state["selectedColumns"] if "metrics" in c]
    assert setup_experiment(store, "campaign")["status"] == "ok"
    again = mlflow.MlflowClient(tracking_uri=store).get_experiment(status["experiment_id"]).tags
    assert json.loads(again[f"mlflow.sharedViewState.{RUNS_VIEW_ID}"])["createdAt"] == envelope["createdAt"]
    assert mlflow_command(status).endswith(
        f"#/experiments/{status['experiment_id']}/runs?viewStateShareKey={RUNS_VIEW_ID}")
