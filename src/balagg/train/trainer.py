"""``AggregatedGRPOTrainer``: TRL's GRPOTrainer with any rule of :mod:`balagg.aggregation`.

Every rule is a per-response weight w_i >= 0 with loss = sum_i w_i sum_t l_it, and the PPO clip is
positively homogeneous in the advantage, so the weight is folded into the advantage:

    A'_i = A_i * w_i * C,      C = P * B_micro * L_max * GA

(P processes, B_micro = per-device batch, L_max = max_completion_length, GA = gradient accumulation
steps; in eval mode B_micro is the eval batch and GA = 1), and the loss is reduced with TRL's
``dr_grpo``, whose normaliser is the constant B_micro * L_max * GA per micro-batch. C cancels that
normaliser and DDP's 1/P average, so one optimiser step's gradient is grad sum_{i in step} w_i sum_t l_it
with the *step's weights* w_i defined below. Lengths and advantages are gathered over processes;
groups of ``num_generations`` are contiguous in the gathered order (TRL's RepeatSampler).

Mini-batches. One generation batch of R responses is consumed by ``mini_batches`` = S / GA optimiser
steps (S = steps_per_generation micro-batches per process, each ``num_iterations`` times). TRL shuffles
single responses before the split; this trainer orders the rows itself (seeded by the global torch RNG,
as TRL) and knows which micro-batch and optimiser step each response lands in:

- ``group_preserving_minibatches=False`` (TRL's order: a random permutation of the responses, the very
  call TRL makes): an optimiser step holds parts of groups, so the rule is applied to the whole
  generation batch and the step's weights are mini_batches x those weights. Each step then carries the
  rule's batch loss in expectation, and with one mini-batch it is exactly the rule (token-agg at scope
  ``batch`` is then TRL's ``dapo`` and seq-agg TRL's ``grpo``, bit for bit in the equivalence tests).
- ``group_preserving_minibatches=True`` (verl's order: whole groups, in a random order of groups): each
  process's share of an optimiser step is whole groups, and the rule is applied to the step's own
  responses. So every optimiser step is the paper's formula over its groups: per-group rules divide by
  the step's number of groups (R / (mini_batches * G), not the generation batch's, which would make
  each step mini_batches times too small), token-agg at scope ``batch`` is the step's token mean
  (verl's mini-batch token-mean), and balanced-agg's sides of every group of the step carry k/G and
  (G-k)/G of that group's 1/#groups share.

``token-agg-microbatch`` (verl's legacy FSDP token-mean) is always applied per optimiser step, from the
actual micro-batches: w_i = 1 / (T_m(i) * GA * P), T_m = tokens of the micro-batch of response i.

Padding and order, none of which changes a weight or a gradient: each micro-batch is trimmed to its own
longest prompt and completion, the no-gradient log-prob pass runs in width-sorted chunks at their own
widths, and each process's rows of an optimiser step are sorted by width before the cut (not for the
micro-batch rules) (:mod:`balagg.train.padding`). The prompt order of an epoch is a function of (seed,
epoch) (:mod:`balagg.train.sampler`), and the seed reaches a colocated vLLM engine
(:mod:`balagg.train.seeding`).

The KL penalty is not multiplied by the advantage, so ``beta`` must be 0; the vLLM importance-sampling
correction multiplies the per-token loss and therefore acts identically under every rule. When it is on,
the share of responses (and of loss tokens) that it masks out is recorded with the batch's statistics
(:func:`importance_sampling_masked_counts`).
"""

from __future__ import annotations

from typing import Any

import torch
from trl import GRPOTrainer
from trl.trainer.utils import split_pixel_values_by_grid, split_tensor_dict, unsplit_pixel_values_by_grid

from balagg.aggregation import aggregation_weights, length_diagnostics
from balagg.aggregation.rules import MICRO_BATCH_RULES, aggregator
from balagg.train.padding import padding_span, row_widths, sort_within_steps, trim_micro_batch
from balagg.train.sampler import EpochRepeatSampler
from balagg.train.seeding import seeded_colocated_engine


def _restore_on_indexed_cpu(storage: Any, location: str) -> Any:
    """torch.load's restore for a ``cpu:N`` location: the storage stays where it is, on the CPU.

    transformers maps a multi-process run's optimizer state to ``args.device`` when it resumes, and
    accelerate names every CPU rank's device ``cpu:0``, a location torch.load has no restore for (it
    raises "don't know how to restore data location ... (tagged with cpu:0)"), so a resumed
    multi-process CPU run would fail. Registered once with ``torch.serialization.register_package``."""
    return storage if location.startswith("cpu:") else None


