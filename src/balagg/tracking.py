"""MLflow as a window onto the files: one run per cell, never a reason to stop or slow training.

One run per cell: a retrain from scratch replaces the cell's run, and the run it replaces is deleted
(MLflow's soft delete: out of the runs table and every search by default, restorable from the
Deleted filter, tagged ``superseded_by``). Each cell's run carries its benchmark-mean peak and last
Acc@8/Best@8 (:data:`HEADLINE_METRICS`, Table 1's values for one seed), and every campaign's experiment
holds a saved view of the runs table (:data:`RUNS_VIEW_ID`) that shows them beside the aggregator.

``Tracker(uri, ...)`` does nothing when ``uri`` is None. Otherwise it starts (or, given a stored run id,
resumes) one MLflow run, and every later call is best-effort: the first failure logs one warning and
switches tracking off for the rest of the process, so the files (metrics.jsonl, manifest.json) remain
the source of truth. HTTP servers are probed once with a short timeout before anything else, and
MLflow's own HTTP retries are capped, so an unreachable server costs seconds, not minutes.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import math
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from balagg import benchmarks
from balagg.layout import data_report_file, dataset_filename

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0


def _reachable(uri: str) -> bool:
    """False for an http(s) URI whose server does not answer within PROBE_TIMEOUT_S; True otherwise."""
    if not uri.startswith(("http://", "https://")):
        return True
    try:
        urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=PROBE_TIMEOUT_S)
    except urllib.error.HTTPError:
        return True  # it answered
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return True


class Tracker:
    def __init__(self, uri: str | None) -> None:
        self.uri = uri
        self.run_id: str | None = None
        self.active = False
        self._mlflow = None
        self._logged: dict[str, set[int]] = {}  # (key, step) points the run already holds

    def _disable(self, what: str, error: BaseException) -> None:
        log.warning("MLflow %s failed (%s: %s); tracking is off for this run, files are kept",
                    what, type(error).__name__, error)
        self.active = False

    def start(self, *, experiment: str, run_name: str, run_id: str | None, tags: dict[str, str],
              params: dict[str, Any]) -> str | None:
        """Start or resume the cell's run; returns its id (None if tracking is off or failed).

        Resuming (``run_id`` given) reads the points the run already holds, and :meth:`log_metrics` skips
        every (key, step) among them, so a step retrained after a resume is logged once. A new run (a
        retrain from scratch) then ends every earlier live run of the same cell (tag ``cell``)
        explicitly: status KILLED and tag ``superseded_by`` = the new run, so one live run per cell remains.
        An earlier run that cannot be superseded costs a warning naming it, not the new run
        (:func:`supersede`).
        """
        if self.uri is None:
            return None
        mlflow = _connect(self.uri)
        if mlflow is None:
            return None
        try:
            self._mlflow = mlflow
            if run_id is None:
                mlflow.set_experiment(experiment)
                earlier = live_cell_runs(mlflow, experiment, tags.get("cell", run_name))
                run = mlflow.start_run(run_name=run_name, tags=tags)
                flat = {k: (v if isinstance(v, (int, float, str, bool)) or v is None else str(v))
                        for k, v in params.items()}
                mlflow.log_params(flat)
                supersede(mlflow.MlflowClient(), earlier, run.info.run_id)
            else:
                run = mlflow.start_run(run_id=run_id)
                self._logged = logged_points(mlflow.MlflowClient(), run_id)
            self.run_id = run.info.run_id
            self.active = True
        except Exception as error:
            self._disable("start", error)
        return self.run_id

    def log_metrics(self, metrics: dict[str, Any], step: int) -> None:
        """Log the finite values at ``step``, skipping every key the run already holds at that step."""
        if not self.active:
            return
        finite = {k: float(v) for k, v in metrics.items()
                  if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and k != "step"
                  and step not in self._logged.get(k, ())}
        if not finite:
            return
        try:
            self._mlflow.log_metrics(finite, step=step)
        except Exception as error:
            self._disable("log_metrics", error)
            return
        for key in finite:
            self._logged.setdefault(key, set()).add(step)

    def end(self, status: str = "FINISHED") -> None:
        if not self.active:
            return
        try:
            self._mlflow.end_run(status=status)
        except Exception as error:
            self._disable("end_run", error)
        self.active = False


SUPERSEDED_TAG = "superseded_by"


def logged_points(client, run_id: str) -> dict[str, set[int]]:
    """key -> the steps at which the run holds a point."""
    run = client.get_run(run_id)
    return {key: {point.step for point in client.get_metric_history(run_id, key)} for key in run.data.metrics}


def live_cell_runs(mlflow, experiment: str, cell: str) -> list[str]:
    """Ids of the experiment's runs of ``cell`` that no later run has superseded."""
    runs = mlflow.search_runs(experiment_names=[experiment], output_format="list",
                              filter_string=f"tags.cell = '{cell}'")
    return [run.info.run_id for run in runs if SUPERSEDED_TAG not in run.data.tags]


