"""Exactly-once training without a model: the work-directory lock, the launcher owning its children,
the metrics.jsonl cut-back, a finished cell's rerun, the time-limit decision and MLflow idempotence."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from balagg.train.files import CellDir, WorkdirBusy, exclusive, read_metrics, truncate_metrics

SRC = str(Path(__file__).resolve().parents[1] / "src")


def test_metrics_cut_back_keeps_steps_up_to_the_checkpoint_and_drops_a_torn_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "pg_loss": 0.1 * s}) + "\n" for s in range(1, 6)]
    path.write_text("".join(lines) + '{"step": 6, "pg_lo')  # kill -9 in the middle of an append
    assert [row["step"] for row in read_metrics(path)] == [1, 2, 3, 4, 5]
    kept = truncate_metrics(path, 3)
    assert [row["step"] for row in kept] == [1, 2, 3]
    assert path.read_text() == "".join(lines[:3])


def test_a_second_trainer_on_the_same_folder_is_refused_naming_the_holder(tmp_path):
    with exclusive(tmp_path / "train"):
        with pytest.raises(WorkdirBusy, match=rf"{tmp_path / 'train'} is in use by another trainer \(pid {os.getpid()}"):
            with exclusive(tmp_path / "train"):
                pass
    with exclusive(tmp_path / "train"):  # released at the end of the block
        pass


def _wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _launcher(tmp_path: Path, child_code: str) -> subprocess.Popen:
    """A launcher process running ``child_code`` as its trainer child through run_launched."""
    code = textwrap.dedent(f"""
        import sys
        from balagg.train.launch import run_launched
        sys.exit(run_launched([sys.executable, "-c", {child_code!r}], {str(tmp_path / 'train')!r}))
    """)
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)


CHILD = ("import os, pathlib, time; pathlib.Path({pidfile!r}).write_text(str(os.getpid())); time.sleep(120)")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_kill_9_of_the_launcher_ends_its_trainer_and_a_second_launcher_is_refused_meanwhile(tmp_path):
    pidfile = tmp_path / "child.pid"
    launcher = _launcher(tmp_path, CHILD.format(pidfile=str(pidfile)))
    try:
        assert _wait_for(pidfile.exists), launcher.stderr.read() if launcher.poll() is not None else "no child"
        child = int(pidfile.read_text())
        second = _launcher(tmp_path, "print('must not run')")
        _, err = second.communicate(timeout=60)
        assert second.returncode != 0 and "is in use by another trainer" in err
    finally:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
    assert _wait_for(lambda: not _alive(child)), "the trainer outlived its launcher"
    with exclusive(tmp_path / "train"):  # the lock went with them
        pass


WORKER = """
import os, pathlib, sys, time
from balagg.train.files import die_with_launcher
die_with_launcher()  # what `python -m balagg train-worker` does first
pathlib.Path(sys.argv[1], "worker-" + os.environ["RANK"]).write_text(str(os.getpid()))
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_kill_9_of_the_launcher_ends_every_process_accelerate_started(tmp_path):
    """The launcher runs `accelerate launch` with the paper's FSDP2 config and 2 processes (on a CPU
    accelerate falls back to MULTI_CPU, as in the rehearsal): kill -9 of the launcher ends accelerate
    and both of its worker processes."""
    pytest.importorskip("accelerate")
    (tmp_path / "worker.py").write_text(WORKER)
    fsdp2 = Path(SRC).parent / "configs" / "accelerate" / "fsdp2.yaml"  # the paper's; MULTI_CPU on a CPU
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--config_file",
               str(fsdp2), str(tmp_path / "worker.py"), str(tmp_path)]  # as launch_command builds it
    code = f"import sys\nfrom balagg.train.launch import run_launched\nsys.exit(run_launched({command!r}, {str(tmp_path / 'train')!r}))"
    launcher = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": SRC},
                                stderr=subprocess.PIPE, text=True)
    pidfiles = [tmp_path / "worker-0", tmp_path / "worker-1"]
    try:
        assert _wait_for(lambda: all(p.exists() for p in pidfiles), timeout=120), (
            launcher.stderr.read() if launcher.poll() is not None else "no workers")
        workers = [int(p.read_text()) for p in pidfiles]
        assert all(_alive(pid) for pid in workers)
    finally:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
    assert _wait_for(lambda: not any(_alive(pid) for pid in workers), timeout=30), "a worker outlived the launcher"

    def lock_is_free() -> bool:  # accelerate's own process (which holds it) may take a moment longer to go
        try:
            with exclusive(tmp_path / "train"):
                return True
        except WorkdirBusy:
            return False

    assert _wait_for(lock_is_free, timeout=30), "the lock outlived the launcher"


