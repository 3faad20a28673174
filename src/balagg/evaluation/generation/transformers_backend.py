"""Transformers backend for ``balagg.evaluation.generation.generate``: batched ``model.generate`` on a CPU.

Sampling is done by :class:`SeededSampler`, a logits processor that draws each row's next token from
that row's own ``torch.Generator`` (seeded with the request's seed) and hands ``generate`` a one-hot
score, so ``generate`` runs its greedy loop. A sample therefore depends on its seed only, not on the
batch it lands in or the global RNG. The draw is inverse-CDF sampling: one uniform per row and step,
over ``softmax(logits / T)`` restricted by top-k and then top-p (the smallest set of most likely tokens
whose probability reaches p). ``T = 0`` is argmax.
"""

from __future__ import annotations

import os

import torch

from balagg.evaluation.generation.requests import Completion, GenerationConfig, Request


class SeededSampler:
    """Logits processor: per-row seeded sampling with temperature, top-k and top-p (see module doc)."""

    def __init__(self, seeds: list[int], temperature: float, top_p: float = 1.0, top_k: int = 0):
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.generators = []
        for seed in seeds:
            generator = torch.Generator()
            generator.manual_seed(seed)
            self.generators.append(generator)

    def next_tokens(self, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        if self.temperature == 0:
            return logits.argmax(dim=-1)
        logits = logits / self.temperature
        if 0 < self.top_k < logits.shape[-1]:
            kth = torch.topk(logits, self.top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        if self.top_p < 1.0:
            mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
            sorted_probs = sorted_probs.masked_fill(mass_before >= self.top_p, 0.0)
        cdf = torch.cumsum(sorted_probs, dim=-1)
        uniforms = torch.stack([torch.rand((), generator=g) for g in self.generators]).unsqueeze(-1)
        position = torch.searchsorted(cdf, uniforms * cdf[:, -1:]).clamp_(max=cdf.shape[-1] - 1)
        return order.gather(-1, position).squeeze(-1)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        chosen = self.next_tokens(scores)
        one_hot = torch.full_like(scores, float("-inf"))
        one_hot.scatter_(-1, chosen.unsqueeze(-1), 0.0)
        return one_hot


class TransformersBackend:
    """Loads the checkpoint once; ``generate(requests)`` returns completions in request order."""

    name = "transformers"

    def __init__(self, checkpoint: str | os.PathLike, config: GenerationConfig, stops: list[int]):
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(config.num_threads)
        dtype = "auto" if config.dtype == "auto" else getattr(torch, config.dtype)
        self.model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=dtype).eval()
        self.config, self.stops = config, stops
        model_config = self.model.config
        self.pad_id = model_config.pad_token_id if model_config.pad_token_id is not None else stops[0]

    @torch.inference_mode()
    def generate(self, requests: list[Request]) -> list[Completion]:
        from transformers import GenerationConfig as HFGenerationConfig

        results: list[Completion | None] = [None] * len(requests)
        # similar prompt lengths share a batch (less padding); results go back to request order
        order = sorted(range(len(requests)), key=lambda i: len(requests[i].prompt_ids))
        for start in range(0, len(order), self.config.batch_size):
            batch = [requests[i] for i in order[start:start + self.config.batch_size]]
            width = max(len(r.prompt_ids) for r in batch)
            input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
            attention = torch.zeros((len(batch), width), dtype=torch.long)
            for row, request in enumerate(batch):  # left padding
                input_ids[row, width - len(request.prompt_ids):] = torch.tensor(request.prompt_ids)
                attention[row, width - len(request.prompt_ids):] = 1
            sampler = SeededSampler([r.seed for r in batch], self.config.temperature,
                                    self.config.top_p, self.config.top_k)
            settings = HFGenerationConfig(do_sample=False, max_new_tokens=max(r.max_new_tokens for r in batch),
                                          eos_token_id=self.stops, pad_token_id=self.pad_id)
            output = self.model.generate(input_ids=input_ids, attention_mask=attention, generation_config=settings,
                                         logits_processor=[sampler])
            for row, request in enumerate(batch):
                results[order[start + row]] = Completion(output[row, width:].tolist())
        return results

    def close(self) -> None:
        del self.model