def supersede(client, run_ids: list[str], new_run_id: str) -> None:
    """End the earlier runs of a cell explicitly (KILLED, tagged with the run that replaces them) and delete
    them: out of the default view and of every default search, so the cell has one run; MLflow keeps a
    deleted run restorable until ``mlflow gc``. Each run is best-effort: one that cannot be superseded
    (deleted meanwhile, a store error) costs one warning naming it, never the new run, nor the others."""
    for run_id in run_ids:
        try:
            client.set_tag(run_id, SUPERSEDED_TAG, new_run_id)
            client.set_terminated(run_id, status="KILLED")
            client.delete_run(run_id)
        except Exception as error:  # noqa: BLE001 - the new run stands whatever happens to an old one
            log.warning("MLflow run %s could not be superseded by %s (%s: %s); it is left as it is",
                        run_id, new_run_id, type(error).__name__, (str(error).splitlines() or [""])[0])
            continue
        log.info("MLflow run %s superseded by %s and deleted (the cell is retrained from scratch)",
                 run_id, new_run_id)


# --------------------------------------------------------------------------------------------------
# Workflow-side tracking: the experiment up front, evaluation curves and analysis artifacts afterwards.
# Each returns a small status dict (written by the workflow as the rule's output); MLflow failures are
# reported in it and logged as warnings, never raised, so a tracking outage cannot stop the pipeline.
# --------------------------------------------------------------------------------------------------

ANALYSIS_RUN_NAME = "analysis"

EXPERIMENT_TAGS = {
    # MLflow 3's UI reads an experiment's kind from this tag (mlflow/server/js: ExperimentKind);
    # "custom_model_development" is model training. The UI still opens #/experiments/<id> on the GenAI
    # traces overview, so the printed link is #/experiments/<id>/runs (balagg results).
    "mlflow.experimentKind": "custom_model_development",
    "mlflow.note.content": (
        "One run per grid cell, named model/dataset/aggregator/seedN and tagged model, dataset, aggregator, "
        "seed: filter with e.g. `tags.aggregator = 'balanced-agg'`, group the chart view by the aggregator "
        "tag to compare the aggregators' curves (train metrics per step, eval/<benchmark>/acc_at_8 per "
        "checkpoint). The view in the Views menu shows each cell's aggregator with its benchmark-mean peak and "
        "last Acc@8 and Best@8 (peak/acc_at_8, ...; Table 1's values for one seed). The run named analysis "
        "holds Table 1, Figures 1-3 and the diagnosis."
    ),
}
"""Tags set on every campaign's experiment (at creation and again on every setup)."""


HEADLINE_KINDS = ("peak", "last")
"""Peak: the maximum over evaluated checkpoints after step 0; last: the final evaluated step (Table 1)."""


def headline_metric(kind: str, metric: str) -> str:
    """MLflow name of a benchmark-mean headline value: ``peak/acc_at_8``, ``last/best_at_8``."""
    return f"{kind}/" + benchmarks.tracking_metric(benchmarks.MEAN, metric).rsplit("/", 1)[1]


HEADLINE_METRICS = tuple(headline_metric(kind, metric) for kind in HEADLINE_KINDS
                         for metric in benchmarks.eval_metrics(benchmarks.PAPER_SAMPLES)[:2])