def test_sigterm_to_the_launcher_reaches_the_trainer_and_its_status_comes_back(tmp_path):
    pidfile = tmp_path / "child.pid"
    child_code = ("import os, pathlib, signal, sys, time\n"
                  "signal.signal(signal.SIGTERM, lambda n, f: sys.exit(75))\n"
                  f"pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid()))\n"
                  "time.sleep(120)")
    launcher = _launcher(tmp_path, child_code)
    assert _wait_for(pidfile.exists)
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=30) == 75


def _fake_finished_cell(tmp_path: Path, total: int) -> tuple[object, CellDir]:
    from balagg.train.config import CellConfig

    workdir = CellDir(tmp_path / "train")
    state = workdir.state / f"checkpoint-{total}"
    state.mkdir(parents=True)
    (state / "trainer_state.json").write_text(json.dumps({"global_step": total}))
    for step in (0, total):
        workdir.checkpoint(step).mkdir(parents=True)
    workdir.metrics.write_text("".join(json.dumps({"step": s, "pg_loss": 0.0}) + "\n" for s in range(1, total + 2)))
    cell = CellConfig(model=str(tmp_path / "no-model"), train_files=[str(tmp_path / "train.jsonl")],
                      aggregator="balanced-agg", seed=0, total_steps=total, save_every=2, mini_batches=1,
                      prompts_per_step=2, num_generations=4, micro_batch_size=8, max_completion_length=16,
                      overlong_buffer_len=4, eval_every=total)
    return cell, workdir


def test_rerun_of_a_finished_cell_writes_only_its_manifest(tmp_path):
    from balagg.train.run import run_cell

    cell, workdir = _fake_finished_cell(tmp_path, total=4)  # a 5th line: a step logged after the last save
    before = {p: p.stat().st_mtime_ns for p in workdir.root.rglob("*")
              if p.is_file() and p != workdir.metrics and workdir.state not in p.parents}
    manifest = run_cell(cell, workdir.root, tmp_path / "manifest.json")  # no model exists: nothing is built
    assert manifest["steps"] == 4 and [c["step"] for c in manifest["checkpoints"]] == [0, 4]
    assert [row["step"] for row in read_metrics(workdir.metrics)] == [1, 2, 3, 4]
    assert json.loads((tmp_path / "manifest.json").read_text())["final_metrics"]["step"] == 4
    after = {p: p.stat().st_mtime_ns for p in before}
    assert after == before  # no checkpoint written
    # the finished cell's resumable state is removed, the step it finished at recorded
    assert not workdir.state.exists() and workdir.trained_step() == 4


