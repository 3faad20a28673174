"""TRL 1.16: ``GRPOTrainer._compute_loss`` for every ``loss_type``.

The trainer object is made without ``__init__`` (no model, no generation): its attributes are those
``_compute_loss`` reads, with TRL's ``GRPOConfig`` defaults for the arguments (``beta=0``, no entropy
bonus, no vLLM), and ``_get_per_token_logps_and_entropies`` returns the probe's leaf log-probabilities
in place of a forward pass. ``old_per_token_logps`` is left out, so TRL takes ``per_token_logps.detach()``
itself (on policy). What the adapter writes out, from TRL's loop:

- ``num_items_in_batch = accelerator.gather(loss_mask.sum()).sum()`` over the rank's generation batch
  (``_generate_and_score_completions``), the dapo/cispo/vespo normaliser;
- the loss of each micro-batch goes to ``backward`` as ``_compute_loss`` returns it: TRL's loss is
  already scaled for gradient accumulation (``loss_is_scaled_for_ga``, ``trl/trainer/base_trainer.py``);
- ``steps_per_generation`` = gradient accumulation (one optimiser step per generation batch, TRL's default).
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import torch

from balagg.conformance.engines.base import Adapter, Option
from balagg.conformance.probe import RankStep

CLAIMS = {"grpo": "seq-agg", "dr_grpo": "dr-grpo", "dapo": "token-agg", "bnpo": "token-agg-microbatch",
          "cispo": "token-agg", "vespo": "token-agg", "sapo": "seq-agg", "luspo": None}
"""What TRL's docs say each loss_type normalises by: grpo and sapo per sequence, dr_grpo by
B x max_completion_length, dapo, cispo and vespo by the generation batch's tokens, bnpo by the local
batch's tokens (a micro-batch's, so a mean of micro-batch means); luspo scales by length on purpose."""


class _Accelerator:
    """What ``_compute_loss`` asks of accelerate: the process count, gather and reduce (over gloo when the
    probe runs several ranks)."""

    sync_gradients = True

    def __init__(self, ranks: int, distributed: bool) -> None:
        self.num_processes = ranks
        self.distributed = distributed

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.reshape(-1) if tensor.dim() == 0 else tensor
        if not self.distributed:
            return tensor
        import torch.distributed as dist

        parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, tensor.contiguous())
        return torch.cat(parts)

    gather_for_metrics = gather

    def reduce(self, tensor: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        if not self.distributed:
            return tensor
        import torch.distributed as dist

        tensor = tensor.clone()
        dist.all_reduce(tensor)
        return tensor / dist.get_world_size() if reduction == "mean" else tensor


class TRLEngine(Adapter):
    name = "trl"
    distribution = "trl"
    pinned = "1.16.0"
    install = "pip install 'balagg[train]', which brings trl==1.16.0"

    def load(self) -> None:
        module = self.import_module("trl.trainer.grpo_trainer")
        self.trainer_class = module.GRPOTrainer
        self.require(module, "GRPOTrainer._compute_loss", ("model", "inputs"))
        config = self.import_module("trl").GRPOConfig
        from transformers.utils import logging as transformers_logging

        transformers_logging.set_verbosity_error()  # its note that gloo is up without a DDP launcher
        with tempfile.TemporaryDirectory() as folder:  # TRL's defaults (CPU, so that the config validates)
            self.defaults = config(output_dir=folder, report_to="none", use_cpu=True, bf16=False)

    def options(self) -> list[Option]:
        issues = {"dapo": ("TRL#6439",)}
        notes = {"cispo": "epsilon_high defaults to epsilon, 0.2, which caps every token's weight; TRL's docs "
                          "recommend 5.0 for cispo"}
        options = [Option(f"loss_type={loss}", claims=claim, issues=issues.get(loss, ()), note=notes.get(loss, ""),
                          values={"loss_type": loss}) for loss, claim in CLAIMS.items()]
        # cispo caps each token's IS weight at epsilon_high, which defaults to epsilon (0.2); TRL's docs
        # recommend 5.0 for it (ScaleRL)
        options.append(Option("loss_type=cispo", "epsilon_high=5.0", claims="token-agg",
                              values={"loss_type": "cispo", "epsilon_high": 5.0}))
        return options

    def _trainer(self, loss_type: str, step: RankStep, values: dict[str, Any]) -> Any:
        trainer = object.__new__(self.trainer_class)
        args = SimpleNamespace(**{key: getattr(self.defaults, key) for key in vars(self.defaults)})
        args.steps_per_generation = len(step.micro_batches)
        for key, value in values.items():
            setattr(args, key, value)
        state = {"loss_type": loss_type, "args": args, "beta": 0.0, "epsilon_low": args.epsilon,
                 "epsilon_high": args.epsilon_high if args.epsilon_high is not None else args.epsilon,
                 "importance_sampling_level": args.importance_sampling_level, "top_entropy_quantile": 1.0,
                 "off_policy_mask_threshold": None, "aux_loss_enabled": False, "use_vllm": False,
                 "vllm_importance_sampling_correction": False, "_entropy_bonus_enabled": False,
                 "max_completion_length": step.batch.budget, "model": SimpleNamespace(training=True),
                 "current_gradient_accumulation_steps": len(step.micro_batches),
                 "accelerator": _Accelerator(step.ranks, step.distributed),
                 "_metrics": {"train": defaultdict(list), "eval": defaultdict(list)}}
        trainer.__dict__.update(state)
        return trainer

    def run_rank(self, option: Option, step: RankStep) -> None:
        settings = {key: value for key, value in option.values.items() if key != "loss_type"}
        trainer = self._trainer(option.values["loss_type"], step, settings)
        loss_mask = torch.cat([micro.mask for micro in step.micro_batches])
        num_items_in_batch = trainer.accelerator.gather(loss_mask.sum()).sum()
        for micro in step.micro_batches:
            rows, width = micro.mask.shape

            def forward(model, input_ids, attention_mask, logits_to_keep, *args, log_prob=micro.log_prob, **kwargs):
                return log_prob, torch.zeros_like(log_prob), None

            trainer._get_per_token_logps_and_entropies = forward
            inputs = {"prompt_ids": torch.ones(rows, 1, dtype=torch.long),
                      "prompt_mask": torch.ones(rows, 1, dtype=torch.long),
                      "completion_ids": torch.ones(rows, width, dtype=torch.long),
                      "completion_mask": micro.mask, "advantages": micro.advantages,
                      "num_items_in_batch": num_items_in_batch}
            trainer._compute_loss(None, inputs).backward()
