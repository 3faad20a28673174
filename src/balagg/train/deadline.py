"""Stopping a training job cleanly before its wall-clock limit (Slurm ``--time``) or on a signal.

A job may be given ``time_limit_minutes`` (CellConfig): the deadline is the job's start plus that limit.
The job's start is ``$BALAGG_JOB_START_TIME`` (epoch seconds, set by the launcher before anything is
imported), else ``$SLURM_JOB_START_TIME``, else the moment this process started training. At every
generation-cycle boundary (the only steps a resume reproduces exactly, see balagg.train.config) before
the last step, :class:`StopGuard` asks whether one more cycle still fits:

    now + cycle_seconds + save_seconds + margin > deadline   ->  save a resumable checkpoint here, stop

with ``cycle_seconds`` = mean measured seconds per optimiser step x steps per cycle, ``save_seconds``
the measured duration of the last resumable save (``DEFAULT_SAVE_S`` before the first one), and
``margin`` = 5 % of the limit, clamped to [30 s, 300 s]. SIGTERM and SIGUSR1 (Slurm's ``--signal``,
scancel, preemption) request the same stop at the next cycle boundary; in a launch of several
processes :mod:`balagg.train.agent` hands them to every rank (torchrun's agent would end the ranks
instead). Every process takes the decision together (the flag is max-reduced over processes), so a DDP
job stops at one step.

A stopped job writes ``stopped.json`` in its work directory, no manifest, and exits with
:data:`EXIT_RESUMABLE` (75, EX_TEMPFAIL): Snakemake counts it as failed and its retry (``--retries``)
resumes from that checkpoint, so every step is trained exactly once. The first check comes after one
full cycle, so every attempt makes progress.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import Any, Callable

from transformers import TrainerCallback

from balagg.processes import STOP_SIGNALS

log = logging.getLogger("balagg.train")

EXIT_RESUMABLE = 75
"""Exit status of a training job that stopped early at a resumable checkpoint (sysexits EX_TEMPFAIL)."""
START_ENV = "BALAGG_JOB_START_TIME"
DEFAULT_SAVE_S = 120.0


class TrainingStopped(Exception):
    """Training stopped early at a resumable checkpoint; the next attempt resumes from ``step``."""

    def __init__(self, reason: str, step: int) -> None:
        super().__init__(f"training stopped at step {step} ({reason}); a resumable checkpoint is saved, "
                         "rerun to resume")
        self.reason = reason
        self.step = step


def job_start_time(default: float | None = None) -> float:
    for name in (START_ENV, "SLURM_JOB_START_TIME"):
        value = os.environ.get(name)
        if value:
            try:
                return float(value)
            except ValueError:
                log.warning("ignoring %s=%r (not epoch seconds)", name, value)
    return time.time() if default is None else default


def margin_seconds(limit_s: float) -> float:
    return min(300.0, max(30.0, 0.05 * limit_s))


class StopGuard(TrainerCallback):
    """Stops training at a generation-cycle boundary when the next cycle would not fit before the
    deadline, or after a stop signal. ``trainer`` (for the cross-process reduction) is set by run_cell."""

    def __init__(self, cycle: int, time_limit_minutes: int | None, *, start_time: float | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.cycle = cycle
        self.clock = clock
        self.limit_s = None if time_limit_minutes is None else 60.0 * time_limit_minutes
        self.deadline = None if self.limit_s is None else job_start_time(start_time) + self.limit_s
        self.signal_name: str | None = None
        self.trainer = None
        self.stopped: str | None = None
        self._step_start = 0.0
        self._step_seconds: list[float] = []
        self._save_start: float | None = None
        self.save_seconds = DEFAULT_SAVE_S

    # ---- signals ---------------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        for number in STOP_SIGNALS:
            signal.signal(number, self._on_signal)

    def _on_signal(self, number: int, frame: Any) -> None:
        self.signal_name = signal.Signals(number).name
        log.warning("%s received: stopping at the next generation-cycle boundary with a resumable checkpoint",
                    self.signal_name)

    # ---- the decision ------------------------------------------------------------------------------

    def reason_to_stop(self) -> str | None:
        """This process's reason to stop now (at a cycle boundary), or None."""
        if self.signal_name is not None:
            return f"signal {self.signal_name}"
        if self.deadline is None or not self._step_seconds:
            return None
        mean_step = sum(self._step_seconds) / len(self._step_seconds)
        needed = mean_step * self.cycle + self.save_seconds + margin_seconds(self.limit_s)
        left = self.deadline - self.clock()
        if needed > left:
            return (f"time limit: {left:.0f} s left of {self.limit_s / 60:.0f} min, the next cycle needs about "
                    f"{needed:.0f} s with its checkpoint and margin")
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
        self._step_seconds.append(self.clock() - self._step_start)
        step = state.global_step
        if step % self.cycle == 0 and step < state.max_steps:
            reason = self.reason_to_stop()
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
            self.save_seconds = self.clock() - self._save_start
            self._save_start = None
