"""Stopping a training job cleanly before its wall-clock limit (Slurm ``--time``) or on a signal.

A job may be given ``time_limit_minutes`` (CellConfig). Its deadline is the earliest of

- the job's end as Slurm holds it: ``$SLURM_JOB_END_TIME``, else ``squeue``'s time left of
  ``$SLURM_JOB_ID`` (:func:`slurm_time_left`), which count every second the job ran before training (the
  batch script, Snakemake in the job, the environment's activation, srun) and follow a limit changed with
  ``scontrol update``;
- the job's start plus ``time_limit_minutes``: the start is ``$SLURM_JOB_START_TIME``, else
  ``$BALAGG_JOB_START_TIME`` (set by the launcher before anything is imported), else the moment this
  process started training.

The launcher works it out once and hands it to its processes (``$BALAGG_JOB_DEADLINE``). (Snakemake's Slurm
plugin runs a job's rule through ``srun`` with every ``SLURM_*`` variable but the job's id removed, so a
train job there sees neither ``SLURM_JOB_START_TIME`` nor ``SLURM_JOB_END_TIME``: Slurm is asked.)

At every generation-cycle boundary (the only steps a resume reproduces exactly, see balagg.train.config)
before the last step, :class:`StopGuard` asks whether one more cycle still fits:

    now + save_now + next_cycle + save_seconds + margin > deadline   ->  save a resumable checkpoint here, stop

with ``next_cycle`` = the longest of the last :data:`RECENT_CYCLES` cycles (each the sum of its steps'
wall time: generation, training, evaluation checkpoints; responses grow longer as RL training goes on, so
the attempt's mean would be short), ``save_seconds`` the longest resumable save of this attempt
(:data:`DEFAULT_SAVE_S` before the first one), ``save_now`` the same when a save is due at this boundary
anyway, and ``margin`` = 5 % of the limit, clamped to [30 s, 300 s].

SIGTERM (scancel, preemption) and SIGUSR1 request the same stop at the next cycle boundary. SIGURG is
Slurm's warning, which the Slurm profile asks for :data:`WARNING_LEAD_S` before a train job's limit
(``--signal=URG@3600``, slurm/config.v8+.yaml), in case the prediction is wrong: from then on the deadline
is at most the warning's time plus that lead (Slurm sends it up to a minute early, never late), and the
guard wants room for two predicted cycles, not one. So a job whose deadline was read wrong, or whose
cycles outgrow the recent ones by up to twice, still stops with a checkpoint; on the paper's 24 h jobs
(cycles of 25-45 min) the warning stops the job at its next boundary; a job shorter than the lead gets
the warning at its start and goes on while two cycles fit. Slurm sends the signal to every process of the
job's steps: under Snakemake's Slurm plugin that includes Snakemake in the job and the rule's shell, which
SIGUSR1 would kill (so the job fails at once) and SIGURG, ignored by every process that does not handle
it, leaves alone. In a launch of several processes :mod:`balagg.train.agent` hands these signals to every
rank (torchrun's agent would end the ranks instead). Every process takes the decision together (the flag
is max-reduced over processes), so a DDP or FSDP job stops at one step.

A stopped job writes ``stopped.json`` in its work directory (with its longest recent cycle and save), no
manifest, and exits with :data:`EXIT_RESUMABLE` (75, EX_TEMPFAIL): Snakemake counts it as failed and its retry
(``--retries``) resumes from that checkpoint, so every step is trained exactly once. The first check comes
after one full cycle, so every attempt makes progress. Snakemake's Slurm plugin runs a rule's retries inside
the same Slurm job when they are the rule's own (``retries:``), so the retry of a job stopped at its limit
starts with minutes left; the launcher then does not start a cycle that cannot end in time
(:func:`too_late_to_start`: the job's time left against the stopped attempt's cycle and saves) and exits
75 at once, and the retry in the next Slurm job trains.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import signal
import subprocess
import time
from typing import Any, Callable

from transformers import TrainerCallback

from balagg.processes import STOP_SIGNALS

log = logging.getLogger("balagg.train")

EXIT_RESUMABLE = 75
"""Exit status of a training job that stopped early at a resumable checkpoint (sysexits EX_TEMPFAIL)."""
START_ENV = "BALAGG_JOB_START_TIME"
DEADLINE_ENV = "BALAGG_JOB_DEADLINE"
"""Epoch seconds by which the job must have stopped, set by the launcher for its processes (:func:`job_deadline`)."""
DEFAULT_SAVE_S = 120.0
WARNING_SIGNAL = signal.SIGURG
WARNING_LEAD_S = 3600.0
"""Seconds before a train job's limit that the Slurm profile asks Slurm for :data:`WARNING_SIGNAL`."""
RECENT_CYCLES = 3
SQUEUE_TIMEOUT_S = 20