"""The run metrics the runs table shows: peak and last benchmark-mean Acc@8 and Best@8 of the paper's n."""

RUNS_VIEW_ID = "balagg-cells"
"""The saved view of the runs table in every campaign's experiment (MLflow's "Views" menu; the link
``#/experiments/<id>/runs?viewStateShareKey=balagg-cells`` opens it): the aggregator and the headline
metrics as columns, every run in the charts."""

RUNS_VIEW_COLUMNS = ("tags.`aggregator`", *(f"metrics.`{name}`" for name in HEADLINE_METRICS))
"""The view's columns as MLflow's UI keys them (``<type>.`<key>```, its canonical sort keys), in order,
right after the run's name, which holds the model, dataset and seed (the UI's default Source, Models and
Dataset columns are left out: the Columns menu brings any of them back)."""

HEADLINE_DIGITS = 4
"""Digits of a headline value in MLflow, as Table 1 prints it (the files keep full precision)."""


def runs_view_tag(now_ms: int) -> tuple[str, str]:
    """The experiment tag holding :data:`RUNS_VIEW_ID`, in the envelope MLflow 3's "Save view" writes:
    ``mlflow.sharedViewState.<id>`` = ``{"name", "createdAt", "updatedAt", "state"}``, ``state`` the page
    state as JSON (its search facets and UI fields; the ones left out keep the UI's defaults)."""
    state = {"searchFilter": "", "orderByKey": "attributes.start_time", "orderByAsc": False,
             "lifecycleFilter": "Active", "selectedColumns": list(RUNS_VIEW_COLUMNS),
             "columnOrder": ["attributes.`Run Name`", *RUNS_VIEW_COLUMNS], "runsHiddenMode": "SHOW_ALL"}
    envelope = {"name": "Cells: aggregator, peak and last Acc@8 / Best@8", "createdAt": now_ms,
                "updatedAt": now_ms, "state": json.dumps(state)}
    return f"mlflow.sharedViewState.{RUNS_VIEW_ID}", json.dumps(envelope)


def _same_view(stored: str | None, wanted: str) -> bool:
    try:
        return json.loads(stored)["state"] == json.loads(wanted)["state"]
    except (TypeError, ValueError, KeyError):
        return False


def _connect(uri: str):
    """mlflow with ``uri`` set, or None (with a warning) when an HTTP server does not answer."""
    if not _reachable(uri):
        log.warning("MLflow tracking server %s is unreachable; tracking is off, files are kept", uri)
        return None
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    import mlflow

    mlflow.set_tracking_uri(uri)
    return mlflow


def _best_effort(what: str, uri: str, action) -> dict[str, Any]:
    mlflow = _connect(uri)
    if mlflow is None:
        return {"status": "skipped", "reason": f"{uri} unreachable", "tracking_uri": uri}
    try:
        return {"status": "ok", "tracking_uri": uri, **action(mlflow)}
    except Exception as error:  # noqa: BLE001 - tracking must never stop the pipeline
        log.warning("MLflow %s failed (%s: %s); files are kept", what, type(error).__name__, error)
        return {"status": "failed", "reason": f"{type(error).__name__}: {error}", "tracking_uri": uri}


SETUP_ATTEMPTS = 5


def sqlite_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for other stores)."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


