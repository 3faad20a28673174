"""End to end: ``python -m balagg train`` on a tiny model and a tiny JSONL dataset; determinism; kill -9 and
resume; MLflow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

pytest.importorskip("trl")
pytest.importorskip("math_verify")  # the evaluation's pinned verifier (pyproject dependency)

from balagg.train.callbacks import WALL_CLOCK_KEYS  # noqa: E402
from balagg.train.config import CellConfig  # noqa: E402
from balagg.train.files import CellDir, read_metrics  # noqa: E402

TOTAL_STEPS = 8
REQUIRED_KEYS = ("step", "reward_mean", "accuracy", "pg_loss", "entropy", "clip_frac_low", "clip_frac_high",
                 "clip_frac_region", "grad_norm", "lr", "tokens_per_s", "step_seconds", "len_mean", "len_std",
                 "len_cv", "len_cv_within_group", "len_pos_mean", "len_neg_mean", "len_gap", "mixed_group_frac",
                 "side_weight/token-agg/pos", "side_weight/balanced-agg/neg", "side_weight/dr-grpo/pos")


@pytest.fixture(scope="module")
def cell_file(tmp_path_factory):
    import torch

    from tiny_cell import addition_rows, write_cell_inputs

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("cell")
    too_long = {"id": "too-long", "problem": "9" * 200, "answer": "9", "source": "test"}  # skipped
    cell = {
        **write_cell_inputs(root, [*addition_rows(), too_long]), "seed": 7, "learning_rate": 1e-3,
        "warmup_steps": 2, "num_generations": 4, "prompts_per_step": 2, "mini_batches": 1, "micro_batch_size": 4,
        "num_iterations": 2, "max_prompt_length": 64, "max_completion_length": 16, "overlong_buffer_len": 4,
        "total_steps": TOTAL_STEPS, "save_every": 2, "keep_checkpoints": 2, "eval_steps": [3], "eval_every": 4,
        "verifier_workers": 1,
    }
    path = root / "cell.json"
    path.write_text(json.dumps(cell))
    return path


def train_command(cell: Path, workdir: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "balagg", "train", "--cell", str(cell), "--workdir", str(workdir), "--out", str(out)]


def kill_9_after_steps(cell: Path, workdir: Path, manifest: Path, steps: int, timeout: float) -> None:
    """Train ``cell`` and kill -9 it once its metrics.jsonl has ``steps`` lines; the run must not have
    ended first (nor written its manifest) and must log a step within ``timeout`` s."""
    process = subprocess.Popen(train_command(cell, workdir, manifest), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    try:
        while len(read_metrics(workdir / "metrics.jsonl")) < steps:
            assert process.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "the run made no progress"
            time.sleep(0.01)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL and not manifest.exists()


def comparable(rows):
    return [{k: v for k, v in row.items() if k not in WALL_CLOCK_KEYS} for row in rows]


@pytest.fixture(scope="module")
def reference_run(cell_file, tmp_path_factory):
    """One uninterrupted CLI run, logging to a sqlite MLflow store."""
    root = tmp_path_factory.mktemp("reference")
    data = json.loads(cell_file.read_text())
    data["mlflow_tracking_uri"] = f"sqlite:///{root / 'mlflow.db'}"
    cell = root / "cell.json"
    cell.write_text(json.dumps(data))
    result = subprocess.run(train_command(cell, root / "train", root / "manifest.json"),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return root


@pytest.mark.slow
def test_cli_trains_a_cell_end_to_end(reference_run):
    workdir = reference_run / "train"
    rows = read_metrics(workdir / "metrics.jsonl")
    assert [row["step"] for row in rows] == list(range(1, TOTAL_STEPS + 1))
    for key in REQUIRED_KEYS:
        assert key in rows[0], key
    assert all(row["pg_loss"] is not None and row["grad_norm"] > 0 for row in rows)
    assert all(0 <= row["accuracy"] <= 1 and row["len_mean"] > 0 for row in rows)
    # balanced-agg gives each mixed group total token weight 1 and a group without signal 0
    assert all(row["token_weight_sum"] == pytest.approx(row["mixed_group_frac"]) for row in rows)

    manifest = json.loads((reference_run / "manifest.json").read_text())
    steps = [c["step"] for c in manifest["checkpoints"]]
    assert steps == [3, 4, 8]  # step 0 is the initial model: evaluated from its own folder, no copy
    from balagg.tinyworld.model import load_checkpoint

    model, tokenizer = load_checkpoint(manifest["checkpoints"][-1]["path"])
    assert tokenizer.decode(tokenizer("1+2=")["input_ids"]) == "1+2="
    assert manifest["final_metrics"]["step"] == TOTAL_STEPS
    assert manifest["config_hash"] == CellConfig.load(reference_run / "cell.json").config_hash()
    assert manifest["versions"]["trl"] == "1.16.0"
    assert manifest["aggregator"] == "balanced-agg" and manifest["scope"] == "group"
    # the finished cell's resumable state is removed (its evaluation checkpoints are what it is evaluated on);
    # trained.json records the step the training finished at
    assert not (workdir / "state").exists() and not list(workdir.glob(".state*"))
    assert json.loads((workdir / "trained.json").read_text()) == {"step": TOTAL_STEPS}
    assert [step for step, _ in CellDir(workdir).eval_checkpoints()] == [3, 4, 8]

    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{reference_run / 'mlflow.db'}")
    run = client.get_run(manifest["mlflow_run_id"])
    assert run.data.tags["aggregator"] == "balanced-agg" and run.data.tags["seed"] == "7"
    assert run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "len_mean")
    assert sorted(m.step for m in history) == list(range(1, TOTAL_STEPS + 1))


@pytest.mark.slow
def test_same_seed_gives_identical_metrics(reference_run, cell_file, tmp_path):
    from balagg.train.run import run_cell

    run_cell(CellConfig.load(cell_file), tmp_path / "train", tmp_path / "manifest.json")
    again = read_metrics(tmp_path / "train" / "metrics.jsonl")
    reference = read_metrics(reference_run / "train" / "metrics.jsonl")
    assert comparable(again) == comparable(reference)


@pytest.mark.slow
def test_kill_9_then_resume_matches_uninterrupted_run(reference_run, cell_file, tmp_path):
    workdir, manifest = tmp_path / "train", tmp_path / "manifest.json"
    kill_9_after_steps(cell_file, workdir, manifest, steps=3, timeout=240)  # past checkpoint-2, inside the next cycle
    assert len(read_metrics(workdir / "metrics.jsonl")) < TOTAL_STEPS

    result = subprocess.run(train_command(cell_file, workdir, manifest), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resuming from" in (workdir / "train.log").read_text()
    resumed = read_metrics(workdir / "metrics.jsonl")
    reference = read_metrics(reference_run / "train" / "metrics.jsonl")
    assert comparable(resumed) == comparable(reference)
    assert json.loads(manifest.read_text())["final_metrics"]["step"] == TOTAL_STEPS


@pytest.mark.slow
def test_time_limit_and_sigusr1_stop_at_resumable_checkpoints_and_resume_exactly_once(reference_run, cell_file,
                                                                                     tmp_path):
    """A job out of time stops after its first cycle, one signalled stops at the next cycle boundary, each
    exits 75 without a manifest; the third attempt finishes; metrics and MLflow points equal an
    uninterrupted run's, each step once."""
    from balagg.train.deadline import EXIT_RESUMABLE, START_ENV

    data = json.loads(cell_file.read_text())
    data |= {"time_limit_minutes": 60, "mlflow_tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    cell = tmp_path / "cell.json"
    cell.write_text(json.dumps(data))
    workdir, manifest = tmp_path / "train", tmp_path / "manifest.json"
    command = train_command(cell, workdir, manifest)

    late = {**os.environ, START_ENV: str(time.time() - 3600)}  # the job has used its hour already
    first = subprocess.run(command, capture_output=True, text=True, timeout=300, env=late)
    assert first.returncode == EXIT_RESUMABLE, first.stderr[-3000:]
    assert "training stopped at step 2 (time limit" in first.stderr
    assert json.loads((workdir / "stopped.json").read_text())["step"] == 2 and not manifest.exists()
    assert [row["step"] for row in read_metrics(workdir / "metrics.jsonl")] == [1, 2]
    # what a manifest reports is on disk with the first resumable checkpoint, not only at the end: a job
    # killed after its last checkpoint (its rerun writes the manifest only) loses none of it
    for name in ("context.json", "distributed.json", "verifier.json"):
        assert (workdir / name).is_file(), name
    assert json.loads((workdir / "verifier.json").read_text())["timeouts"] == 0

    env = {k: v for k, v in os.environ.items() if k != START_ENV}
    second = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 240
    while len(read_metrics(workdir / "metrics.jsonl")) < 3:
        assert second.poll() is None and time.monotonic() < deadline, second.stderr.read()[-3000:]
        time.sleep(0.01)
    second.send_signal(signal.SIGUSR1)  # a user's kill -USR1 (or scancel --signal=USR1) reaches the launcher
    _, err = second.communicate(timeout=300)
    assert second.returncode == EXIT_RESUMABLE, err[-3000:]
    stopped = json.loads((workdir / "stopped.json").read_text())
    assert stopped["step"] in (4, 6) and "signal SIGUSR1" in err and not manifest.exists()
    assert stopped["cycle_seconds"] > 0 and stopped["save_seconds"] > 0  # what the next attempt checks it has time for

    third = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert third.returncode == 0, third.stderr[-3000:]
    resumed = read_metrics(workdir / "metrics.jsonl")
    reference = read_metrics(reference_run / "train" / "metrics.jsonl")
    assert comparable(resumed) == comparable(reference)
    assert not (workdir / "stopped.json").exists()

    import mlflow

    client = mlflow.MlflowClient(tracking_uri=data["mlflow_tracking_uri"])
    run_id = json.loads(manifest.read_text())["mlflow_run_id"]
    runs = client.search_runs([client.get_run(run_id).info.experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    for key in ("pg_loss", "len_mean", "reward_mean"):
        assert [p.step for p in client.get_metric_history(run_id, key)] == list(range(1, TOTAL_STEPS + 1)), key

    # a rerun of the finished cell, whose resumable state is gone, writes the manifest only: no step trained
    # again, no new point, no new checkpoint
    assert not (workdir / "state").exists()
    manifest.unlink()
    again = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(manifest.read_text())["steps"] == TOTAL_STEPS
    assert comparable(read_metrics(workdir / "metrics.jsonl")) == comparable(reference)
    assert not (workdir / "state").exists() and "writing its manifest only" in (workdir / "train.log").read_text()
    assert len(client.get_metric_history(run_id, "pg_loss")) == TOTAL_STEPS


def test_hub_telemetry_is_off_although_huggingface_hub_was_imported_first(monkeypatch):
    from huggingface_hub import constants
    from huggingface_hub.utils import _telemetry, send_telemetry

    from balagg.train.run import disable_hub_telemetry

    pings = []
    monkeypatch.setattr(_telemetry, "_start_telemetry_thread", lambda: pings.append(1))
    monkeypatch.setattr(_telemetry, "_TELEMETRY_QUEUE", type("Queue", (), {"put": lambda self, item: None})())
    monkeypatch.delenv("HF_HUB_DISABLE_TELEMETRY", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", False)  # as read at import without the variable
    send_telemetry("balagg-test")
    assert pings == [1]  # what TRL's trainer would send
    disable_hub_telemetry()
    send_telemetry("balagg-test")
    assert constants.HF_HUB_DISABLE_TELEMETRY is True and pings == [1]
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "0")  # a user's explicit choice stands
    disable_hub_telemetry()
    assert constants.HF_HUB_DISABLE_TELEMETRY is False
