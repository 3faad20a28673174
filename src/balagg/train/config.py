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
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from balagg import contract
from balagg.prompts import ANSWER_FORMATS, DEFAULT_ANSWER_FORMAT, MATH_TEMPLATE, PromptFormat, check_template
from balagg.rules import DEFAULT_SCOPES, SCOPES, canonical_rule

OPERATIONAL_FIELDS = ("time_limit_minutes", "collective_timeout_minutes", "mlflow_tracking_uri", "mlflow_experiment")
"""Fields that change how a job is run or where it is logged, not what it trains (left out of the config
hash, so the hash of a cell does not depend on the checkout's folder or the job's time limit)."""

@dataclass
class CellConfig:
    """Everything one training cell needs. Paths are as given (absolute or relative to the cwd)."""

    # what to train on
    model: str
    train_files: list[str]
    aggregator: str
    seed: int
    output_name: str = ""  # free label for logs; default "<model>/<dataset>/<aggregator>/seed<seed>"
    tokenizer: str | None = None  # default: the model directory
    model_name: str | None = None  # label for tags; default: the model path's last component
    dataset_name: str | None = None  # label for tags; default: the first train file's stem
    scope: str | None = None  # default: DEFAULT_SCOPES[aggregator] (token-agg: batch, others: group)
    max_position_embeddings: int | None = None  # context override (balagg.context); None: the model's own

    # prompt and reward
    prompt_template: str = MATH_TEMPLATE  # the user turn, rendered by balagg.prompts.render_prompt
    use_chat_template: bool = True
    enable_thinking: bool | None = None  # chat template switch (Qwen3); None: the template's default
    answer_format: str = DEFAULT_ANSWER_FORMAT  # one of balagg.prompts.ANSWER_FORMATS (balagg.prompts.answer_for_verifier)
    reward_correct: float = 1.0
    reward_incorrect: float = -1.0  # DAPO's +-1
    overlong_buffer_enabled: bool = True
    overlong_buffer_len: int = 4096
    overlong_penalty_factor: float = 1.0
    verifier_timeout_s: float = contract.VERIFIER.math_timeout_s
    verifier_workers: int = contract.VERIFIER.workers
    verifier: str = contract.VERIFIER.verifier  # module:function; the evaluation's verifier
    scale_rewards: str = "group"  # TRL: "group" (GRPO), "batch", "none" (Dr.GRPO)

    # DAPO recipe knobs
    learning_rate: float = 1e-6
    warmup_steps: int = 10
    lr_scheduler: str = "constant_with_warmup"
    weight_decay: float = 0.1
    max_grad_norm: float = 1.0
    optimizer: str = "adamw_torch"
    num_generations: int = 16
    prompts_per_step: int = 512
    mini_batches: int = 16
    # True: every optimiser step trains on whole groups (a random order of groups, as verl's mini-batches),
    # and each step is the rule over its own groups; False: TRL's shuffle of single responses
    group_preserving_minibatches: bool = False
    micro_batch_size: int = 4
    num_iterations: int = 1
    max_prompt_length: int = 2048
    max_completion_length: int = 20480
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.28
    temperature: float = 1.0
    top_p: float = 1.0
    mask_truncated_completions: bool = False
    total_steps: int = 100

    # checkpoints
    save_every: int = 10  # resumable checkpoints, a multiple of the generation cycle
    keep_checkpoints: int = 2  # resumable checkpoints kept (weights-only eval checkpoints are all kept)
    eval_steps: list[int] = field(default_factory=list)  # evaluated steps (weights-only checkpoints); step 0 always evaluated
    eval_every: int = 0  # also every N steps when > 0 (and the last step)
    # wall-clock limit of one training job (Slurm --time): stop at a resumable checkpoint before it and
    # exit 75 so the workflow's retry resumes (balagg.train.deadline); None: no limit
    time_limit_minutes: int | None = None

    # hardware
    num_processes: int = 1  # data-parallel processes (GPUs); the workflow launches this many
    bf16: bool = False
    gradient_checkpointing: bool = False
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    vllm_gpu_memory_utilization: float = 0.3
    # TRL's vLLM importance-sampling correction (mode sequence_mask: responses whose train/rollout ratio
    # leaves [0, 3] are masked out); its masked fractions are logged per step when on. TRL's default is on.
    vllm_importance_sampling_correction: bool = True
    accelerate_config: str | None = None  # e.g. configs/accelerate/fsdp2.yaml (GPU runs)
    # how long every process waits in one collective (all-reduce, all-gather, barrier) before the job fails:
    # torch.distributed's process-group timeout (transformers' ddp_timeout, whose default is 30 minutes).
    # Ranks wait in one while the main process writes an evaluation checkpoint.
    collective_timeout_minutes: int = 30
    torch_threads: int = 1  # CPU intra-op threads

    # tracking
    mlflow_tracking_uri: str | None = None
    mlflow_experiment: str = "balagg"

    def __post_init__(self) -> None:
        self._check_types()
        self.aggregator = canonical_rule(self.aggregator)
        if self.scope is None:
            self.scope = DEFAULT_SCOPES[self.aggregator]
        if self.scope not in SCOPES:
            raise ValueError(f"cell config: unknown scope {self.scope!r}; valid: {', '.join(SCOPES)}")
        if self.tokenizer is None:
            self.tokenizer = self.model
        if self.model_name is None:
            self.model_name = Path(self.model).name
        if not self.train_files:
            raise ValueError("cell config: train_files is empty")
        if self.dataset_name is None:
            self.dataset_name = Path(self.train_files[0]).stem
        if not self.output_name:
            self.output_name = f"{self.model_name}/{self.dataset_name}/{self.aggregator}/seed{self.seed}"
        if self.answer_format not in ANSWER_FORMATS:
            raise ValueError(f"cell config: answer_format must be one of {ANSWER_FORMATS}, got {self.answer_format!r}")
        check_template(self.prompt_template, ("problem",), "cell config: prompt_template")
        positive = ("num_generations", "prompts_per_step", "mini_batches", "micro_batch_size", "num_iterations",
                    "max_prompt_length", "max_completion_length", "total_steps", "save_every", "keep_checkpoints",
                    "num_processes", "torch_threads", "verifier_workers")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"cell config: {name} must be >= 1, got {getattr(self, name)}")
        if self.num_generations < 2:
            raise ValueError("cell config: num_generations must be >= 2 (group-relative advantages)")
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
        if self.overlong_buffer_enabled and not 0 < self.overlong_buffer_len <= self.max_completion_length:
            raise ValueError(
                f"cell config: overlong_buffer_len={self.overlong_buffer_len} must be in "
                f"(0, max_completion_length={self.max_completion_length}]"
            )
        if self.max_position_embeddings is not None:
            from balagg.context import check_fits

            check_fits(self.model_name, self.max_position_embeddings, self.max_prompt_length,
                       self.max_completion_length, "training", self.max_position_embeddings)
        if self.collective_timeout_minutes < 1:
            raise ValueError(f"cell config: collective_timeout_minutes must be >= 1, got {self.collective_timeout_minutes}")
        if self.time_limit_minutes is not None and self.time_limit_minutes < 1:
            raise ValueError(f"cell config: time_limit_minutes must be >= 1 or null, got {self.time_limit_minutes}")
        if self.verifier_timeout_s <= 0:
            raise ValueError("cell config: verifier_timeout_s must be positive")
        bad_steps = [s for s in self.eval_steps if not 0 <= s <= self.total_steps]
        if bad_steps:
            raise ValueError(f"cell config: eval_steps {bad_steps} are outside [0, total_steps={self.total_steps}]")
        if self.use_vllm and self.vllm_mode not in ("colocate", "server"):
            raise ValueError(f"cell config: vllm_mode must be colocate or server, got {self.vllm_mode!r}")

    def _check_types(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not _matches(value, hints[f.name]):
                raise ValueError(f"cell config: {f.name}={value!r} has the wrong type; expected {hints[f.name]}")

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
        return PromptFormat(chat=self.use_chat_template, enable_thinking=self.enable_thinking)

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


def _matches(value: Any, hint: Any) -> bool:
    """Shallow runtime type check of a JSON value against a field annotation."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_matches(v, item) for v in value)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


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
