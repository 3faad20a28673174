"""Deliberately built engines for the check's self-test: one correct token mean and three broken ones.

Each fake option claims ``token-agg`` (a token mean over the step's tokens, whatever the split) and gets
its loss from the PPO surrogate at ratio exp(logp - old logp); only the reduction differs:

- ``correct``: token sum / the step's tokens over all ranks x dp size (what verl's engine workers do);
- ``per-micro-batch-mean``: each micro-batch's token mean / gradient accumulation (verl#5625, SkyRL#925,
  OpenRLHF#1249): a mean of micro-batch means;
- ``unmasked-numerator``: the padding columns enter the sum, the denominator counts loss tokens only
  (ROLL#444);
- ``missing-dp-scale``: the token sum / the step's tokens, without the dp size that undoes the ranks'
  gradient average (verl#5366).

The check must pass the first and flag the three others (tests/test_conformance.py).
"""

from __future__ import annotations

import torch

from balagg.conformance.engines.base import Adapter, Option
from balagg.conformance.probe import RankStep

OPTIONS = ("correct", "per-micro-batch-mean", "unmasked-numerator", "missing-dp-scale")


def _step_tokens(step: RankStep) -> torch.Tensor:
    tokens = sum(micro.mask.sum() for micro in step.micro_batches)
    tokens = torch.as_tensor(tokens, dtype=torch.float64).clone()
    if step.distributed:
        import torch.distributed as dist

        dist.all_reduce(tokens)
    return tokens


class FakeEngine(Adapter):
    name = "fake"
    pinned = "-"
    install = "built in"
    packs = True
    fake = True

    def options(self) -> list[Option]:
        return [Option(option, claims="token-agg") for option in OPTIONS]

    def run_rank(self, option: Option, step: RankStep) -> None:
        tokens = _step_tokens(step)
        accumulation = len(step.micro_batches)
        for micro in step.micro_batches:
            if step.packed:
                flat = micro.packed()
                surrogate = -flat["advantages"] * torch.exp(flat["log_prob"] - flat["old_log_prob"])
                mask = flat["mask"].to(torch.float64)
            else:
                surrogate = -micro.advantages[:, None] * torch.exp(micro.log_prob - micro.old_log_prob)
                mask = micro.mask
            if option.option == "correct":
                loss = (surrogate * mask).sum() / tokens * step.ranks
            elif option.option == "per-micro-batch-mean":
                loss = (surrogate * mask).sum() / mask.sum() / accumulation
            elif option.option == "unmasked-numerator":
                loss = surrogate.sum() / tokens * step.ranks
            elif option.option == "missing-dp-scale":
                loss = (surrogate * mask).sum() / tokens
            else:
                raise ValueError(f"fake engine: no option {option.option!r}")
            loss.backward()