torch.serialization.register_package(11, lambda _: None, _restore_on_indexed_cpu)


def importance_sampling_masked_counts(ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """What TRL's vLLM IS correction masks out: [masked responses, responses, masked tokens, tokens].

    ``ratio``: TRL's ``importance_sampling_ratio`` for the batch, [B, 1] in the ``sequence_*`` modes or
    [B, T] in the ``token_*`` modes; the ``*_mask`` modes set it to exactly 0 where the ratio left
    [clip_min, clip_max]. ``mask``: [B, T] loss mask. A response counts as masked when every one of its
    loss tokens has ratio 0 (it then carries no gradient); only responses with loss tokens count. The
    counts add up over processes."""
    if (ratio.dim() != 2 or mask.dim() != 2 or ratio.shape[0] != mask.shape[0]
            or ratio.shape[1] not in (1, mask.shape[1])):
        raise ValueError(f"importance_sampling_ratio of shape {tuple(ratio.shape)} does not fit the loss mask "
                         f"{tuple(mask.shape)}")
    loss_tokens = mask.bool()
    zero = (ratio == 0).expand_as(loss_tokens)
    has_tokens = loss_tokens.any(dim=1)
    masked_response = (zero | ~loss_tokens).all(dim=1) & has_tokens
    return torch.stack([masked_response.sum(), has_tokens.sum(), (zero & loss_tokens).sum(),
                        loss_tokens.sum()]).to(torch.float64)


def importance_sampling_masked_fractions(counts: torch.Tensor) -> dict[str, float]:
    """``vllm_is_masked_frac`` (responses) and ``vllm_is_masked_token_frac`` (loss tokens) from
    :func:`importance_sampling_masked_counts` (NaN without responses)."""
    masked, responses, masked_tokens, tokens = (float(c) for c in counts)
    nan = float("nan")
    return {"vllm_is_masked_frac": masked / responses if responses else nan,
            "vllm_is_masked_token_frac": masked_tokens / tokens if tokens else nan}


def rule_settings(alpha: float | None, widths: torch.Tensor) -> dict[str, Any]:
    """What a rule's weights take besides the batch: delta-l-norm's ``alpha`` and the generation batch's
    padded width, its longest completion (``widths``: each row's completion tokens, tool output included;
    TRL pads a rollout batch to the longest; ``seq-mean-token-sum-norm`` divides by it)."""
    width = float(widths.max()) if widths.numel() else 0.0
    return {"alpha": alpha, "padded_width": width if width > 0 else None}


def permute_rows(batch: dict[str, Any], order: torch.Tensor) -> dict[str, Any]:
    """Every per-row value of a TRL batch dict in ``order`` (as TRL's ``shuffle_sequence_dict``: tensors
    with a batch dimension and lists are reordered, 0-dim tensors and None are kept)."""

    def permute(value: Any) -> Any:
        if value is None or (isinstance(value, torch.Tensor) and value.dim() == 0):
            return value
        if isinstance(value, torch.Tensor):
            return value[order.to(value.device)]
        return [value[i] for i in order.tolist()]

    return {key: permute(value) for key, value in batch.items()}


class AggregatedGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose loss aggregation is ``aggregation`` (a balagg rule) at ``scope``, with TRL's
    response-shuffled or verl's group-preserving mini-batches (module docstring).

    After each generation, ``self.generation_stats`` holds the batch's :func:`length_diagnostics`, its
    reward mean, accuracy (when a reward function exposes ``last_correct``), response-token count, the
    weights' token sum per optimiser step and, with the vLLM IS correction, its masked fractions; the
    metrics callback attaches them to every optimiser step trained on that batch.
    """

    def __init__(self, *args: Any, aggregation: str, scope: str | None = None, alpha: float | None = None,
                 group_preserving_minibatches: bool = False, trim_padding: bool = True,
                 length_sorted_microbatches: bool = True, **kwargs: Any) -> None:
        rule = aggregator(aggregation)  # an entry point: a verl alias names its rule, the scope defaults to the rule's
        self.aggregation = rule.name
        self.aggregation_scope = scope if scope is not None else rule.default_scope
        self.aggregation_alpha = alpha  # delta-l-norm's exponent (None: the registry's default)
        self.group_preserving_minibatches = group_preserving_minibatches
        self.trim_padding = trim_padding
        self.length_sorted_microbatches = length_sorted_microbatches
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
        with seeded_colocated_engine(config.seed):  # the cell's seed reaches vLLM's sampling and our row order
            super().__init__(*args, **kwargs)
        per_step = self.args.per_device_train_batch_size * self.args.gradient_accumulation_steps
        whole_steps = self.args.steps_per_generation % self.args.gradient_accumulation_steps == 0
        if (group_preserving_minibatches or self.aggregation in MICRO_BATCH_RULES) and not whole_steps:
            raise ValueError(
                f"steps_per_generation={self.args.steps_per_generation} is not a multiple of "
                f"gradient_accumulation_steps={self.args.gradient_accumulation_steps}: optimiser steps would straddle "
                "generation batches, so per-step weights are undefined")
        if group_preserving_minibatches and per_step % self.num_generations:
            raise ValueError(
                f"group-preserving mini-batches need whole groups per process and optimiser step, but each process "
                f"trains on per_device_train_batch_size * gradient_accumulation_steps = {per_step} responses per "
                f"step, not a multiple of num_generations={self.num_generations}")
        self.generation_stats: dict[str, float] = {}

    @property
    def mini_batches(self) -> float:
        """Optimiser steps per generation batch (S / GA)."""
        return self.args.steps_per_generation / self.args.gradient_accumulation_steps

    def _aggregation_constant(self, mode: str) -> float:
        """C: undoes dr_grpo's B_micro * L_max * GA and DDP's 1/P."""
        processes = self.accelerator.num_processes
        if mode == "train":
            return float(processes * self.args.per_device_train_batch_size * self.max_completion_length
                         * self.args.gradient_accumulation_steps)
        return float(processes * self.args.per_device_eval_batch_size * self.max_completion_length)

    # ---- the prompt order: a function of (seed, epoch), also after a resume ----------------------------

    def _get_train_sampler(self, dataset: Any = None) -> EpochRepeatSampler:
        """TRL's sampler layout (each prompt ``num_generations`` times, each generation batch repeated
        ``num_iterations * steps_per_generation`` times) with an epoch-determined order
        (:class:`~balagg.train.sampler.EpochRepeatSampler`), kept as ``self.train_sampler``."""
        self.train_sampler = EpochRepeatSampler(
            self.train_dataset if dataset is None else dataset, mini_repeat_count=self.num_generations,
            batch_size=self.args.generation_batch_size // self.num_generations,
            repeat_count=self.num_iterations * self.args.steps_per_generation, shuffle=self.shuffle_dataset,
            seed=self.args.seed)
        return self.train_sampler

    def _run_epoch(self, *args: Any, epoch: int, **kwargs: Any) -> Any:
        """Every epoch, also the one a resume starts in, iterates the sampler at its own epoch: accelerate's
        ``set_epoch`` does not reach a sampler behind a resume's skip wrapper over a process shard."""
        sampler = getattr(self, "train_sampler", None)
        if sampler is not None:
            sampler.set_epoch(epoch)
        return super()._run_epoch(*args, epoch=epoch, **kwargs)

    # ---- the generation batch: order, weights, split ------------------------------------------------

    def _prepare_inputs(self, generation_batch: dict[str, torch.Tensor | Any]) -> dict[str, torch.Tensor | Any]:
        """TRL's ``_prepare_inputs`` (train branch) with our row order and weights in place of
        ``shuffle_sequence_dict``; eval is TRL's (weights folded in ``_generate_and_score_completions``)."""
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            batch = split_pixel_values_by_grid(batch)
            order = self._sorted_by_width(self._row_order(batch["completion_ids"].shape[0]), batch)
            batch = permute_rows(self._weight_advantages(batch, order), order)
            batches = split_tensor_dict(batch, self.args.steps_per_generation)
            batches = [unsplit_pixel_values_by_grid(b) for b in batches]
            if self.trim_padding:
                batches = [trim_micro_batch(b, self.pad_to_multiple_of) for b in batches]
            self._buffered_inputs = batches
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    def _row_order(self, rows: int) -> torch.Tensor:
        """The order in which this process trains on its generation batch: TRL's response permutation
        (the same ``torch.randperm`` call, so the same RNG stream), or a permutation of whole groups."""
        if not self.group_preserving_minibatches:
            return torch.randperm(rows)
        if rows % self.num_generations:
            raise ValueError(f"a process's generation batch of {rows} responses is not whole groups of "
                             f"{self.num_generations}")
        groups = torch.randperm(rows // self.num_generations)
        return (groups[:, None] * self.num_generations + torch.arange(self.num_generations)).flatten()

    def _sorted_by_width(self, order: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        """``order`` with each optimiser step's rows (of this process) widest first, so that trimmed
        micro-batches (:mod:`balagg.train.padding`) are narrow. A step's gradient is the sum over its rows
        whatever micro-batch holds them, so this changes no weight and no gradient, except for the
        micro-batch rules, whose weights are defined by the micro-batches (their order is kept)."""
        per_step = self.args.per_device_train_batch_size * self.args.gradient_accumulation_steps
        if (not (self.trim_padding and self.length_sorted_microbatches) or self.aggregation in MICRO_BATCH_RULES
                or self.args.steps_per_generation % self.args.gradient_accumulation_steps):
            return order
        return sort_within_steps(order, row_widths(batch["prompt_mask"], batch["completion_mask"]).cpu(), per_step)

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False, **inputs):
        """TRL's forward; without gradients (the old and reference log-probs of a generation batch, in
        chunks of ``batch_size`` rows) the rows are chunked by width and each chunk runs without its
        padding columns (:func:`~balagg.train.padding.padding_span`); the log-probs and entropies of the
        cut columns, where every row of the chunk is padding and the loss mask is 0, are 0 (a log-prob
        never exceeds 0, so a ratio against them cannot overflow). With gradients the micro-batch has
        been trimmed already (``_prepare_inputs``)."""
        parent = super()._get_per_token_logps_and_entropies
        if (torch.is_grad_enabled() or not self.trim_padding or compute_aux_loss
                or any(value is not None for value in inputs.values())):
            return parent(model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                          compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **inputs)
        rows, prompt_width = input_ids.shape[0], input_ids.shape[1] - logits_to_keep
        prompt_mask, completion_mask = attention_mask[:, :prompt_width], attention_mask[:, prompt_width:]
        order = torch.argsort(row_widths(prompt_mask, completion_mask), descending=True, stable=True)
        logps = entropies = None
        for start in range(0, rows, batch_size or rows):
            chunk = order[start:start + (batch_size or rows)]
            lead, keep = padding_span(prompt_mask[chunk], completion_mask[chunk], self.pad_to_multiple_of)
            columns = slice(lead, prompt_width + keep)
            chunk_logps, chunk_entropies, _ = parent(model, input_ids[chunk, columns], attention_mask[chunk, columns],
                                                     keep, compute_entropy=compute_entropy)
            if logps is None:
                logps = chunk_logps.new_zeros(rows, logits_to_keep)
                entropies = chunk_entropies.new_zeros(rows, logits_to_keep) if compute_entropy else None
            logps[chunk, :keep] = chunk_logps
            if compute_entropy:
                entropies[chunk, :keep] = chunk_entropies
        return logps, entropies, None

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:  # weighted in _prepare_inputs, once the rows' micro-batches are known
            return output
        rows = output["completion_ids"].shape[0]
        return self._weight_advantages(output, torch.arange(rows))

    def _weight_advantages(self, output: dict[str, Any], order: torch.Tensor) -> dict[str, Any]:
        """Fold the rule's weights into this process's advantages (rows still in generation order;
        ``order`` is the order they will be trained in, which fixes micro-batches and optimiser steps)."""
        mode = "train" if self.model.training else "eval"
        mask, tool_mask = output["completion_mask"], output.get("tool_mask")
        local_widths = mask.sum(dim=1)  # completion tokens, tool output included: what the rows are padded to
        local_lengths = local_widths if tool_mask is None else (mask * tool_mask).sum(dim=1)
        local_advantages = output["advantages"]
        if local_advantages.dim() != 1:
            raise ValueError("AggregatedGRPOTrainer expects one advantage per response")
        rows = local_lengths.numel()
        micro_batch, step = self._local_layout(order, mode)
        device = local_lengths.device
        gather = self.accelerator.gather
        lengths = gather(local_lengths).cpu()
        widths = lengths if local_widths is local_lengths else gather(local_widths).cpu()
        advantages = gather(local_advantages).cpu()
        micro_batches = gather(micro_batch.to(device)).cpu()
        steps = gather(step.to(device)).cpu()
        group_ids = torch.arange(lengths.numel()) // self.num_generations
        if mode == "train":
            weights = self.step_weights(lengths, advantages, group_ids, micro_batches, steps, widths=widths)
        else:  # one evaluation batch: the rule over it
            weights = aggregation_weights(self.aggregation, lengths, advantages, group_ids, scope=self.aggregation_scope,
                                          max_length=self.max_completion_length, micro_batch_ids=micro_batches,
                                          **rule_settings(self.aggregation_alpha, widths))
        start = self.accelerator.process_index * rows
        local_weights = weights[start:start + rows].to(local_advantages.device)
        scale = local_weights.to(local_advantages.dtype) * self._aggregation_constant(mode)
        output = dict(output, advantages=local_advantages * scale)
        if mode == "train":  # the statistics of the batch the next optimiser steps train on
            self._record_generation_stats(mode, lengths, advantages, group_ids, weights, output)
        return output

    def _local_layout(self, order: torch.Tensor, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Global micro-batch id and optimiser step (within the generation batch) of each local row."""
        rows = order.numel()
        if mode != "train":
            rank = self.accelerator.process_index
            return torch.full((rows,), rank, dtype=torch.long), torch.zeros(rows, dtype=torch.long)
        position = torch.empty(rows, dtype=torch.long)
        position[order] = torch.arange(rows)
        chunk = position // self.args.per_device_train_batch_size  # TRL's split into S micro-batches
        micro_batch = self.accelerator.process_index * self.args.steps_per_generation + chunk
        return micro_batch, chunk // self.args.gradient_accumulation_steps

    def step_weights(self, lengths: torch.Tensor, advantages: torch.Tensor, group_ids: torch.Tensor,
                     micro_batches: torch.Tensor, steps: torch.Tensor, widths: torch.Tensor | None = None
                     ) -> torch.Tensor:
        """Each response's weight in the gradient of the optimiser step it is trained in (gathered rows).

        Applied per optimiser step (``steps``) for group-preserving mini-batches and for micro-batch
        rules; otherwise over the whole generation batch, times the number of mini-batches. ``widths``:
        each row's completion tokens with tool output (default ``lengths``, the loss tokens), whose largest
        is the padded width (:func:`rule_settings`)."""
        rule, scope, max_length = self.aggregation, self.aggregation_scope, self.max_completion_length
        settings = rule_settings(self.aggregation_alpha, lengths if widths is None else widths)
        if not (self.group_preserving_minibatches or rule in MICRO_BATCH_RULES):
            return aggregation_weights(rule, lengths, advantages, group_ids, scope=scope,
                                       max_length=max_length, **settings) * self.mini_batches
        weights = torch.zeros(lengths.numel(), dtype=advantages.dtype)
        for step in steps.unique():
            rows = steps == step
            weights[rows] = aggregation_weights(rule, lengths[rows], advantages[rows], group_ids[rows], scope=scope,
                                                max_length=max_length, micro_batch_ids=micro_batches[rows], **settings)
        return weights

    def _record_generation_stats(self, mode: str, lengths: torch.Tensor, advantages: torch.Tensor,
                                 group_ids: torch.Tensor, weights: torch.Tensor, output: dict[str, Any]) -> None:
        stats = length_diagnostics(lengths, advantages, group_ids, max_length=self.max_completion_length)
        stats["response_tokens"] = float(lengths.sum())
        # sum_i w_i |o_i| per optimiser step (1 for seq-agg, balanced-agg and token-agg)
        stats["token_weight_sum"] = float((weights.double() * lengths.double()).sum()) / self.mini_batches
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
        ratio = output.get("importance_sampling_ratio")
        if ratio is not None:  # vLLM with the IS correction on
            mask = output["completion_mask"]
            if output.get("tool_mask") is not None:
                mask = mask * output["tool_mask"]
            counts = importance_sampling_masked_counts(ratio, mask).to(self.accelerator.device)
            stats.update(importance_sampling_masked_fractions(self.accelerator.reduce(counts, reduction="sum").cpu()))
        self.generation_stats = stats