@pytest.mark.parametrize("moment", ["before the manifest", "inside the removal", "after the rename"])
def test_a_kill_while_the_state_is_removed_trains_nothing_again(tmp_path, moment):
    """What a kill -9 can leave of the removal (balagg.train.run): trained.json and the whole state (killed
    before the manifest), the last checkpoint half deleted so that an older one looks like the newest
    complete one, or the state renamed aside. The rerun trains nothing (no model exists here: it would fail
    building one), writes the manifest and leaves no state."""
    from balagg.train.run import run_cell

    cell, workdir = _fake_finished_cell(tmp_path, total=4)
    older = workdir.state / "checkpoint-2"
    older.mkdir()
    (older / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    workdir.trained.write_text(json.dumps({"step": 4}))
    if moment == "inside the removal":
        (workdir.state / "checkpoint-4" / "trainer_state.json").unlink()
        assert workdir.latest_resumable() == older
    elif moment == "after the rename":
        workdir.state.rename(workdir.root / ".state.removing")
    manifest = run_cell(cell, workdir.root, tmp_path / "manifest.json")
    assert manifest["steps"] == 4 and [row["step"] for row in read_metrics(workdir.metrics)] == [1, 2, 3, 4]
    assert not workdir.state.exists() and not (workdir.root / ".state.removing").exists()
    assert workdir.checkpoint(4).is_dir()


def test_the_state_stays_while_an_evaluation_checkpoint_is_missing_or_when_asked(tmp_path, caplog):
    from dataclasses import replace

    from balagg.train.run import run_cell

    cell, workdir = _fake_finished_cell(tmp_path, total=4)
    workdir.checkpoint(4).rmdir()
    run_cell(cell, workdir.root, tmp_path / "manifest.json")
    assert (workdir.state / "checkpoint-4").is_dir() and "steps [4] are missing" in caplog.text
    workdir.checkpoint(4).mkdir()
    run_cell(replace(cell, keep_resumable_state=True), workdir.root, tmp_path / "manifest.json")
    assert (workdir.state / "checkpoint-4").is_dir()
    run_cell(cell, workdir.root, tmp_path / "manifest.json")
    assert not workdir.state.exists()


def test_train_job_removes_the_derived_outputs_before_training(tmp_path):
    from balagg.train.run import run_cell

    cell, workdir = _fake_finished_cell(tmp_path, total=2)
    stale = [tmp_path / "eval", tmp_path / "analysis" / "table1.csv"]
    (tmp_path / "eval" / "step-000002").mkdir(parents=True)
    stale[1].parent.mkdir()
    stale[1].write_text("old")
    run_cell(cell, workdir.root, tmp_path / "manifest.json", invalidate=[str(p) for p in stale])
    assert not any(p.exists() for p in stale)


# ---- the time-limit decision -------------------------------------------------------------------------

class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _steps(guard, clock, seconds_per_step: float, steps: int, max_steps: int = 100):
    """Run the guard's hooks for ``steps`` optimiser steps; returns the step it stopped at (or None)."""
    state = SimpleNamespace(global_step=0, max_steps=max_steps)
    for _ in range(steps):
        control = SimpleNamespace(should_save=False, should_training_stop=False)
        guard.on_step_begin(None, state, control)
        clock.now += seconds_per_step
        state.global_step += 1
        guard.on_step_end(None, state, control)
        if control.should_save:
            clock.now += 5.0
            guard.on_save(None, state, control)
        if control.should_training_stop:
            assert control.should_save and state.global_step % guard.cycle == 0
            return state.global_step
    return None


def test_time_limit_stops_at_the_last_cycle_boundary_that_leaves_room_for_a_cycle_and_a_save():
    from balagg.train.deadline import StopGuard, margin_seconds

    clock = Clock(1000.0)
    guard = StopGuard(cycle=4, time_limit_minutes=10, start_time=1000.0, clock=clock)
    assert margin_seconds(600) == 30.0
    stopped = _steps(guard, clock, seconds_per_step=10.0, steps=100)
    # 600 s: after step 48 (480 s) one cycle (40 s) + a save (120 s until measured) + 30 s margin is 670 > 600
    # -- it stops at the first boundary where  now + 40 + 120 + 30 > 1600, i.e. now > 1410: step 44
    assert stopped == 44 and "time limit" in guard.stopped
    assert clock.now - 1000.0 < 600


def test_no_limit_never_stops_and_a_signal_stops_at_the_next_cycle_boundary():
    from balagg.train.deadline import StopGuard

    clock = Clock(0.0)
    guard = StopGuard(cycle=3, time_limit_minutes=None, clock=clock)
    assert _steps(guard, clock, 1.0, steps=7) is None
    guard._on_signal(signal.SIGUSR1, None)
    assert _steps(guard, clock, 1.0, steps=5) == 3 and guard.stopped == "signal SIGUSR1"


@pytest.fixture
def no_job_env(monkeypatch):
    from balagg.train.deadline import DEADLINE_ENV, START_ENV

    for name in (START_ENV, DEADLINE_ENV, "SLURM_JOB_START_TIME", "SLURM_JOB_END_TIME", "SLURM_JOB_ID"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_deadline_counts_from_the_jobs_real_start(no_job_env):
    """Slurm's start of the job wins over the launcher's own (which misses what ran before it in the job:
    Snakemake, the environment, srun); the launcher's is the fallback outside Slurm."""
    from balagg.train.deadline import START_ENV, StopGuard

    no_job_env.setenv(START_ENV, "1000.5")
    assert StopGuard(2, 1).deadline == 1060.5
    no_job_env.setenv("SLURM_JOB_START_TIME", "500")
    assert StopGuard(2, 1).deadline == 560.0


def test_under_slurm_the_deadline_is_the_jobs_end_as_slurm_holds_it(no_job_env, tmp_path):
    """A train job run by Snakemake's Slurm plugin sees no SLURM_JOB_START_TIME (the plugin's srun drops it):
    squeue's time left of $SLURM_JOB_ID gives the end, also when the limit was changed; the earlier of it and
    start + limit counts; the launcher hands the result to its processes."""
    import stat

    from balagg.train.deadline import DEADLINE_ENV, START_ENV, StopGuard, job_deadline, parse_slurm_duration

    assert parse_slurm_duration("1-02:03:04") == 93784 and parse_slurm_duration("05:06") == 306
    assert parse_slurm_duration("59") == 59 and parse_slurm_duration("UNLIMITED") is None
    squeue = tmp_path / "squeue"
    squeue.write_text("#!/bin/sh\n[ \"$*\" = \"--noheader --jobs 42 --format %L\" ] && echo 0:40:00\n")
    squeue.chmod(squeue.stat().st_mode | stat.S_IXUSR)
    no_job_env.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    no_job_env.setenv("SLURM_JOB_ID", "42")
    # the job started at 1800 under a 60-minute limit; its launcher 700 s later
    no_job_env.setenv(START_ENV, "2500")
    clock = Clock(3000.0)
    assert StopGuard(2, 60, clock=clock).deadline == 3000.0 + 2400  # 40 min left: 5400, before 2500 + 3600
    assert job_deadline(3600.0, clock=clock, time_left=lambda job: None) == 6100.0  # squeue silent
    no_job_env.setenv("SLURM_JOB_END_TIME", "3100")
    assert job_deadline(3600.0, clock=clock) == 3100.0
    no_job_env.setenv(DEADLINE_ENV, "2900.5")  # what the launcher worked out once
    assert StopGuard(2, 60, clock=clock).deadline == 2900.5


def test_the_next_cycle_is_predicted_from_recent_cycles_with_the_saves():
    """Responses grow longer during RL training, so cycles do too (here a step takes 5 s + 1 s per step
    trained, a cycle is 4 steps, a resumable save after every cycle takes 120 s, the limit is 30 min). The
    attempt's mean step predicts the next cycle short and leaves out the save due at the boundary: that
    stop's save would end past the limit. The longest recent cycle plus the saves (each as long as the
    longest measured) stops in time."""
    from balagg.train.deadline import StopGuard

    clock = Clock(0.0)
    guard = StopGuard(cycle=4, time_limit_minutes=30, start_time=0.0, clock=clock)
    state, save_seconds, stopped = SimpleNamespace(global_step=0, max_steps=1000), 120.0, None
    while stopped is None:
        control = SimpleNamespace(should_save=False, should_training_stop=False)
        guard.on_step_begin(None, state, control)
        clock.now += 5.0 + state.global_step
        state.global_step += 1
        control.should_save = state.global_step % 4 == 0  # as the Trainer sets it before the callbacks
        guard.on_step_end(None, state, control)
        if control.should_save:
            clock.now += save_seconds
            guard.on_save(None, state, control)
        if control.should_training_stop:
            stopped = state.global_step
        assert clock.now <= 1800.0, f"step {state.global_step} ended past the limit"
    assert "time limit" in guard.stopped and stopped == 32
    # one more cycle and its save would not have fitted
    assert clock.now + sum(5.0 + step for step in range(stopped, stopped + 4)) + save_seconds > 1800.0 - 90.0
    assert guard.next_cycle_seconds() == sum(5.0 + step for step in range(stopped - 4, stopped))


def test_a_retry_inside_the_stopped_job_starts_no_cycle_it_cannot_finish(no_job_env, tmp_path):
    """Snakemake's Slurm plugin runs a rule's own retries inside the same Slurm job: the retry of a job
    stopped at its limit finds minutes left. With less than the stopped attempt's cycle and two saves left
    the launcher starts nothing (status 75, stopped.json kept for the next job); with enough it trains."""
    from balagg.train.deadline import DEADLINE_ENV, EXIT_RESUMABLE, too_late_to_start
    from balagg.train.launch import launch

    stopped = {"step": 6, "reason": "time limit", "cycle_seconds": 600.0, "save_seconds": 100.0}
    clock = Clock(10_000.0)
    assert "not started" in too_late_to_start(stopped, 10_000.0 + 700, 3600.0, clock)  # 600 + 200 + 180 > 700
    assert too_late_to_start(stopped, 10_000.0 + 1000, 3600.0, clock) is None
    assert too_late_to_start(None, 10_000.0, 3600.0, clock) is None  # a first attempt always trains a cycle
    # a limit shorter than a cycle with two saves and the margin: a fresh job still starts (refusing would
    # spend every retry), a job with less than its whole limit left does not
    assert too_late_to_start(stopped, 10_000.0 + 780, 800.0, clock) is None  # 780 >= 800 - 40, below 600 + 200 + 40
    assert "not started" in too_late_to_start(stopped, 10_000.0 + 700, 800.0, clock)
    assert too_late_to_start({"step": 6, "reason": "signal SIGTERM", "cycle_seconds": None}, 10_000.0, 60, clock) is None

    cell, workdir = _fake_finished_cell(tmp_path, total=8)  # no model exists: a training would fail
    workdir.stopped.write_text(json.dumps(stopped))
    no_job_env.setenv(DEADLINE_ENV, repr(time.time() + 300))
    from dataclasses import replace

    assert launch(replace(cell, time_limit_minutes=60), workdir.root, tmp_path / "manifest.json", []) == EXIT_RESUMABLE
    assert json.loads(workdir.stopped.read_text()) == stopped and not (tmp_path / "manifest.json").exists()


def _warned_run(guard, clock, step_seconds: float, warn_at: float, steps: int = 10_000):
    """Steps of ``step_seconds`` (a save after every cycle takes 60 s); Slurm's warning handled at
    ``warn_at``; the step it stopped at and the clock then."""
    state = SimpleNamespace(global_step=0, max_steps=steps)
    for _ in range(steps):
        control = SimpleNamespace(should_save=False, should_training_stop=False)
        guard.on_step_begin(None, state, control)
        clock.now += step_seconds
        if guard.warned_at is None and clock.now >= warn_at:
            os.kill(os.getpid(), signal.SIGURG)
        state.global_step += 1
        control.should_save = state.global_step % guard.cycle == 0
        guard.on_step_end(None, state, control)
        if control.should_save:
            clock.now += 60.0
            guard.on_save(None, state, control)
        if control.should_training_stop:
            return state.global_step, clock.now
    return None, clock.now


@pytest.fixture
def signal_handlers():
    from balagg.processes import STOP_SIGNALS

    previous = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    yield
    for number, handler in previous.items():
        signal.signal(number, handler)


def test_slurms_warning_makes_the_guard_wary_of_two_cycles_within_the_lead(no_job_env, signal_handlers):
    """SIGURG, which the Slurm profile asks for an hour before a train job's limit (every process that does
    not handle it ignores it): from then on the end is at most an hour away and the guard wants room for two
    predicted cycles. Cases: a paper-like job (24 h, 26-minute cycles) whose deadline was read an hour too
    late stops at its next boundary and ends inside the hour; a short job that gets the warning at its start
    (cycles of seconds) goes on; a job without a known deadline stops by the warning's."""
    from balagg.processes import STOP_SIGNALS
    from balagg.train.deadline import WARNING_LEAD_S, WARNING_SIGNAL, StopGuard

    assert WARNING_SIGNAL == signal.SIGURG and WARNING_SIGNAL in STOP_SIGNALS and WARNING_LEAD_S == 3600
    clock = Clock(0.0)
    late = StopGuard(cycle=4, time_limit_minutes=25 * 60, start_time=0.0, clock=clock)  # an hour too late
    late.install_signal_handlers()
    end = 24 * 3600.0
    stopped, now = _warned_run(late, clock, step_seconds=390.0, warn_at=end - WARNING_LEAD_S)
    assert "Slurm's warning came" in late.stopped and now <= end
    assert now - late.warned_at <= 4 * 390.0 + 2 * 60.0  # its next boundary, and the stop's save

    clock = Clock(0.0)
    short = StopGuard(cycle=2, time_limit_minutes=30, start_time=0.0, clock=clock)
    short.install_signal_handlers()
    stopped, now = _warned_run(short, clock, step_seconds=5.0, warn_at=0.0)
    assert short.warned_at == 5.0 and "time limit" in short.stopped and 1800.0 - 300 < now <= 1800.0

    clock = Clock(0.0)
    unknown = StopGuard(cycle=2, time_limit_minutes=None, clock=clock)
    unknown.install_signal_handlers()
    stopped, now = _warned_run(unknown, clock, step_seconds=60.0, warn_at=1000.0)
    assert "Slurm's warning came" in unknown.stopped and now <= 1000.0 + WARNING_LEAD_S


# ---- MLflow ---------------------------------------------------------------------------------------

@pytest.fixture
def store(tmp_path):
    pytest.importorskip("mlflow")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_resumed_run_logs_each_step_once_and_a_retrain_supersedes_the_old_run(store):
    import mlflow

    from balagg.tracking import Tracker

    tags = {"cell": "m/d/balanced-agg/seed0"}
    first = Tracker(store)
    run_id = first.start(experiment="e", run_name="cell", run_id=None, tags=tags, params={"a": 1})
    for step in (1, 2, 3):
        first.log_metrics({"step": step, "pg_loss": float(step), "nan": float("nan")}, step=step)
    first.end("KILLED")  # the process ends after step 3; it resumes from checkpoint 2: steps 3 and 4 again
    resumed = Tracker(store)
    assert resumed.start(experiment="e", run_name="cell", run_id=run_id, tags={}, params={}) == run_id
    for step in (3, 4):
        resumed.log_metrics({"pg_loss": float(step)}, step=step)
    resumed.end()
    client = mlflow.MlflowClient(tracking_uri=store)
    assert [p.step for p in client.get_metric_history(run_id, "pg_loss")] == [1, 2, 3, 4]

    retrain = Tracker(store)
    new_id = retrain.start(experiment="e", run_name="cell", run_id=None, tags=tags, params={"a": 1})
    retrain.end()
    old = client.get_run(run_id)
    assert new_id != run_id and old.info.status == "KILLED" and old.data.tags["superseded_by"] == new_id
    assert client.get_run(new_id).info.status == "FINISHED"
    # one run per cell where a person looks: the superseded run is deleted (restorable), out of the default
    # view and of README's filter; the deleted view still holds it
    from mlflow.entities import ViewType

    assert old.info.lifecycle_stage == "deleted"
    shown = mlflow.search_runs(experiment_names=["e"], output_format="list", filter_string=f"tags.cell = '{tags['cell']}'")
    assert [run.info.run_id for run in shown] == [new_id]
    everything = mlflow.search_runs(experiment_names=["e"], output_format="list", run_view_type=ViewType.ALL)
    assert {run.info.run_id for run in everything} == {run_id, new_id}


def test_eval_metrics_land_at_their_training_steps_and_a_second_call_adds_no_point(store):
    import mlflow

    from balagg.tracking import Tracker, log_eval_curve

    tracker = Tracker(store)
    run_id = tracker.start(experiment="e", run_name="cell", run_id=None, tags={"cell": "c"}, params={})
    tracker.end()
    manifest = {"mlflow_run_id": run_id, "config": {"mlflow_experiment": "e"}}
    rows = [{"step": str(s), "benchmark": b, "acc@8": "0.25", "best@8": "0.5"}
            for s in (0, 2, 4) for b in ("math500", "mean")]
    for _ in range(2):
        assert log_eval_curve(store, manifest, rows)["status"] == "ok"
    client = mlflow.MlflowClient(tracking_uri=store)
    for key in ("eval/math500/acc_at_8", "eval/mean/best_at_8"):
        assert sorted(p.step for p in client.get_metric_history(run_id, key)) == [0, 2, 4]


def test_eval_and_analysis_logging_wait_for_a_concurrent_writer_of_the_store(store, tmp_path):
    """A job orphaned by a killed Snakemake and its rerun log the same cell at once: each read-then-log
    section holds the store's write lock, so the second one waits and then finds every point there."""
    import threading

    import mlflow

    from balagg.tracking import Tracker, _store_lock, log_analysis, log_eval_curve

    tracker = Tracker(store)
    run_id = tracker.start(experiment="e", run_name="cell", run_id=None, tags={"cell": "c"}, params={})
    tracker.end()
    manifest = {"mlflow_run_id": run_id, "config": {"mlflow_experiment": "e"}}
    rows = [{"step": str(s), "benchmark": "mean", "acc@8": "0.25", "best@8": "0.5"} for s in (0, 2)]
    table = tmp_path / "table1.md"
    table.write_text("| a |\n")
    results = []
    with _store_lock(store, "write"):
        writers = [threading.Thread(target=lambda: results.append(log_eval_curve(store, manifest, rows))),
                   threading.Thread(target=lambda: results.append(log_analysis(store, "e", [str(table)])))]
        for writer in writers:
            writer.start()
        time.sleep(3)
        assert all(writer.is_alive() for writer in writers) and not results  # both wait for the holder
    for writer in writers:
        writer.join(120)
    assert [r["status"] for r in results] == ["ok", "ok"]
    assert log_eval_curve(store, manifest, rows)["status"] == "ok"  # the rerun adds nothing
    client = mlflow.MlflowClient(tracking_uri=store)
    assert sorted(p.step for p in client.get_metric_history(run_id, "eval/mean/acc_at_8")) == [0, 2]


def test_setup_keeps_artifacts_in_the_campaign_folder_and_survives_a_concurrent_setup(tmp_path, store):
    code = textwrap.dedent(f"""
        import json, sys
        from balagg.tracking import setup_experiment
        print(json.dumps(setup_experiment({store!r}, sys.argv[1], sys.argv[2])))
    """)
    env = {**os.environ, "PYTHONPATH": SRC}
    procs = [subprocess.Popen([sys.executable, "-c", code, name, str(tmp_path / name / "mlartifacts")],
                              stdout=subprocess.PIPE, text=True, env=env) for name in ("one", "two")]
    statuses = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    assert [s["status"] for s in statuses] == ["ok", "ok"]
    assert statuses[0]["experiment_id"] != statuses[1]["experiment_id"]
    for name, status in zip(("one", "two"), statuses):
        assert status["artifact_location"] == (tmp_path / name / "mlartifacts").resolve().as_uri()
