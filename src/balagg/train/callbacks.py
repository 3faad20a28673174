"""Trainer callback: one metrics.jsonl line (and MLflow metrics) per optimiser step, plus the
weights-only evaluation checkpoints at the checkpoint steps after 0 (step 0 is the initial model, which the
workflow evaluates from the model's own folder, once per model: a copy per cell would never be read).

Keys of a metrics line (docs/files.md): step, reward_mean, accuracy, pg_loss (the aggregated
policy-gradient loss = sum_i w_i sum_t l_it of the step), entropy, clip_frac_low/high/region, grad_norm
(before clipping), lr, tokens_per_s, step_seconds, every key of ``length_diagnostics`` and a few more
(reward_std, frac_reward_zero_std, truncation_rate, response_tokens, token_weight_sum = sum_i w_i |o_i|). The generation-batch
statistics are those of the batch the step trained on (with mini_batches > 1 or num_iterations > 1
several steps share one). ``tokens_per_s`` = response tokens the step trained on (the generation batch's
/ mini_batches) / step_seconds. Only step_seconds and tokens_per_s depend on the wall clock
(:data:`WALL_CLOCK_KEYS`).
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import ProgressCallback

from balagg.io import write_json
from balagg.tracking import Tracker
from balagg.train.eval_checkpoints import compute_dtype, write_eval_checkpoint
from balagg.train.files import CellDir, append_metrics

log = logging.getLogger("balagg.train")
step_log = logging.getLogger("balagg.train.steps")
"""One plain line per step; on a terminal it goes only to train.log (the progress bar shows the step)."""

WALL_CLOCK_KEYS = ("step_seconds", "tokens_per_s")

TRL_KEYS = {
    "pg_loss": "loss",
    "entropy": "entropy",
    "clip_frac_low": "clip_ratio/low_mean",
    "clip_frac_high": "clip_ratio/high_mean",
    "clip_frac_region": "clip_ratio/region_mean",
    "grad_norm": "grad_norm",
    "lr": "learning_rate",
}


class StepProgress(ProgressCallback):
    """Transformers' progress bar, with step, reward and seconds per step as its postfix instead of a
    printed dict per log."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        pass

    def show(self, row: dict[str, Any]) -> None:
        if self.training_bar is not None:
            self.training_bar.set_postfix(reward=f"{row['reward_mean']:.3f}", acc=f"{row['accuracy']:.3f}",
                                          s_per_step=f"{row['step_seconds']:.2f}", refresh=False)


def write_verifier_counts(cell_dir: CellDir, spec: str, reward) -> dict:
    """``verifier.json``: the verifier ``spec`` and the reward's timeout and error counts so far."""
    record = {"spec": spec, "timeouts": reward.timeouts, "errors": reward.errors}
    write_json(cell_dir.verifier, record)
    return record


def restore_verifier_counts(cell_dir: CellDir, reward) -> None:
    """A resumed training counts on from the counts saved with its checkpoint (:func:`write_verifier_counts`)."""
    try:
        saved = json.loads(cell_dir.verifier.read_text())
    except (OSError, ValueError):
        return
    if isinstance(saved.get("timeouts"), int) and isinstance(saved.get("errors"), int):
        reward.timeouts, reward.errors = saved["timeouts"], saved["errors"]


class CellCallback(TrainerCallback):
    def __init__(self, cell_dir: CellDir, checkpoint_steps: list[int], mini_batches: int, tracker: Tracker) -> None:
        self.cell_dir = cell_dir
        self.checkpoint_steps = set(checkpoint_steps)
        self.mini_batches = mini_batches
        self.tracker = tracker
        self.trainer = None  # set by run_cell once the trainer exists
        self.progress: StepProgress | None = None  # set by run_cell on a terminal
        self.reward = None  # set by run_cell: its verifier counts are saved with each resumable checkpoint
        self.verifier_spec = ""
        self._step_start = 0.0
        self._step_seconds = math.nan
        self._logged_step = -1

    # ---- evaluation checkpoints ---------------------------------------------------------------------

    def save_eval_checkpoint(self, step: int) -> None:
        """Weights + tokenizer, loadable by from_pretrained, in the training's compute dtype
        (balagg.train.eval_checkpoints), placed by one atomic rename. All processes call this: accelerate's
        ``get_state_dict`` gathers FSDP shards onto the main process, which writes, checks that the folder
        holds weights, and renames.

        Every process makes the same collective calls whatever it finds on disk: only the main process
        looks at the folder. (A rank that skipped the gather because the main process had already renamed
        the folder would enter the next collective while the main process waits in this one's barrier:
        a hang until the collective timeout.) A folder that exists is complete (only a rename creates it)
        and is kept: a resumed run recomputes identical weights."""
        final = self.cell_dir.checkpoint(step)
        tmp = final.with_name(f".{final.name}.tmp")
        trainer = self.trainer
        write = trainer.is_world_process_zero() and not final.exists()
        if write and tmp.exists():
            shutil.rmtree(tmp)
        state_dict = trainer.accelerator.get_state_dict(trainer.model)  # collective under FSDP
        if write:
            write_eval_checkpoint(trainer.accelerator.unwrap_model(trainer.model), state_dict,
                                  trainer.processing_class, tmp, compute_dtype(trainer.args))
            tmp.rename(final)
            log.info("saved evaluation checkpoint %s", final)
        del state_dict
        trainer.accelerator.wait_for_everyone()

    def on_save(self, args, state, control, **kwargs):
        """With each resumable checkpoint, the training verifier's counts so far (``verifier.json``): a job
        killed after its last checkpoint, whose rerun only writes the manifest, still reports them, and
        a resumed one goes on counting from them."""
        if self.reward is not None and self.trainer is not None and self.trainer.is_world_process_zero():
            write_verifier_counts(self.cell_dir, self.verifier_spec, self.reward)

    # ---- per-step metrics ---------------------------------------------------------------------------

    def on_step_begin(self, args, state, control, **kwargs):
        self._step_start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self._step_seconds = time.perf_counter() - self._step_start
        if state.global_step in self.checkpoint_steps:
            self.save_eval_checkpoint(state.global_step)

    def on_log(self, args, state, control, logs: dict[str, Any] | None = None, **kwargs):
        logs = logs or {}
        step = state.global_step
        if "loss" not in logs or step == self._logged_step:  # not a training-step log (e.g. the final summary)
            return
        self._logged_step = step
        stats = dict(self.trainer.generation_stats)
        row: dict[str, Any] = {"step": step, "reward_mean": stats.pop("reward_mean", math.nan),
                               "accuracy": stats.pop("accuracy", math.nan)}
        for key, source in TRL_KEYS.items():
            row[key] = float(logs.get(source, math.nan))
        row["step_seconds"] = self._step_seconds
        tokens = stats.get("response_tokens", math.nan) / self.mini_batches
        row["tokens_per_s"] = tokens / self._step_seconds if self._step_seconds > 0 else math.nan
        row.update(stats)
        if state.is_world_process_zero:
            append_metrics(self.cell_dir.metrics, row)
            self.tracker.log_metrics(row, step=step)
            if self.progress is not None:
                self.progress.show(row)
            step_log.info("step %d/%d reward %.4f acc %.4f pg_loss %.4g len %.1f %.2fs/step", step, state.max_steps,
                     row["reward_mean"], row["accuracy"], row["pg_loss"], row.get("len_mean", math.nan),
                     row["step_seconds"])
