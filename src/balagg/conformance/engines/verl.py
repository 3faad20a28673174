"""verl 0.9.1: every ``loss_agg_mode`` through the engine workers' ``ppo_loss``, and ``agg_loss`` without
the global batch info.

Settings:

- ``engine workers``: ``verl.workers.utils.losses.ppo_loss`` (the loss the FSDP engine calls per
  micro-batch) with the ``vanilla`` policy loss, on a micro-batch TensorDict whose global info is what
  ``FSDPEngine.forward_backward_batch`` assigns (``verl/workers/engine/fsdp/transformer_impl.py``):
  ``batch_num_tokens`` = the step's loss tokens all-reduced over the data-parallel group, ``dp_size``, and
  ``global_batch_size`` = the mini-batch's rows (``ppo_mini_batch_size * rollout.n``). Each micro-batch's
  loss goes to ``backward`` as it is (the engine sums micro-batches), FSDP averages the ranks.
- ``loss_scale_factor=budget`` (``seq-mean-token-sum-norm`` only): the same with the constant set, as
  verl's docs advise for Dr. GRPO.
- ``balagg plug-in``: balagg's own verl plug-in (:mod:`balagg.integrations.verl`): the ``balagg-<rule>``
  advantage estimator folds the rule's weights into verl's GRPO advantages over the whole batch (the
  driver's view; ``balagg_max_length`` = the budget), and the engine workers' ``ppo_loss`` runs the
  ``balagg`` policy loss. Each claims its rule.
- ``without batch info``: the registered ``vanilla`` policy loss with an empty ``global_batch_info``, so
  ``agg_loss`` falls back to the micro-batch's own counts, and the loss scaled by 1 / gradient accumulation
  before ``backward``: the arithmetic of verl's legacy FSDP worker (``dp_actor.update_policy``, removed in
  verl#6067) and of any caller that leaves the counts out (verl#7321).
"""

from __future__ import annotations

from typing import Any

import torch

from balagg.conformance.engines.base import Adapter, Option
from balagg.conformance.probe import RankStep

PROMPT = 2
"""prompt tokens per row in the engine's flat layout"""

CLAIMS = {"token-mean": "token-agg", "token-sum": "token-sum", "seq-mean-token-sum": "seq-mean-token-sum",
          "seq-mean-token-mean": "seq-agg", "seq-mean-token-sum-norm": "dr-grpo"}
"""The rule each mode's name and docs promise (verl's docs present seq-mean-token-sum-norm as Dr. GRPO's)."""

ISSUES = {"token-mean": ("verl#5625", "verl#7321"), "seq-mean-token-sum-norm": ("verl#3741",),
          "token-sum": ("verl#7321",)}
"""verl's issues on each mode: the per-micro-batch token mean of the legacy worker and of agg_loss's fallback
without counts (#5625, #7321), the padded width as seq-mean-token-sum-norm's divisor (#3741)."""


