"""The resolved per-cell training config (``cell.json``) and its translation into TRL's ``GRPOConfig``.

One cell = model x dataset x aggregator x seed. Every key of ``cell.json`` is a field of
:class:`CellConfig`; unknown keys, wrong types and inconsistent batch shapes are errors that name the
problem. Batch shape (DAPO vocabulary -> TRL):

    responses per generation batch  = prompts_per_step * num_generations
    responses per optimiser step    = responses per generation batch / mini_batches
    gradient_accumulation_steps     = responses per optimiser step / (micro_batch_size * num_processes)
    steps_per_generation            = gradient_accumulation_steps * mini_batches

so one generation batch is consumed by ``mini_batches`` optimiser steps, each of them ``num_iterations``
times (with ``group_preserving_minibatches`` each step holds whole groups, responses_per_step /
num_processes must then be a multiple of num_generations); a *generation cycle* is ``mini_batches * num_iterations`` optimiser steps, and resumable
checkpoints must fall on cycle boundaries (TRL does not save its rollout buffer).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from balagg import settings
from balagg.aggregation.rules import ALPHA, SCOPES, aggregator
from balagg.config_schema import check_settings, setting
from balagg.layout import Cell
from balagg.prompts import (
    ANSWER_FORMATS,
    DEFAULT_ANSWER_FORMAT,
    DEFAULT_CHAT_TEMPLATE,
    MATH_TEMPLATE,
    PromptFormat,
    check_template,
)
from balagg.train.memory import SYNC_EACH_BATCH

OPERATIONAL_FIELDS = ("time_limit_minutes", "collective_timeout_minutes", "mlflow_tracking_uri", "mlflow_experiment",
                      "keep_resumable_state")
"""Fields that change how a job is run or where it is logged, not what it trains (left out of the config
hash, so the hash of a cell does not depend on the checkout's folder or the job's time limit)."""

@dataclass
class CellConfig:
    """Everything one training cell needs. Paths are as given (absolute or relative to the cwd).

    The campaign config's ``train`` section (and ``models.<name>.train``) is generated from the fields
    declared without ``in_schema=False`` (:mod:`balagg.config_schema`); the others are the cell's identity
    and what the workflow takes from the model's settings and resources."""

    # what to train on
    model: str = setting(help="hub id or folder of the initial policy", in_schema=False)
    train_files: list[str] = setting(help="training set files (JSONL)", min_items=1, in_schema=False)
    aggregator: str = setting(help="aggregation rule (balagg.aggregation.rules; a verl alias names its rule)",
                              in_schema=False)
    seed: int = setting(help="the cell's seed", minimum=0, in_schema=False)
    output_name: str = setting("", "label for logs and the MLflow run; default: the cell's folder "
                               "(<model>/<dataset>/<aggregator>/seed<seed>)",
                               in_schema=False)
    tokenizer: str | None = setting(None, "default: the model directory", in_schema=False)
    model_name: str | None = setting(None, "label for tags; default: the model path's last component",
                                     in_schema=False)
    dataset_name: str | None = setting(None, "label for tags; default: the first train file's stem", in_schema=False)
    scope: str | None = setting(None, "aggregation scope (default: the rule's own, balagg.aggregation.rules: batch for token-agg, token-sum and delta-l-norm, group for the others)", choices=SCOPES)
    delta_l_alpha: float = setting(ALPHA.default, ALPHA.description, minimum=0)
    max_position_embeddings: int | None = setting(
        None, "context override (balagg.context); None: the model's own", minimum=1, in_schema=False)

    # prompt and reward
    prompt_template: str = setting(MATH_TEMPLATE, "training prompt; must contain {problem} (a config sets the "
                                   "model's math_template, which evaluation uses too)", in_schema=False)
    chat_template: bool = setting(DEFAULT_CHAT_TEMPLATE, "wrap prompts in the tokenizer's chat template",
                                  in_schema=False)
    enable_thinking: bool | None = setting(None, "chat template switch (Qwen3); None: the template's default",
                                           in_schema=False)
    answer_format: str = setting(DEFAULT_ANSWER_FORMAT,
                                 "what the prompt asks for; the reward extracts that (balagg.prompts; a config "
                                 "sets the model's answer_format, which evaluation scores by too)",
                                 choices=ANSWER_FORMATS, in_schema=False)
    reward_correct: float = setting(1.0)
    reward_incorrect: float = setting(-1.0, "DAPO's +-1")
    overlong_buffer_enabled: bool = setting(True, "DAPO overlong shaping")
    overlong_buffer_len: int = setting(4096, minimum=1)
    overlong_penalty_factor: float = setting(1.0, minimum=0)
    verifier_timeout_s: float = setting(settings.VERIFIER.math_timeout_s, exclusive_minimum=0)
    verifier_workers: int = setting(settings.VERIFIER.workers, minimum=1)
    verifier: str = setting(settings.VERIFIER.verifier, "module:function of the math verifier")
    scale_rewards: str = setting("group", "TRL's: group (GRPO), batch, none (Dr.GRPO)",
                                 choices=("group", "batch", "none"))

    # DAPO recipe knobs
    learning_rate: float = setting(1e-6, exclusive_minimum=0)
    warmup_steps: int = setting(10, minimum=0)
    lr_scheduler: str = setting("constant_with_warmup")
    weight_decay: float = setting(0.1, minimum=0)
    max_grad_norm: float = setting(1.0, "gradient clipping", exclusive_minimum=0)
    optimizer: str = setting("adamw_torch")
    num_generations: int = setting(16, "G, responses per prompt", minimum=2)
    prompts_per_step: int = setting(512, "prompts per generation batch", minimum=1)
    mini_batches: int = setting(16, "optimiser steps per generation batch", minimum=1)
    group_preserving_minibatches: bool = setting(
        False, "whole groups per optimiser step (a random order of groups, as verl's mini-batches; each step is "
        "the rule over its own groups); false: TRL's response shuffle")
    micro_batch_size: int = setting(4, "responses per device per forward pass", minimum=1)
    num_iterations: int = setting(1, "PPO epochs per generation batch", minimum=1)
    max_prompt_length: int = setting(2048, minimum=1)
    max_completion_length: int = setting(20480, minimum=1)
    clip_ratio_low: float = setting(0.2, minimum=0)
    clip_ratio_high: float = setting(0.28, minimum=0)
    temperature: float = setting(1.0, exclusive_minimum=0)
    top_p: float = setting(1.0, exclusive_minimum=0, maximum=1)
    mask_truncated_completions: bool = setting(False)
    total_steps: int = setting(100, "optimiser steps", minimum=1)

    # checkpoints
    save_every: int = setting(16, "resumable checkpoint cadence (a multiple of the generation cycle)", minimum=1)
    keep_checkpoints: int = setting(
        2, "resumable checkpoints kept while training (weights-only eval checkpoints are all kept)", minimum=1)
    keep_resumable_state: bool = setting(
        False, "keep the resumable checkpoints after training (keep_checkpoints of them, 12 bytes per parameter "
        "each), to train the cell further later; false: they are removed once the cell's training and its "
        "evaluation checkpoints are complete (balagg.train.run)")
    eval_steps: list[int] = setting(
        default_factory=list, help="evaluated steps (weights-only checkpoints); step 0 always evaluated",
        minimum=0, in_schema=False)
    eval_every: int = setting(
        0, "weights-only checkpoint and evaluation cadence (plus step 0 and the last step); 0: only step 0 and "
        "eval_steps (a grid campaign evaluates every eval_every >= 1 steps)", minimum=0)
    time_limit_minutes: int | None = setting(
        None, "wall-clock limit of one training job (Slurm --time); it stops at a resumable checkpoint before it "
        "and exits 75 (the retry resumes, balagg.train.deadline); null: no limit", minimum=1)

    # hardware
    num_processes: int = setting(1, "data-parallel processes (GPUs); the workflow launches this many",
                                 minimum=1, in_schema=False)
    bf16: bool = setting(False)
    gradient_checkpointing: bool = setting(False)
    use_vllm: bool = setting(False)
    vllm_mode: str = setting("colocate", choices=("colocate", "server"))
    vllm_gpu_memory_utilization: float = setting(0.3, exclusive_minimum=0, maximum=1)
    vllm_importance_sampling_correction: bool = setting(
        True, "TRL's vLLM importance-sampling correction (mode sequence_mask: responses whose train/rollout ratio "
        "leaves [0, 3] are masked out); masked fractions logged per step when on. TRL's default is on.")
    accelerate_config: str | None = setting(
        None, "accelerate config file for multi-GPU training, e.g. configs/accelerate/fsdp2.yaml")
    collective_timeout_minutes: int = setting(
        30, "how long every process waits in one collective (all-reduce, all-gather, barrier) before the job "
        "fails: torch.distributed's process-group timeout (transformers' ddp_timeout, default 30 minutes); ranks "
        "wait in one while the main process writes an evaluation checkpoint", minimum=1)
    torch_threads: int = setting(1, "CPU intra-op threads", minimum=1)

    # tracking
    mlflow_tracking_uri: str | None = setting(None, "MLflow tracking URI (the workflow's)", in_schema=False)
    mlflow_experiment: str = setting("balagg", "MLflow experiment (the workflow's: the campaign)", in_schema=False)

    def __post_init__(self) -> None:
        check_settings(self, "cell config")  # every field's type, bounds and choices, as declared
        # where a config enters: the rule's canonical name and its scope; everything downstream takes them
        rule = aggregator(self.aggregator)
        self.aggregator = rule.name
        if self.scope is None:
            self.scope = rule.default_scope
        if self.tokenizer is None:
            self.tokenizer = self.model
        if self.model_name is None:
            self.model_name = Path(self.model).name
        if self.dataset_name is None:
            self.dataset_name = Path(self.train_files[0]).stem
        if not self.output_name:
            self.output_name = self.cell.relpath
        check_template(self.prompt_template, ("problem",), "cell config: prompt_template")
        # relations between fields
        if self.generation_batch % self.mini_batches:
            raise ValueError(
                f"cell config: prompts_per_step * num_generations = {self.generation_batch} responses do not split "
                f"into mini_batches={self.mini_batches} equal optimiser steps"
            )
        per_pass = self.micro_batch_size * self.num_processes
        if self.responses_per_step % per_pass:
            raise ValueError(
                f"cell config: {self.responses_per_step} responses per optimiser step are not a multiple of "
                f"micro_batch_size * num_processes = {per_pass}"
            )
        if self.group_preserving_minibatches and (self.responses_per_step // self.num_processes) % self.num_generations:
            raise ValueError(
                f"cell config: group_preserving_minibatches needs whole groups per process and optimiser step, but "
                f"{self.responses_per_step} responses per step over num_processes={self.num_processes} are not a "
                f"multiple of num_generations={self.num_generations}"
            )
        if self.save_every % self.generation_cycle:
            raise ValueError(
                f"cell config: save_every={self.save_every} must be a multiple of the generation cycle "
                f"(mini_batches * num_iterations = {self.generation_cycle} optimiser steps); TRL does not save its "
                "rollout buffer, so a resume from inside a cycle would not reproduce the run"
            )
        if self.overlong_buffer_enabled and self.overlong_buffer_len > self.max_completion_length:
            raise ValueError(
                f"cell config: overlong_buffer_len={self.overlong_buffer_len} must be at most "
                f"max_completion_length={self.max_completion_length}"
            )
        if self.max_position_embeddings is not None:
            from balagg.context import check_fits

            check_fits(self.model_name, self.max_position_embeddings, self.max_prompt_length,
                       self.max_completion_length, "training", self.max_position_embeddings)
        bad_steps = [s for s in self.eval_steps if s > self.total_steps]
        if bad_steps:
            raise ValueError(f"cell config: eval_steps {bad_steps} are outside [0, total_steps={self.total_steps}]")

    @property
    def cell(self) -> Cell:
        """The grid cell this config trains (its folder: :attr:`Cell.relpath`)."""
        return Cell(self.model_name, self.dataset_name, self.aggregator, self.seed)

    # ---- derived batch shape -------------------------------------------------------------------------

    @property
    def generation_batch(self) -> int:
        """Responses per generation batch (all processes)."""
        return self.prompts_per_step * self.num_generations

    @property
    def responses_per_step(self) -> int:
        return self.generation_batch // self.mini_batches

    @property
    def gradient_accumulation_steps(self) -> int:
        return self.responses_per_step // (self.micro_batch_size * self.num_processes)

    @property
    def steps_per_generation(self) -> int:
        return self.gradient_accumulation_steps * self.mini_batches

    @property
    def generation_cycle(self) -> int:
        """Optimiser steps per generation batch (TRL regenerates after this many)."""
        return self.mini_batches * self.num_iterations

    def prompt_format(self) -> PromptFormat:
        """How prompts are wrapped (the evaluation renders with the same :class:`PromptFormat`)."""
        return PromptFormat(chat=self.chat_template, enable_thinking=self.enable_thinking)

    def checkpoint_steps(self) -> list[int]:
        """Steps that are evaluated: 0, eval_steps, every eval_every, last. Each after 0 gets a weights-only
        checkpoint; step 0 is the initial model, evaluated from its own folder (no copy is saved)."""
        return self.checkpoint_steps_of(self.total_steps, self.eval_every, self.eval_steps)

    @staticmethod
    def checkpoint_steps_of(total_steps: int, eval_every: int = 0, eval_steps: list[int] | tuple = ()) -> list[int]:
        """The rule behind :meth:`checkpoint_steps`, for callers without a full config (the workflow)."""
        steps = {0, *eval_steps}
        if eval_every > 0:
            steps |= set(range(0, total_steps + 1, eval_every)) | {total_steps}
        return sorted(steps)

    # ---- serialisation ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def config_hash(self) -> str:
        """sha256 of the resolved config (canonical JSON) without the fields that cannot change what is
        trained (:data:`OPERATIONAL_FIELDS`), first 16 hex digits."""
        result = {k: v for k, v in self.to_dict().items() if k not in OPERATIONAL_FIELDS}
        canonical = json.dumps(result, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CellConfig:
        if not isinstance(data, dict):
            raise ValueError(f"cell config must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"cell config: unknown keys {unknown}")
        missing = sorted(f.name for f in dataclasses.fields(cls)
                         if f.name not in data and f.default is dataclasses.MISSING
                         and f.default_factory is dataclasses.MISSING)
        if missing:
            raise ValueError(f"cell config: missing required keys {missing}")
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path) -> CellConfig:
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ValueError(f"cell config {path} does not exist") from None
        except json.JSONDecodeError as error:
            raise ValueError(f"cell config {path} is not valid JSON: {error}") from None
        return cls.from_dict(data)


def grpo_config_kwargs(cell: CellConfig, output_dir: str) -> dict[str, Any]:
    """Keyword arguments of ``trl.GRPOConfig`` for ``cell`` (loss_type dr_grpo: see balagg.train.trainer)."""
    kwargs: dict[str, Any] = dict(
        output_dir=output_dir,
        loss_type="dr_grpo",
        beta=0.0,  # no KL term: it is not scaled by the advantage (AggregatedGRPOTrainer refuses beta != 0)
        seed=cell.seed,
        data_seed=cell.seed,
        learning_rate=cell.learning_rate,
        warmup_steps=cell.warmup_steps,
        lr_scheduler_type=cell.lr_scheduler,
        weight_decay=cell.weight_decay,
        max_grad_norm=cell.max_grad_norm,
        optim=cell.optimizer,
        num_generations=cell.num_generations,
        per_device_train_batch_size=cell.micro_batch_size,
        gradient_accumulation_steps=cell.gradient_accumulation_steps,
        steps_per_generation=cell.steps_per_generation,
        num_iterations=cell.num_iterations,
        max_completion_length=cell.max_completion_length,
        epsilon=cell.clip_ratio_low,
        epsilon_high=cell.clip_ratio_high,
        temperature=cell.temperature,
        top_p=cell.top_p,
        scale_rewards=cell.scale_rewards,
        mask_truncated_completions=cell.mask_truncated_completions,
        max_steps=cell.total_steps,
        save_strategy="steps",
        save_steps=cell.save_every,
        save_total_limit=cell.keep_checkpoints,
        ddp_timeout=cell.collective_timeout_minutes * 60,
        logging_steps=1,
        report_to="none",
        bf16=cell.bf16,
        gradient_checkpointing=cell.gradient_checkpointing,
        use_vllm=cell.use_vllm,
        dataloader_num_workers=0,
        # every micro-batch reduces its gradient (balagg.train.memory: without it FSDP2 keeps each parameter's
        # whole gradient, in the reduce dtype, from one micro-batch to the next)
        accelerator_config={"gradient_accumulation_kwargs": {"sync_each_batch": SYNC_EACH_BATCH}},
    )
    if cell.prompt_format().chat_template_kwargs():
        kwargs["chat_template_kwargs"] = cell.prompt_format().chat_template_kwargs()
    if cell.use_vllm:
        kwargs |= dict(
            vllm_mode=cell.vllm_mode,
            vllm_gpu_memory_utilization=cell.vllm_gpu_memory_utilization,
            vllm_importance_sampling_correction=cell.vllm_importance_sampling_correction,
            # the engine's context: the longest prompt kept plus the completion budget (balagg.context)
            vllm_max_model_length=cell.max_prompt_length + cell.max_completion_length,
        )
    return kwargs
