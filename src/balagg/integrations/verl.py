"""balagg's aggregation rules inside verl (0.9.1), exact against verl's own loss code.

Two Hydra overrides select a rule (docs/verl.md)::

    algorithm.adv_estimator=balagg-balanced-agg        # or balagg-seq-agg, balagg-token-agg, ...
    actor_rollout_ref.actor.policy_loss.loss_mode=balagg

Importing this module registers, with verl's own registries in ``verl.trainer.ppo.core_algos``:

- an advantage estimator ``balagg-<rule>`` per rule (:func:`register_adv_est`). It computes verl's GRPO
  advantages (:func:`compute_grpo_outcome_advantage`, honouring ``algorithm.norm_adv_by_std_in_grpo``),
  groups the responses by verl's ``uid``, and folds the rule's per-response weight into them:

      A'_i = A_i * w_i * B        (w_i = balagg.aggregation.aggregation_weights, B = responses in the batch)

- a policy loss ``balagg`` (:func:`register_policy_loss`): verl's ``vanilla`` dual-clip PPO loss, reduced
  with verl's ``agg_loss`` in mode ``seq-mean-token-sum`` (:data:`POLICY_AGG_MODE`) and the actor's global
  batch info, whatever the actor's ``loss_agg_mode``. The rule's reduction lives in the policy loss itself,
  the way verl's SAPO loss fixes its own (``seq-mean-token-mean``; verl's GSPO loss did too in earlier
  releases); the actor's ``loss_agg_mode`` (verl's default ``token-mean``) then reduces only the entropy
  bonus and the KL loss.

verl's ``seq-mean-token-sum`` divides each mini-batch's token sums by its number of sequences, and that
number is a constant on both of verl's actor paths, whatever ``loss_agg_mode`` the actor is given:

- engine workers (verl >= 0.8, the only path in 0.9.1): ``global_batch_info`` carries
  ``global_batch_size`` = ``ppo_mini_batch_size * rollout.n`` and ``dp_size`` D; each micro-batch loss is
  ``sum / global_batch_size * D``, summed over micro-batches, averaged over the D ranks by FSDP;
- the legacy FSDP worker (``trainer.use_legacy_worker_impl`` enable/auto, verl < 0.8): no global info;
  each micro-batch of m rows is reduced as ``sum / m`` and scaled by ``m / mini_rows_per_rank``
  (``1 / gradient_accumulation``, or the dynamic-batch ratio), then averaged over ranks.

Either way the policy term of one mini-batch of M = ``ppo_mini_batch_size * rollout.n`` responses is

    (B / M) * sum_{i in mini-batch} w_i * sum_t l_it,

which is exactly the rule's loss ``sum_i w_i sum_t l_it`` when the mini-batch is the whole batch
(``ppo_mini_batch_size == data.train_batch_size``), and otherwise that loss's share of the step, scaled
so that every mini-batch is on the scale of a whole batch. (The PPO clip is positively homogeneous in
the advantage, so folding w_i into A_i scales each token's clipped surrogate by w_i exactly.)

verl adds its regularisers to that term, each reduced by ``agg_loss`` with the actor's ``loss_agg_mode``
(``workers/utils/losses.py::ppo_loss`` on the engine workers, ``dp_actor.update_policy`` on the legacy
worker), and scales the sum per micro-batch as above:

    loss = (B / M) sum_i w_i sum_t l_it - entropy_coeff * agg(H) + kl_loss_coef * agg(KL).

With ``token-mean``, agg is the mini-batch's token mean on the engine workers, and on the legacy worker
a mean of micro-batch token means (verl#5625): that is verl's own reduction of its regularisers, not
the rule's, and the plug-in leaves it alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from verl.trainer.ppo import core_algos

from balagg.aggregation import aggregation_weights
from balagg.aggregation.rules import AGGREGATORS, aggregator

__all__ = [
    "ENGINE",
    "LEGACY",
    "POLICY_AGG_MODE",
    "POLICY_LOSS",
    "VERL_RULES",
    "actor_path",
    "check_config",
    "check_actor",
    "estimator_name",
    "fold_rule_weights",
    "compute_balagg_advantage",
    "compute_policy_loss_balagg",
]

ENGINE = "engine"
"""verl's engine workers: global token and sequence counts all-reduced over the data-parallel group."""
LEGACY = "legacy"
"""verl's legacy FSDP worker (dp_actor): each micro-batch normalised by itself, scaled by 1 / grad accumulation."""

POLICY_AGG_MODE = "seq-mean-token-sum"
"""The ``agg_loss`` mode the ``balagg`` policy loss reduces with, whatever the actor's ``loss_agg_mode``:
its normaliser (sequences per mini-batch) is constant on both actor paths."""
POLICY_LOSS = "balagg"
"""The registered policy-loss name (``actor_rollout_ref.actor.policy_loss.loss_mode``)."""
ESTIMATOR_PREFIX = "balagg-"