class VerlEngine(Adapter):
    name = "verl"
    distribution = "verl"
    pinned = "0.9.1"
    install = "pip install 'balagg[verl]' in an environment of its own (verl 0.9.1 pins an older transformers)"

    def load(self) -> None:
        core_algos = self.import_module("verl.trainer.ppo.core_algos")
        losses = self.import_module("verl.workers.utils.losses")
        self.agg_loss = self.require(core_algos, "agg_loss", ("loss_mat", "loss_mask", "loss_agg_mode", "dp_size",
                                                              "batch_num_tokens", "global_batch_size",
                                                              "loss_scale_factor"))
        self.ppo_loss = self.require(losses, "ppo_loss", ("config", "model_output", "data"))
        self.policy_loss = core_algos.get_policy_loss_fn("vanilla")
        self.ActorConfig = self.import_module("verl.workers.config").ActorConfig
        self.TensorDict = self.import_module("tensordict").TensorDict
        self.tu = self.import_module("verl.utils.tensordict_utils")

    def options(self) -> list[Option]:
        options = []
        for mode, claim in CLAIMS.items():
            options.append(Option(f"loss_agg_mode={mode}", "engine workers", claim, ISSUES.get(mode, ()),
                                  values={"mode": mode, "path": "engine"}))
        options.append(Option("loss_agg_mode=seq-mean-token-sum-norm", "loss_scale_factor=budget", "dr-grpo",
                              values={"mode": "seq-mean-token-sum-norm", "path": "engine", "scale": "budget"}))
        for mode, claim in CLAIMS.items():
            options.append(Option(f"loss_agg_mode={mode}", "without batch info", claim, ISSUES.get(mode, ()),
                                  values={"mode": mode, "path": "no-info"}))
        from balagg.aggregation.rules import AGGREGATORS

        for rule in AGGREGATORS:
            if rule.verl_estimator:
                setting = "balagg plug-in" + (", balagg_max_length=budget" if rule.needs_max_length else "")
                options.append(Option(f"adv_estimator=balagg-{rule.name}", setting, rule.name,
                                      values={"mode": "token-mean", "path": "engine", "plugin": rule.name}))
        return options

    def _plugin_advantages(self, option: Option, step: RankStep) -> dict[int, torch.Tensor]:
        """Each row's advantages [W] as the plug-in's estimator folds them over the whole batch."""
        from balagg.integrations import verl as plugin

        order = step.order
        mask = step.batch.mask(step.width)[order]
        advantages = step.batch.advantages[order][:, None] * mask
        uids = [f"p{int(g)}" for g in step.batch.group_ids[order]]
        folded = plugin.fold_rule_weights(advantages, mask, uids, option.values["plugin"],
                                          max_length=step.batch.budget)
        return {int(row): folded[index] for index, row in enumerate(order)}

    def _config(self, option: Option, step: RankStep) -> Any:
        rows = step.micro_batches[0].mask.shape[0]
        group = int((step.batch.group_ids == 0).sum())
        scale = step.batch.budget if option.values.get("scale") == "budget" else None
        extra = {}
        if "plugin" in option.values:
            from balagg.integrations import verl as plugin  # registers the estimators and the policy loss

            PolicyLossConfig = self.import_module("verl.workers.config.actor").PolicyLossConfig
            extra["policy_loss"] = PolicyLossConfig(loss_mode=plugin.POLICY_LOSS)
        return self.ActorConfig(strategy="fsdp", ppo_mini_batch_size=step.batch.size // group,
                                ppo_micro_batch_size_per_gpu=rows, rollout_n=group,
                                loss_agg_mode=option.values["mode"], clip_ratio_low=0.2, clip_ratio_high=0.28,
                                clip_ratio_c=3.0, loss_scale_factor=scale, **extra)

    def run_rank(self, option: Option, step: RankStep) -> None:
        config = self._config(option, step)
        if option.values["path"] == "no-info":
            for micro in step.micro_batches:
                config.global_batch_info.clear()
                advantages = micro.advantages[:, None] * micro.mask
                loss, _ = self.policy_loss(micro.old_log_prob, micro.log_prob, advantages, micro.mask.bool(),
                                           option.values["mode"], config, None)
                (loss / len(step.micro_batches)).backward()
            return
        if "plugin" in option.values:
            folded = self._plugin_advantages(option, step)
        tokens = torch.stack([micro.mask.sum() for micro in step.micro_batches]).sum()
        if step.distributed:  # FSDPEngine.forward_backward_batch: all_reduce over the dp group
            import torch.distributed as dist

            dist.all_reduce(tokens)
        for micro in step.micro_batches:
            rows, width = micro.mask.shape
            lengths = micro.lengths
            flat = torch.cat([torch.cat([micro.log_prob.new_zeros(PROMPT - 1), micro.log_prob[i, : int(n)],
                                         micro.log_prob.new_zeros(1)]) for i, n in enumerate(lengths)])
            data = self.TensorDict({
                "prompts": torch.ones(rows, PROMPT, dtype=torch.long),
                "responses": torch.ones(rows, width, dtype=torch.long),
                "attention_mask": torch.cat([torch.ones(rows, PROMPT, dtype=torch.long), micro.mask.long()], dim=1),
                "response_mask": micro.mask.long(),
                "old_log_probs": micro.old_log_prob,
                "advantages": (torch.stack([folded[int(row)] for row in micro.rows]) if "plugin" in option.values
                               else micro.advantages[:, None] * micro.mask),
            }, batch_size=[rows])
            self.tu.assign_non_tensor(data, dp_size=step.ranks, batch_num_tokens=int(tokens.item()),
                                      global_batch_size=step.batch.size)
            loss, _ = self.ppo_loss(config, {"log_probs": flat, "entropy": torch.zeros_like(flat)}, data)
            loss.backward()
