"""AReaL 1.0.4: the PPO actor's one reduction, padded and packed.

The actor trains each mini-batch with ``train_batch(mb, loss_fn=grpo_loss_fn, loss_weight_fn=lambda x:
x["loss_mask"].count_nonzero())`` (``areal/trainer/ppo/actor.py``). ``grpo_loss_fn`` reduces a micro-batch
with ``ppo_actor_loss_fn`` (``areal/utils/functional/functional.py``): its token mean. The engine weighs
each micro-batch by its share of the step's loss weight, ``compute_total_loss_weight`` all-reduced over
the data-parallel group (``areal/engine/core/train_engine.py``), times the dp size:
``loss * local_weight / total_loss_weight * dp_size`` (``areal/engine/fsdp_engine.py``, written out here).
AReaL packs a micro-batch's sequences into one row (1-D tensors); the ``packed`` layout runs that, the
others a padded 2-D micro-batch, which the loss function takes too. A token mean is the one rule it has
(requests for others: AReaL#1423, #1546).

Imports: the ``__init__``s of the packages in :data:`BARE` are skipped; aiofiles, einops, hydra, lark,
numba, omegaconf, orjson, ray, torchdata, uvloop, transformers and colorlog are inert stubs where not
installed. ``compute_total_loss_weight`` all-reduces unconditionally, so a one-rank run
sets up a one-process gloo group.
"""

from __future__ import annotations

import os
import tempfile
from types import SimpleNamespace

import torch

from balagg.conformance.engines.base import Adapter, Option
from balagg.conformance.probe import RankStep

STUBS = ("aiofiles", "einops", "hydra", "lark", "numba", "omegaconf", "orjson", "ray", "torchdata", "uvloop",
         "transformers", "colorlog")
BARE = ("areal.utils", "areal.utils.functional", "areal.api", "areal.infra", "areal.engine", "areal.engine.core")
"""Packages whose ``__init__`` (the launcher, the engines, the workflow context) is skipped."""


def _one_process_group() -> None:
    import torch.distributed as dist

    if not dist.is_initialized():
        path = os.path.join(tempfile.mkdtemp(prefix="balagg-gloo-"), "init")
        dist.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)


class ArealEngine(Adapter):
    name = "areal"
    distribution = "areal"
    pinned = "1.0.4"
    install = "pip install --no-deps areal==1.0.4 numpy (its loss code needs no more)"
    packs = True

    def load(self) -> None:
        self.prepare_imports(STUBS, BARE)
        functional = self.import_module("areal.utils.functional.functional")
        self.loss_fn = self.require(functional, "ppo_actor_loss_fn",
                                    ("logprobs", "proximal_logprobs", "old_logprobs", "advantages", "eps_clip",
                                     "loss_mask", "eps_clip_higher", "cu_seqlens"))
        self.total_weight = self.require(self.import_module("areal.engine.core.train_engine"),
                                         "compute_total_loss_weight", ("mb_list", "loss_weight_fn", "dp_group"))

    def options(self) -> list[Option]:
        return [Option("ppo_actor_loss_fn", "loss_weight_fn=loss tokens", "token-agg", ("AReaL#1423",))]

    def run_rank(self, option: Option, step: RankStep) -> None:
        if not step.distributed:
            _one_process_group()
        inputs = [micro.packed() if step.packed else
                  {"log_prob": micro.log_prob, "old_log_prob": micro.old_log_prob,
                   "advantages": micro.advantages[:, None] * micro.mask, "mask": micro.mask.bool(), "cu_seqlens": None}
                  for micro in step.micro_batches]
        weight = lambda x: x["loss_mask"].count_nonzero()  # noqa: E731  (the actor's loss_weight_fn)
        mb_list = SimpleNamespace(mbs=[{"loss_mask": data["mask"]} for data in inputs])
        total = self.total_weight(mb_list, weight, None)
        for data in inputs:
            loss, _ = self.loss_fn(logprobs=data["log_prob"], proximal_logprobs=data["old_log_prob"],
                                   old_logprobs=data["old_log_prob"], advantages=data["advantages"], eps_clip=0.2,
                                   loss_mask=data["mask"], eps_clip_higher=0.28, cu_seqlens=data["cu_seqlens"])
            local = weight({"loss_mask": data["mask"]})
            (loss * (local / total * step.ranks)).backward()  # fsdp_engine: loss * local / total * dp_size