class TrainingStopped(Exception):
    """Training stopped early at a resumable checkpoint; the next attempt resumes from ``step``."""

    def __init__(self, reason: str, step: int) -> None:
        super().__init__(f"training stopped at step {step} ({reason}); a resumable checkpoint is saved, "
                         "rerun to resume")
        self.reason = reason
        self.step = step


def job_start_time(default: float | None = None) -> float:
    """The job's start: ``$SLURM_JOB_START_TIME``, else the launcher's ``$BALAGG_JOB_START_TIME``, else
    ``default`` (else now)."""
    for name in ("SLURM_JOB_START_TIME", START_ENV):
        value = _epoch(name)
        if value is not None:
            return value
    return time.time() if default is None else default


def _epoch(name: str) -> float | None:
    value = os.environ.get(name)
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        log.warning("ignoring %s=%r (not epoch seconds)", name, value)
        return None


def parse_slurm_duration(text: str) -> float | None:
    """Seconds of a Slurm duration (``[D-]HH:MM:SS``, ``MM:SS``, ``SS``); None for ``UNLIMITED``,
    ``NOT_SET``, ``INVALID`` or anything else."""
    match = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(?:(\d+):)?(\d+)", text.strip())
    if not match:
        return None
    days, first, second, seconds = match.groups()
    if second is None:  # MM:SS, or SS
        hours, minutes = 0, int(first or 0)
    else:
        hours, minutes = int(first), int(second)
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + int(seconds)


