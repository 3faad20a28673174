"""SkyRL (``skyrl`` 0.4.0): every ``loss_reduction``.

SkyRL reduces by scaling the advantages: the trainer calls
``apply_loss_reduction_to_advantages_minibatch`` on each whole mini-batch, on the driver, before the
mini-batch is sharded (``skyrl/train/trainer.py::_normalize_advantages``, with ``compute_prompt_boundaries``
of the mini-batch's uids for ``prompt_mean``); each worker then reduces every micro-batch with the
registered ``regular`` policy loss, a masked token sum (``ppo_policy_loss``), and multiplies it by the
data-parallel size before ``backward`` (``grad_sum_correction_factor``, ``workers/worker.py``), since FSDP
averages the ranks. The adapter calls the first two and writes out the third.

Imports: the package ``__init__``s of ``skyrl.backends.skyrl_train.utils`` and ``skyrl.train`` (which pull
in the trainer, Ray and vLLM) are skipped; ray, jaxtyping, loguru, omegaconf and skyrl_gym are inert stubs
where not installed.
"""

from __future__ import annotations

from balagg.conformance.engines.base import Adapter, Option
from balagg.conformance.probe import RankStep

CLAIMS = {"token_mean": "token-agg", "token_mean_legacy": "token-agg-microbatch", "sequence_mean": "seq-agg",
          "seq_mean_token_sum_norm": "dr-grpo", "prompt_mean": "prompt-mean"}
"""SkyRL's docs: token_mean over the mini-batch's tokens, token_mean_legacy per micro-batch then averaged
(kept for reproducing older runs, SkyRL#925/#1296), seq_mean_token_sum_norm over ``max_seq_len`` (Dr. GRPO;
it must be set, SkyRL#1303), prompt_mean a token mean per prompt, prompts averaged."""

STUBS = ("ray", "jaxtyping", "loguru", "omegaconf", "skyrl_gym")


class SkyRLEngine(Adapter):
    name = "skyrl"
    distribution = "skyrl"
    pinned = "0.4.0"
    install = "pip install --no-deps --ignore-requires-python skyrl==0.4.0 numpy pyyaml (its loss code needs no more)"

    def load(self) -> None:
        self.prepare_imports(STUBS, ["skyrl.backends.skyrl_train.utils", "skyrl.train", "skyrl.train.dataset"])
        ppo_utils = self.import_module("skyrl.backends.skyrl_train.utils.ppo_utils")
        self.normalise = self.require(ppo_utils, "apply_loss_reduction_to_advantages_minibatch",
                                      ("advantages", "loss_mask", "loss_reduction", "micro_batch_size", "max_seq_len",
                                       "prompt_boundaries"))
        self.policy_loss = self.require(ppo_utils, "ppo_policy_loss",
                                        ("log_probs", "old_log_probs", "advantages", "config", "loss_mask"))
        self.prompt_boundaries = self.require(self.import_module("skyrl.train.dataset.preprocess"),
                                              "compute_prompt_boundaries", ("uids",))
        self.AlgorithmConfig = self.import_module("skyrl.train.config").AlgorithmConfig

    def options(self) -> list[Option]:
        issues = {"token_mean_legacy": ("SkyRL#925", "SkyRL#1296"), "seq_mean_token_sum_norm": ("SkyRL#1303",),
                  "token_mean": ("SkyRL#1296",)}
        return [Option(f"loss_reduction={reduction}",
                       "max_seq_len=budget" if reduction == "seq_mean_token_sum_norm" else "default", claim,
                       issues.get(reduction, ()), values={"reduction": reduction})
                for reduction, claim in CLAIMS.items()]

    def run_rank(self, option: Option, step: RankStep) -> None:
        reduction = option.values["reduction"]
        config = self.AlgorithmConfig(loss_reduction=reduction, max_seq_len=step.batch.budget, eps_clip_low=0.2,
                                      eps_clip_high=0.28)
        order = step.order
        mask = step.batch.mask(step.width)[order]
        advantages = step.batch.advantages[order][:, None] * mask
        uids = [f"p{int(g)}" for g in step.batch.group_ids[order]]
        rows = step.micro_batches[0].mask.shape[0]
        normalised = self.normalise(advantages=advantages, loss_mask=mask, loss_reduction=reduction,
                                    micro_batch_size=rows, max_seq_len=step.batch.budget,
                                    prompt_boundaries=self.prompt_boundaries(uids))
        position = {int(row): index for index, row in enumerate(order)}
        for micro in step.micro_batches:
            local = normalised[[position[int(row)] for row in micro.rows]]
            loss, _ = self.policy_loss(micro.log_prob, micro.old_log_prob, local, config=config, loss_mask=micro.mask)
            (loss * step.ranks).backward()  # grad_sum_correction_factor = dp_size
