"""OpenRLHF 0.11.2: ``PolicyLoss`` with ``token_level_loss`` on and off, with and without the optimizer-step
normalisers.

The PPO actor pairs every micro-batch with the normalisers of its optimizer step,
``iter_grad_accum_global_norm`` (``openrlhf/utils/loss_utils.py``: the window's loss tokens and non-empty
sequences, all-reduced over the data-parallel group, divided by the gradient accumulation), and passes
them to ``PolicyLoss.forward`` (``openrlhf/models/loss.py``, which reduces with ``aggregate_loss``).
DeepSpeed then scales each backward by 1 / gradient accumulation and averages the ranks' gradients; the
adapter writes out that 1 / gas. The setting ``without batch info`` calls ``PolicyLoss`` with its defaults
(each micro-batch normalised by itself), as the actor did before the normalisers were added (OpenRLHF#1249)
and as its dynamic-batch path still does when the replay buffer has no counts.

Imports: the package ``__init__``s of ``openrlhf.models`` and ``openrlhf.utils`` (the actor model,
DeepSpeed strategy, transformers) are skipped; deepspeed is an inert stub where not installed.
"""

from __future__ import annotations

from types import SimpleNamespace

from balagg.conformance.engines.base import Adapter, Option
from balagg.conformance.probe import RankStep

STUBS = ("deepspeed",)


class OpenRLHFEngine(Adapter):
    name = "openrlhf"
    distribution = "openrlhf"
    pinned = "0.11.2"
    install = "pip install --no-deps openrlhf==0.11.2 (its loss code needs torch only)"

    def load(self) -> None:
        self.prepare_imports(STUBS, ["openrlhf.models", "openrlhf.utils"])
        loss = self.import_module("openrlhf.models.loss")
        self.PolicyLoss = loss.PolicyLoss
        self.require(loss, "PolicyLoss.forward", ("log_probs", "old_log_probs", "advantages", "action_mask",
                                                  "dp_size", "batch_num_tokens", "global_batch_size"))
        self.window = self.require(self.import_module("openrlhf.utils.loss_utils"), "iter_grad_accum_global_norm",
                                   ("data_iter", "strategy", "accumulated_gradient", "mask_fn"))

    def options(self) -> list[Option]:
        options = []
        for token_level, claim in ((True, "token-agg"), (False, "seq-agg")):
            for setting, issues in (("optimizer-step normalisers", ()), ("without batch info", ("OpenRLHF#1249",))):
                options.append(Option(f"token_level_loss={token_level}", setting, claim, issues,
                                      values={"token_level": token_level, "window": setting != "without batch info"}))
        return options

    def run_rank(self, option: Option, step: RankStep) -> None:
        policy_loss = self.PolicyLoss(clip_eps_low=0.2, clip_eps_high=0.28,
                                      token_level_loss=option.values["token_level"])
        gas = len(step.micro_batches)
        if option.values["window"]:
            pairs = self.window(iter(step.micro_batches), SimpleNamespace(), gas, lambda micro: micro.mask)
        else:
            pairs = ((micro, {}) for micro in step.micro_batches)
        for micro, info in pairs:
            advantages = micro.advantages[:, None] * micro.mask
            loss = policy_loss(micro.log_prob, micro.old_log_prob, advantages, action_mask=micro.mask, **info)[0]
            (loss / gas).backward()  # DeepSpeed's backward scales by 1 / gradient accumulation