@contextmanager
def _store_lock(uri: str, purpose: str) -> Iterator[None]:
    """Serialise one kind of store access between processes sharing a SQLite file: ``setup`` (its schema
    migration races) and ``write``, the read-then-log sections of eval and analysis logging (a job
    orphaned by a killed Snakemake and its rerun would otherwise both find a step missing and both log
    it). A lock file beside the database (``mlflow.db.<purpose>.lock``); nothing for a tracking server."""
    database = sqlite_file(uri)
    if database is None:
        yield
        return
    database.parent.mkdir(parents=True, exist_ok=True)
    with open(database.with_name(f"{database.name}.{purpose}.lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def setup_experiment(uri: str, experiment: str, artifact_location: str | None = None) -> dict[str, Any]:
    """Create the tracking store (its tables) and the campaign's experiment once, before any job logs.

    ``artifact_location`` (a folder) keeps the experiment's artifacts (Table 1, figures) there, e.g. under
    results/{campaign}/, instead of MLflow's default ``./mlruns/<id>``; an existing experiment keeps its
    own. A concurrent set-up of the same store (another campaign starting at the same moment) is waited
    for (a lock file beside a SQLite store) and any remaining race is retried, so the status reports
    the final state."""

    def action(mlflow):
        for attempt in range(1, SETUP_ATTEMPTS + 1):
            try:
                with _store_lock(uri, "setup"):
                    found = mlflow.get_experiment_by_name(experiment)
                    if found is None:
                        location = Path(artifact_location).resolve().as_uri() if artifact_location else None
                        try:
                            mlflow.create_experiment(experiment, artifact_location=location, tags=EXPERIMENT_TAGS)
                        except Exception:  # created meanwhile by a process that does not take the lock
                            if mlflow.get_experiment_by_name(experiment) is None:
                                raise
                        found = mlflow.get_experiment_by_name(experiment)
                    client = mlflow.MlflowClient()
                    for key, value in EXPERIMENT_TAGS.items():  # an experiment made before these tags existed
                        if found.tags.get(key) != value:
                            client.set_experiment_tag(found.experiment_id, key, value)
                    view_key, view = runs_view_tag(int(time.time() * 1000))
                    if not _same_view(found.tags.get(view_key), view):
                        client.set_experiment_tag(found.experiment_id, view_key, view)
                return {"experiment": experiment, "experiment_id": found.experiment_id,
                        "artifact_location": found.artifact_location, "attempts": attempt, "view": RUNS_VIEW_ID}
            except Exception as error:  # noqa: BLE001 - retried, then reported
                if attempt == SETUP_ATTEMPTS:
                    raise
                log.warning("MLflow set-up attempt %d failed (%s: %s); retrying", attempt, type(error).__name__,
                            error)
                time.sleep(0.5 * attempt)

    return _best_effort("setup", uri, action)


def cell_run_tags(cell: str, model: str, dataset: str, aggregator: str, seed: int, config_hash: str,
                  git_commit: str | None, **extra: str) -> dict[str, str]:
    """Tags of a cell's run (its name is ``cell``, model/dataset/aggregator/seedN): what the UI filters
    and groups by (``tags.aggregator = 'seq-agg'``); the training run and a late-made run share them."""
    return {"cell": cell, "model": model, "dataset": dataset, "aggregator": aggregator, "seed": str(seed),
            "config_hash": config_hash, "git_commit": str(git_commit), **extra}


def _cell_run_id(mlflow, manifest: dict[str, Any]) -> str:
    """The cell's training run: the manifest's, else the run tagged with its cell and config hash, else a
    new run with the training run's tags (training ran with tracking off, or an external checkpoint's
    record changed), which supersedes the cell's other live runs (:func:`supersede`), so the cell keeps
    one run."""
    if manifest.get("mlflow_run_id"):
        return manifest["mlflow_run_id"]
    experiment = manifest["config"]["mlflow_experiment"]
    mlflow.set_experiment(experiment)
    runs = mlflow.search_runs(
        experiment_names=[experiment], output_format="list",
        filter_string=f"tags.cell = '{manifest['cell']}' and tags.config_hash = '{manifest['config_hash']}'",
    )
    runs = [run for run in runs if SUPERSEDED_TAG not in run.data.tags]
    if runs:
        return runs[0].info.run_id
    tags = cell_run_tags(manifest["cell"], manifest["model"], manifest["dataset"], manifest["aggregator"],
                         manifest["seed"], manifest["config_hash"], manifest.get("git_commit"),
                         **manifest.get("tags", {}))  # an external checkpoint's (balagg.external_checkpoints.record)
    earlier = live_cell_runs(mlflow, experiment, manifest["cell"])
    with mlflow.start_run(run_name=manifest["cell"], tags=tags) as run:
        run_id = run.info.run_id
    supersede(mlflow.MlflowClient(), earlier, run_id)
    return run_id


def eval_metrics(curve_rows: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """MLflow metric name (:func:`balagg.benchmarks.tracking_metric`) -> value per training step from
    ``eval/curve.csv`` rows (finite values only): :func:`balagg.benchmarks.eval_metrics` of the curve's n."""
    by_step: dict[int, dict[str, float]] = {}
    n = benchmarks.samples_of_columns(curve_rows[0]) if curve_rows else None
    for row in curve_rows:
        step = int(row["step"])
        for metric in benchmarks.eval_metrics(n) if n is not None else ():
            value = row.get(metric)
            if value not in (None, "") and math.isfinite(float(value)):
                by_step.setdefault(step, {})[benchmarks.tracking_metric(row["benchmark"], metric)] = float(value)
    return by_step


DATASET_DIGEST_CHARS = 12
"""Hex characters of a dataset input's digest (the sha256 of its file; MLflow keeps at most 36)."""


def dataset_inputs(train_files: list[str | os.PathLike], benchmark_files: list[str | os.PathLike],
                   fetch: dict[str, Any] | None) -> list[dict[str, Any]]:
    """What a cell read, as MLflow dataset inputs (the runs table's Dataset column): each training set
    (context ``training``) and benchmark (``evaluation``) file, named as the campaign names it (the file's
    name), with the sha256 of its content as digest and its source: the hub repository the prepare-data
    report beside the file names, at the commit ``fetch`` (fetch.json) recorded for it (None when it was
    not fetched), or, for a local or tiny-world source, the file itself. A missing file is skipped with a
    warning (MLflow is a window onto the files, never a reason to stop)."""
    from balagg.hub import is_hub_id

    revisions = {repo["repo_id"]: repo.get("commit") for repo in (fetch or {}).get("repos", [])
                 if repo.get("repo_type") == "dataset"}
    described = []
    for context, files in (("training", train_files), ("evaluation", benchmark_files)):
        for file in files:
            path = Path(file)
            if not path.is_file():
                log.warning("%s: no such file; not logged as a dataset input of the run", path)
                continue
            name = path.name.removesuffix(dataset_filename(""))
            report = path.parent / Path(data_report_file("train", name)).name
            location = json.loads(report.read_text()).get("location") if report.is_file() else None
            entry = {"name": name, "context": context, "file": str(path.resolve()),
                     "digest": hashlib.sha256(path.read_bytes()).hexdigest()[:DATASET_DIGEST_CHARS]}
            if location and is_hub_id(location):
                entry |= {"repo_id": location, "revision": revisions.get(location)}
            described.append(entry)
    return described


def _log_dataset_inputs(mlflow, run_id: str, inputs: list[dict[str, Any]]) -> None:
    """``inputs`` (:func:`dataset_inputs`) into the run, each (name, digest, context) once."""
    from mlflow.data.huggingface_dataset_source import HuggingFaceDatasetSource
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.data.sources import LocalArtifactDatasetSource
    from mlflow.entities import DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    client = mlflow.MlflowClient()
    held = {(item.dataset.name, item.dataset.digest, tag.value) for item in client.get_run(run_id).inputs.dataset_inputs
            for tag in item.tags if tag.key == MLFLOW_DATASET_CONTEXT}
    new = []
    for entry in inputs:
        if (entry["name"], entry["digest"], entry["context"]) in held:
            continue
        source = (HuggingFaceDatasetSource(path=entry["repo_id"], revision=entry["revision"]) if "repo_id" in entry
                  else LocalArtifactDatasetSource(entry["file"]))
        dataset = MetaDataset(source, name=entry["name"], digest=entry["digest"])
        new.append(DatasetInput(dataset._to_mlflow_entity(), [InputTag(MLFLOW_DATASET_CONTEXT, entry["context"])]))
    if new:
        client.log_inputs(run_id, datasets=new)


def log_eval_curve(uri: str, manifest: dict[str, Any], curve_rows: list[dict[str, Any]],
                   inputs: list[dict[str, Any]] = ()) -> dict[str, Any]:
    """Evaluation metrics into the cell's run, each at its training step, each point once (also against a
    concurrent call for the same store: :func:`_store_lock`), and the cell's ``inputs``
    (:func:`dataset_inputs`) as the run's dataset inputs, each once."""

    def action(mlflow):
        with _store_lock(uri, "write"):
            status = _log_eval_points(mlflow, manifest, curve_rows)
            _log_dataset_inputs(mlflow, status["run_id"], list(inputs))
            return status | {"datasets": [entry["name"] for entry in inputs]}

    return _best_effort("eval logging", uri, action)


def final_step(manifest: dict[str, Any]) -> int | None:
    """The last checkpoint step of a cell's manifest (or of an external checkpoint's record), if it says."""
    steps = [int(c["step"]) for c in manifest.get("checkpoints") or []]
    if not steps and isinstance(manifest.get("steps"), dict):
        steps = [int(step) for step in manifest["steps"]]
    return max(steps) if steps else None


def headline_values(curve_rows: list[dict[str, Any]], last_step: int | None = None) -> dict[str, float]:
    """:data:`HEADLINE_METRICS` of one cell from its ``eval/curve.csv`` rows (the rows of the mean over the
    campaign's benchmarks), as Table 1 computes them for one seed: the peak over steps after 0 (over every
    step if 0 is the only one, as for a checkpoint evaluated once) and the value at ``last_step`` (default:
    the last evaluated step), left out when that step is not evaluated, as is a metric without a finite
    value."""
    n = benchmarks.samples_of_columns(curve_rows[0]) if curve_rows else None
    if n != benchmarks.PAPER_SAMPLES:
        return {}
    mean = {int(row["step"]): row for row in curve_rows if row["benchmark"] == benchmarks.MEAN}
    values = {}
    for metric in benchmarks.eval_metrics(n)[:2]:
        series = {step: float(row[metric]) for step, row in mean.items()
                  if row.get(metric) not in (None, "") and math.isfinite(float(row[metric]))}
        trained = [value for step, value in series.items() if step > 0] or list(series.values())
        if trained:
            values[headline_metric("peak", metric)] = round(max(trained), HEADLINE_DIGITS)
        last = last_step if last_step is not None else max(mean, default=None)
        if last in series:
            values[headline_metric("last", metric)] = round(series[last], HEADLINE_DIGITS)
    return values


def _log_eval_points(mlflow, manifest: dict[str, Any], curve_rows: list[dict[str, Any]]) -> dict[str, Any]:
    run_id = _cell_run_id(mlflow, manifest)
    client = mlflow.MlflowClient()
    metrics = eval_metrics(curve_rows)
    logged: dict[str, set[int]] = {}  # a rerun attaches to the run without doubling its points
    for step, values in metrics.items():
        for key, value in values.items():
            if key not in logged:
                logged[key] = {point.step for point in client.get_metric_history(run_id, key)}
            if step not in logged[key]:
                client.log_metric(run_id, key, value, step=step)
    # the headline values at step 0, logged again only when they change (a re-evaluation): the runs
    # table shows a metric's latest point, and a later point at step 0 is the latest
    held = client.get_run(run_id).data.metrics
    for key, value in headline_values(curve_rows, final_step(manifest)).items():
        if held.get(key) != value:
            client.log_metric(run_id, key, value, step=0)
    return {"run_id": run_id, "steps": sorted(metrics)}


def log_analysis(uri: str, experiment: str, files: list[str]) -> dict[str, Any]:
    """Table 1, the figures and the diagnosis as artifacts of the campaign's one analysis run (one, also
    against a concurrent call: :func:`_store_lock`)."""

    def action(mlflow):
        with _store_lock(uri, "write"):
            return _log_analysis_artifacts(mlflow, experiment, files)

    return _best_effort("analysis logging", uri, action)


def _log_analysis_artifacts(mlflow, experiment: str, files: list[str]) -> dict[str, Any]:
    mlflow.set_experiment(experiment)
    runs = mlflow.search_runs(experiment_names=[experiment], output_format="list",
                              filter_string=f"tags.kind = '{ANALYSIS_RUN_NAME}'")
    run_id = runs[0].info.run_id if runs else None
    with mlflow.start_run(run_id=run_id, run_name=ANALYSIS_RUN_NAME, tags={"kind": ANALYSIS_RUN_NAME}) as run:
        for path in files:
            mlflow.log_artifact(path)
        return {"run_id": run.info.run_id, "artifacts": [os.path.basename(p) for p in files]}