def slurm_time_left(job_id: str, run: Callable = subprocess.run) -> float | None:
    """Seconds Slurm leaves the job ``job_id`` (``squeue --format %L``); None when Slurm does not answer."""
    if shutil.which("squeue") is None:
        return None
    try:
        result = run(["squeue", "--noheader", "--jobs", job_id, "--format", "%L"], capture_output=True, text=True,
                     timeout=SQUEUE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as error:
        log.warning("squeue did not tell the job's time left (%s)", error)
        return None
    lines = result.stdout.split()
    left = parse_slurm_duration(lines[0]) if result.returncode == 0 and lines else None
    if left is None:
        log.warning("squeue gave no time left for job %s (%r)", job_id, (result.stdout or result.stderr).strip())
    return left


def job_deadline(limit_s: float | None, start_time: float | None = None,
                 clock: Callable[[], float] = time.time, time_left: Callable = slurm_time_left) -> float | None:
    """The epoch second the job must have stopped by (module docstring): the earliest of this job's start
    plus ``limit_s`` and Slurm's end of the job (``SLURM_JOB_END_TIME``, else squeue's time left when there
    is a limit); None when neither is known."""
    given = _epoch(DEADLINE_ENV)
    if given is not None:
        return given
    candidates = [] if limit_s is None else [job_start_time(start_time) + limit_s]
    slurm_end = _epoch("SLURM_JOB_END_TIME")
    if slurm_end is None and os.environ.get("SLURM_JOB_ID") and limit_s is not None:
        left = time_left(os.environ["SLURM_JOB_ID"])
        slurm_end = None if left is None else clock() + left
    if slurm_end is not None:
        candidates.append(slurm_end)
    return min(candidates) if candidates else None


def margin_seconds(limit_s: float) -> float:
    return min(300.0, max(30.0, 0.05 * limit_s))


def too_late_to_start(stopped: dict | None, deadline: float | None, limit_s: float | None,
                      clock: Callable[[], float] = time.time) -> str | None:
    """Why an attempt should not start (None: it can): the previous attempt stopped at its time limit
    (``stopped``: its ``stopped.json``) and this job's time left holds neither that attempt's longest recent
    cycle with two saves nor the margin, so a cycle started now would end past the limit. A job with its
    whole limit ahead (all but the margin) always starts: the next job would have no more time, and the
    stopped attempt made progress in as much."""
    if not stopped or deadline is None or not stopped.get("cycle_seconds"):
        return None
    cycle, save = float(stopped["cycle_seconds"]), float(stopped.get("save_seconds") or DEFAULT_SAVE_S)
    margin = margin_seconds(limit_s if limit_s is not None else cycle)
    needed = cycle + 2 * save + margin
    left = deadline - clock()
    if left >= needed or (limit_s is not None and left >= limit_s - margin):
        return None
    return (f"{max(left, 0):.0f} s of the job's time left, a cycle with its saves needs about {needed:.0f} s "
            f"(the last attempt's, stopped at step {stopped.get('step')}): not started; the next job resumes")


class StopGuard(TrainerCallback):
    """Stops training at a generation-cycle boundary when the next cycle would not fit before the
    deadline, or after a stop signal. ``trainer`` (for the cross-process reduction) is set by run_cell."""

    def __init__(self, cycle: int, time_limit_minutes: int | None, *, start_time: float | None = None,
                 clock: Callable[[], float] = time.time, deadline: float | None = None) -> None:
        self.cycle = cycle
        self.clock = clock
        self.limit_s = None if time_limit_minutes is None else 60.0 * time_limit_minutes
        self.deadline = deadline if deadline is not None else job_deadline(self.limit_s, start_time, clock)
        self.signal_name: str | None = None
        self.warned_at: float | None = None  # when Slurm's warning came
        self.trainer = None
        self.stopped: str | None = None
        self._step_start = 0.0
        self._cycle_seconds = 0.0
        self.cycles: list[float] = []  # the wall time of each cycle of this attempt
        self._save_start: float | None = None
        self.saves: list[float] = []  # the duration of each resumable save of this attempt

    # ---- signals ---------------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        for number in STOP_SIGNALS:
            signal.signal(number, self._on_signal)

    def _on_signal(self, number: int, frame: Any) -> None:
        if number == WARNING_SIGNAL:
            self.warned_at = self.clock()
            log.warning("%s received: the job ends within %.0f s; stopping with a resumable checkpoint as soon as "
                        "two more cycles may not fit", signal.Signals(number).name, WARNING_LEAD_S)
            return
        self.signal_name = signal.Signals(number).name
        log.warning("%s received: stopping at the next generation-cycle boundary with a resumable checkpoint",
                    self.signal_name)

    # ---- the decision ------------------------------------------------------------------------------

    @property
    def save_seconds(self) -> float:
        return max(self.saves) if self.saves else DEFAULT_SAVE_S

    def next_cycle_seconds(self) -> float | None:
        """The next cycle's predicted wall time: the longest of the last :data:`RECENT_CYCLES`."""
        return max(self.cycles[-RECENT_CYCLES:]) if self.cycles else None

    def reason_to_stop(self, save_due: bool = False) -> str | None:
        """This process's reason to stop now (at a cycle boundary), or None; ``save_due``: a resumable
        save is due at this boundary anyway."""
        if self.signal_name is not None:
            return f"signal {self.signal_name}"
        cycle = self.next_cycle_seconds()
        deadline, cycles = self.deadline, 1
        if self.warned_at is not None:  # Slurm's warning: its end is at most the lead away, and the guard wary
            deadline = min(deadline if deadline is not None else math.inf, self.warned_at + WARNING_LEAD_S)
            cycles = 2
        if deadline is None or cycle is None:
            return None
        margin = margin_seconds(self.limit_s if self.limit_s is not None else deadline - self.clock())
        needed = (self.save_seconds if save_due else 0.0) + cycles * cycle + self.save_seconds + margin
        left = deadline - self.clock()
        if needed > left:
            limit = f" of {self.limit_s / 60:.0f} min" if self.limit_s is not None else ""
            warned = f" (Slurm's warning came {self.clock() - self.warned_at:.0f} s ago)" if cycles == 2 else ""
            return (f"time limit: {left:.0f} s left{limit}{warned}, {'two cycles' if cycles == 2 else 'the next cycle'} "
                    f"need about {needed:.0f} s with the checkpoint and margin (recent cycles up to {cycle:.0f} s, "
                    f"a save {self.save_seconds:.0f} s)")
        return None

    def _agreed(self, stop: bool) -> bool:
        trainer = self.trainer
        if trainer is None or trainer.accelerator.num_processes == 1:
            return stop
        import torch

        flag = torch.tensor([1.0 if stop else 0.0], device=trainer.accelerator.device)
        return bool(trainer.accelerator.reduce(flag, reduction="sum").item() > 0)

    # ---- callback hooks ----------------------------------------------------------------------------

    def on_step_begin(self, args, state, control, **kwargs):
        self._step_start = self.clock()

    def on_step_end(self, args, state, control, **kwargs):
        self._cycle_seconds += self.clock() - self._step_start
        step = state.global_step
        if step % self.cycle == 0:
            self.cycles.append(self._cycle_seconds)
            self._cycle_seconds = 0.0
            if step < state.max_steps:
                reason = self.reason_to_stop(save_due=bool(control.should_save))
                if self._agreed(reason is not None):
                    self.stopped = reason or "another process asked to stop"
                    control.should_save = True
                    control.should_training_stop = True
                    log.warning("stopping at step %d: %s", step, self.stopped)
        if control.should_save:
            self._save_start = self.clock()
        return control

    def on_save(self, args, state, control, **kwargs):
        if self._save_start is not None:
            self.saves.append(self.clock() - self._save_start)
            self._save_start = None