VERL_RULES: tuple[str, ...] = tuple(rule.name for rule in AGGREGATORS if rule.verl_estimator)
"""The rules offered as verl advantage estimators (:attr:`balagg.aggregation.rules.Aggregator.verl_estimator`)."""


def estimator_name(rule: str) -> str:
    """The ``algorithm.adv_estimator`` value of ``rule`` (a balagg name or a verl alias)."""
    rule = aggregator(rule).name
    if rule not in VERL_RULES:
        raise ValueError(f"rule {rule!r} has no verl estimator; use one of {', '.join(VERL_RULES)}")
    return ESTIMATOR_PREFIX + rule


def _first_token_values(token_values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """The per-response scalar of a [B, T] tensor broadcast over each response's tokens (0 for an empty
    response), read at the first valid token as verl does (trainer/ppo/v1/utils.py)."""
    first = response_mask.to(torch.int64).argmax(dim=-1, keepdim=True)
    values = token_values.gather(-1, first).squeeze(-1)
    return torch.where(response_mask.sum(-1) > 0, values, torch.zeros_like(values))


ALPHA_KEY = "balagg_alpha"
"""The ``algorithm`` config key of delta-l-norm's alpha (``+algorithm.balagg_alpha=0.75``; default
:data:`balagg.aggregation.rules.ALPHA`)."""
MAX_LENGTH_KEY = "balagg_max_length"
"""The ``algorithm`` config key of the generation budget of ``dr-grpo`` and ``delta-l-norm``
(``+algorithm.balagg_max_length=<rollout.response_length>``; default: the batch's padded width, which is
``rollout.response_length`` when verl pads rollouts to it)."""


def fold_rule_weights(
    advantages: torch.Tensor, response_mask: torch.Tensor, index: Any, rule: str, alpha: float | None = None,
    max_length: float | None = None,
) -> torch.Tensor:
    """Token-level advantages [B, T] times ``w_i * B``, where w_i is ``rule``'s weight of response i
    (at the rule's default scope, groups from ``index``, lengths from ``response_mask``).

    ``seq-mean-token-sum-norm`` divides by the batch's padded width, ``response_mask.shape[-1]``, as verl's
    own mode does. The rules with a constant length (``dr-grpo``, ``delta-l-norm``) take ``max_length``
    (:data:`MAX_LENGTH_KEY`), by default that same width: verl's rollouts pad every response to
    ``rollout.response_length``, the generation budget (the ΔL authors' code divides by it too).
    ``alpha``: delta-l-norm's exponent.

    Reduced by the ``balagg`` policy loss over a mini-batch of M responses the loss is then
    ``(B / M) sum_i w_i sum_t l_it`` (module docstring)."""
    if advantages.dim() != 2 or advantages.shape != response_mask.shape:
        raise ValueError(
            f"advantages {tuple(advantages.shape)} and response_mask {tuple(response_mask.shape)} must both be [batch, tokens]"
        )
    record = aggregator(rule)
    lengths = response_mask.sum(-1)
    scalar = _first_token_values(advantages, response_mask)
    width = advantages.shape[-1]
    weights = aggregation_weights(record.name, lengths, scalar, list(index), scope=record.default_scope,
                                  max_length=width if max_length is None else max_length, padded_width=width,
                                  alpha=alpha)
    scale = (weights.to(torch.float64) * advantages.shape[0]).to(advantages.dtype)
    return advantages * scale.unsqueeze(-1)


def compute_balagg_advantage(
    rule: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    config: Any = None,
    **unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's GRPO advantages with ``rule``'s weights folded in (the ``balagg-<rule>`` estimators).

    ``index`` is verl's ``uid`` array (one group per prompt); ``config`` is verl's ``AlgoConfig``, read for
    ``norm_adv_by_std_in_grpo``, :data:`ALPHA_KEY` and :data:`MAX_LENGTH_KEY`.
    Returns (advantages, returns), both the folded advantages as verl's GRPO
    returns them twice."""
    norm_by_std = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
    alpha = None if config is None else config.get(ALPHA_KEY, None)
    max_length = None if config is None else config.get(MAX_LENGTH_KEY, None)
    advantages, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=token_level_rewards,
        response_mask=response_mask,
        index=index,
        norm_adv_by_std_in_grpo=norm_by_std,
        config=config,
    )
    folded = fold_rule_weights(advantages, response_mask, index, rule, alpha=None if alpha is None else float(alpha),
                               max_length=None if max_length is None else float(max_length))
    return folded, folded


def _get(config: Any, dotted: str, default: Any = None) -> Any:
    node = config
    for key in dotted.split("."):
        if node is None:
            return default
        node = node.get(key, None) if hasattr(node, "get") else getattr(node, key, None)
    return default if node is None else node


def actor_path(config: Any) -> str:
    """Which actor path a full verl config (the Hydra ``DictConfig`` or a nested dict) runs:
    :data:`LEGACY` where ``trainer.use_legacy_worker_impl`` is ``enable`` or ``auto`` (verl < 0.8, whose
    ``auto`` meant the legacy FSDP worker), :data:`ENGINE` where it is ``disable`` or absent (verl 0.9.1
    has no legacy worker and no such key)."""
    setting = _get(config, "trainer.use_legacy_worker_impl")
    if setting is None or setting == "disable":
        return ENGINE
    if setting in ("enable", "auto"):
        return LEGACY
    raise ValueError(f"trainer.use_legacy_worker_impl={setting!r}: expected enable, auto or disable")


def check_config(config: Any) -> str:
    """Validate a full verl config for the plug-in; return its actor path (:func:`actor_path`).

    Raises ValueError, naming the key, for every setting under which the policy term would not be exactly
    the rule's ``sum_i w_i sum_t l_it`` (see the module docstring). The actor's ``loss_agg_mode``,
    ``entropy_coeff`` and ``use_kl_loss`` are free: they shape only verl's own regularisers."""
    actor = "actor_rollout_ref.actor."
    problems = []
    estimator = str(_get(config, "algorithm.adv_estimator", ""))
    if not estimator.startswith(ESTIMATOR_PREFIX):
        problems.append(f"algorithm.adv_estimator={estimator!r} is not a balagg estimator ({estimator_name('balanced-agg')}, ...)")
    else:
        estimator_name(estimator[len(ESTIMATOR_PREFIX):])  # raises on an unknown rule
    if _get(config, actor + "policy_loss.loss_mode", "vanilla") != POLICY_LOSS:
        problems.append(f"{actor}policy_loss.loss_mode must be {POLICY_LOSS!r}")
    if _get(config, "actor_rollout_ref.rollout.multi_turn.enable", False):
        problems.append("actor_rollout_ref.rollout.multi_turn.enable: multi-turn sessions are not one response per row")
    if problems:
        raise ValueError("balagg verl plug-in: " + "; ".join(problems))
    return actor_path(config)


def check_actor(config: Any, response_mask: torch.Tensor) -> str:
    """Check, inside the policy loss, that this micro-batch's :data:`POLICY_AGG_MODE` reduction has a
    constant normaliser; return the actor path it reads from ``config.global_batch_info`` (empty on the
    legacy worker).

    Raises ValueError for an engine path without ``global_batch_size`` (a per-micro-batch count, summed
    over micro-batches without 1/grad-accumulation) and a legacy micro-batch holding an empty response
    (verl's count would skip it)."""
    problems = []
    info = getattr(config, "global_batch_info", None) or {}
    engine = any(info.get(key) is not None for key in ("dp_size", "batch_num_tokens", "global_batch_size"))
    if engine and info.get("global_batch_size") is None:
        problems.append("engine worker without global_batch_size: each micro-batch would be normalised by itself")
    if not engine and bool((response_mask.sum(-1) == 0).any()):
        problems.append("legacy worker with an empty response in a micro-batch: verl's sequence count would skip it")
    if problems:
        raise ValueError("balagg verl plug-in: " + "; ".join(problems))
    return ENGINE if engine else LEGACY


def compute_policy_loss_balagg(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """verl's ``vanilla`` policy loss on advantages folded by a ``balagg-<rule>`` estimator, reduced with
    :data:`POLICY_AGG_MODE` after :func:`check_actor`. ``loss_agg_mode`` (the actor's) is not used here:
    verl reduces the entropy bonus and KL loss with it. Same signature and metrics as verl's registered
    losses."""
    if config is None:
        raise ValueError("balagg verl plug-in: the policy loss needs the actor config")
    check_actor(config, response_mask)
    return core_algos.compute_policy_loss_vanilla(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=response_mask,
        loss_agg_mode=POLICY_AGG_MODE,
        config=config,
        rollout_is_weights=rollout_is_weights,
    )


def _estimator(rule: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    def estimator(token_level_rewards, response_mask, index, config=None, **unused):
        return compute_balagg_advantage(rule, token_level_rewards, response_mask, index, config, **unused)

    estimator.__name__ = f"compute_{rule.replace('-', '_')}_advantage"
    estimator.__doc__ = f"verl's GRPO advantages with balagg's {rule!r} weights folded in (compute_balagg_advantage)."
    return estimator


ESTIMATORS: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {
    estimator_name(rule): _estimator(rule) for rule in VERL_RULES
}
"""Registered name -> estimator."""


def register() -> None:
    """Register the estimators and the policy loss with verl (idempotent; done on import)."""
    for name, fn in ESTIMATORS.items():
        if core_algos.ADV_ESTIMATOR_REGISTRY.get(name) is not fn:
            core_algos.ADV_ESTIMATOR_REGISTRY.pop(name, None)
            core_algos.register_adv_est(name)(fn)
    core_algos.register_policy_loss(POLICY_LOSS)(compute_policy_loss_balagg)


register()
