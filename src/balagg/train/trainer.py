"""``AggregatedGRPOTrainer``: TRL's GRPOTrainer with any rule of :mod:`balagg.aggregation`.

Every rule is a per-response weight w_i >= 0 with loss = sum_i w_i sum_t l_it, and the PPO clip is
positively homogeneous in the advantage, so the weight is folded into the advantage:

    A'_i = A_i * w_i * C,      C = P * B_micro * L_max * S

(P processes, B_micro = per-device batch, L_max = max_completion_length, S = steps_per_generation; in
eval mode B_micro is the eval batch and S = 1), and the loss is reduced with TRL's ``dr_grpo``, whose
normaliser is the constant B_micro * L_max * GA per micro-batch. C cancels that normaliser, DDP's 1/P
average and the split of the generation batch into S micro-batches, so one optimiser step's gradient is
(S / GA) * grad sum_{i in its micro-batches} w_i sum_t l_it -- the whole generation batch's weighted sum
when S == GA, and TRL ``dapo``'s convention otherwise. The weights are computed from the *whole*
generation batch (lengths and advantages gathered over processes, groups of ``num_generations``
contiguous in the gathered order), so shuffling, micro-batching and sharding change nothing.

The KL penalty is not multiplied by the advantage, so ``beta`` must be 0; the vLLM importance-sampling
correction multiplies the per-token loss and therefore acts identically under every rule.
"""

from __future__ import annotations

from typing import Any

import torch
from trl import GRPOTrainer

from balagg.aggregation import DEFAULT_SCOPES, aggregation_weights, canonical_rule, length_diagnostics


class AggregatedGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose loss aggregation is ``aggregation`` (a balagg rule) at ``scope``.

    After each generation, ``self.generation_stats`` holds the batch's :func:`length_diagnostics`, its
    reward mean, accuracy (when a reward function exposes ``last_correct``), response-token count and
    the weights' sum; the metrics callback attaches them to every optimiser step trained on that batch.
    """

    def __init__(self, *args: Any, aggregation: str, scope: str | None = None, **kwargs: Any) -> None:
        self.aggregation = canonical_rule(aggregation)
        self.aggregation_scope = scope if scope is not None else DEFAULT_SCOPES[self.aggregation]
        config = kwargs.get("args", args[1] if len(args) > 1 else None)
        if config is None:
            raise ValueError("AggregatedGRPOTrainer needs an explicit GRPOConfig (args) with loss_type='dr_grpo'")
        if config.loss_type != "dr_grpo":
            raise ValueError(
                f"AggregatedGRPOTrainer needs loss_type='dr_grpo' (a constant normaliser the weights undo), "
                f"got {config.loss_type!r}"
            )
        if config.beta != 0.0:
            raise ValueError(
                f"beta={config.beta} is not supported: the KL penalty is not scaled by the advantage, so the "
                "aggregation weights would not apply to it; set beta=0"
            )
        if getattr(config, "use_liger_kernel", False):
            raise ValueError("use_liger_kernel bypasses the dr_grpo loss; it cannot be combined with aggregation rules")
        super().__init__(*args, **kwargs)
        self.generation_stats: dict[str, float] = {}

    def _aggregation_constant(self, mode: str) -> float:
        """C: undoes dr_grpo's B_micro * L_max * GA, DDP's 1/P and the split into S micro-batches."""
        processes = self.accelerator.num_processes
        if mode == "train":
            return float(processes * self.args.per_device_train_batch_size * self.max_completion_length
                         * self.args.steps_per_generation)
        return float(processes * self.args.per_device_eval_batch_size * self.max_completion_length)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        return self._weight_advantages(super()._generate_and_score_completions(inputs))

    def _weight_advantages(self, output: dict[str, Any]) -> dict[str, Any]:
        """Fold the rule's weights (from the whole gathered generation batch) into this rank's advantages."""
        mode = "train" if self.model.training else "eval"
        mask = output["completion_mask"]
        if output.get("tool_mask") is not None:
            mask = mask * output["tool_mask"]
        local_lengths = mask.sum(dim=1)
        local_advantages = output["advantages"]
        if local_advantages.dim() != 1:
            raise ValueError("AggregatedGRPOTrainer expects one advantage per response")
        lengths = self.accelerator.gather(local_lengths).cpu()
        advantages = self.accelerator.gather(local_advantages).cpu()
        group_ids = torch.arange(lengths.numel()) // self.num_generations
        weights = aggregation_weights(
            self.aggregation, lengths, advantages, group_ids,
            scope=self.aggregation_scope, max_length=self.max_completion_length,
        )
        start = self.accelerator.process_index * local_lengths.numel()
        local_weights = weights[start:start + local_lengths.numel()].to(local_advantages.device)
        scale = local_weights.to(local_advantages.dtype) * self._aggregation_constant(mode)
        output = dict(output, advantages=local_advantages * scale)
        if mode == "train":  # the statistics of the batch the next optimiser steps train on
            self._record_generation_stats(mode, lengths, advantages, group_ids, weights)
        return output

    def _record_generation_stats(self, mode: str, lengths: torch.Tensor, advantages: torch.Tensor,
                                 group_ids: torch.Tensor, weights: torch.Tensor) -> None:
        stats = length_diagnostics(lengths, advantages, group_ids, max_length=self.max_completion_length)
        stats["response_tokens"] = float(lengths.sum())
        stats["token_weight_sum"] = float((weights.double() * lengths.double()).sum())
        for name, key in (("reward_mean", "reward"), ("reward_std", "reward_std"),
                          ("frac_reward_zero_std", "frac_reward_zero_std"),
                          ("truncation_rate", "completions/clipped_ratio")):
            values = self._metrics[mode].get(key)
            stats[name] = float(values[-1]) if values else float("nan")
        correct = [getattr(f, "last_correct", None) for f in self.reward_funcs]
        correct = [c for c in correct if c is not None]
        if correct:
            flags = torch.tensor(correct[0], dtype=torch.float32, device=self.accelerator.device)
            stats["accuracy"] = float(self.accelerator.gather(flags).mean())
        self.generation_stats = stats
