"""balagg's aggregation rules inside verl (0.9.1), exact against verl's own loss code.

Three Hydra overrides select a rule (docs/verl.md)::

    algorithm.adv_estimator=balagg-balanced-agg        # or balagg-seq-agg, balagg-token-agg, ...
    actor_rollout_ref.actor.policy_loss.loss_mode=balagg
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum

Importing this module registers, with verl's own registries in ``verl.trainer.ppo.core_algos``:

- an advantage estimator ``balagg-<rule>`` per rule (:func:`register_adv_est`). It computes verl's GRPO
  advantages (:func:`compute_grpo_outcome_advantage`, honouring ``algorithm.norm_adv_by_std_in_grpo``),
  groups the responses by verl's ``uid``, and folds the rule's per-response weight into them:

      A'_i = A_i * w_i * B        (w_i = balagg.aggregation.aggregation_weights, B = responses in the batch)

- a policy loss ``balagg`` (:func:`register_policy_loss`): verl's ``vanilla`` dual-clip PPO loss, after
  checking that the actor reduces with a constant normaliser (below) and refusing any setting where it
  would not.

verl's ``seq-mean-token-sum`` divides each mini-batch's token sums by its number of sequences, and that
number is a constant on both of verl's actor paths:

- engine workers (verl >= 0.8, the only path in 0.9.1): ``global_batch_info`` carries
  ``global_batch_size`` = ``ppo_mini_batch_size * rollout.n`` and ``dp_size`` D; each micro-batch loss is
  ``sum / global_batch_size * D``, summed over micro-batches, averaged over the D ranks by FSDP;
- the legacy FSDP worker (``trainer.use_legacy_worker_impl`` enable/auto, verl < 0.8): no global info;
  each micro-batch of m rows is reduced as ``sum / m`` and scaled by ``m / mini_rows_per_rank``
  (``1 / gradient_accumulation``, or the dynamic-batch ratio), then averaged over ranks.

Either way one mini-batch of M = ``ppo_mini_batch_size * rollout.n`` responses contributes

    (B / M) * sum_{i in mini-batch} w_i * sum_t l_it,

which is exactly the rule's loss ``sum_i w_i sum_t l_it`` when the mini-batch is the whole batch
(``ppo_mini_batch_size == data.train_batch_size``), and otherwise that loss's share of the step, scaled
so that every mini-batch is on the scale of a whole batch. (The PPO clip is positively homogeneous in
the advantage, so folding w_i into A_i scales each token's clipped surrogate by w_i exactly.)
verl's ``token-mean`` is not constant on the legacy path (a mean of micro-batch means, verl#5625) and
depends on the mini-batch's token count on the engine path, so the policy loss refuses it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from verl.trainer.ppo import core_algos

from balagg.aggregation import aggregation_weights
from balagg.rules import RULES, canonical_rule, default_scope

__all__ = [
    "ENGINE",
    "LEGACY",
    "LOSS_AGG_MODE",
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

LOSS_AGG_MODE = "seq-mean-token-sum"
"""The verl ``loss_agg_mode`` whose normaliser (sequences per mini-batch) is constant on both actor paths."""
POLICY_LOSS = "balagg"
"""The registered policy-loss name (``actor_rollout_ref.actor.policy_loss.loss_mode``)."""
ESTIMATOR_PREFIX = "balagg-"

VERL_RULES: tuple[str, ...] = tuple(rule for rule in RULES if rule != "dr-grpo")
"""The rules offered as verl advantage estimators. ``dr-grpo`` needs a constant length that verl's
advantage estimators are not given; verl has it natively (``seq-mean-token-sum-norm`` with
``loss_scale_factor``)."""


def estimator_name(rule: str) -> str:
    """The ``algorithm.adv_estimator`` value of ``rule`` (a balagg name or a verl alias)."""
    rule = canonical_rule(rule)
    if rule not in VERL_RULES:
        raise ValueError(f"rule {rule!r} has no verl estimator; use one of {', '.join(VERL_RULES)}")
    return ESTIMATOR_PREFIX + rule


def _first_token_values(token_values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """The per-response scalar of a [B, T] tensor broadcast over each response's tokens (0 for an empty
    response), read at the first valid token as verl does (trainer/ppo/v1/utils.py)."""
    first = response_mask.to(torch.int64).argmax(dim=-1, keepdim=True)
    values = token_values.gather(-1, first).squeeze(-1)
    return torch.where(response_mask.sum(-1) > 0, values, torch.zeros_like(values))


def fold_rule_weights(
    advantages: torch.Tensor, response_mask: torch.Tensor, index: Any, rule: str
) -> torch.Tensor:
    """Token-level advantages [B, T] times ``w_i * B``, where w_i is ``rule``'s weight of response i
    (at the rule's default scope, groups from ``index``, lengths from ``response_mask``).

    With verl's ``seq-mean-token-sum`` over a mini-batch of M responses the loss is then
    ``(B / M) sum_i w_i sum_t l_it`` (module docstring)."""
    if advantages.dim() != 2 or advantages.shape != response_mask.shape:
        raise ValueError(
            f"advantages {tuple(advantages.shape)} and response_mask {tuple(response_mask.shape)} must both be [batch, tokens]"
        )
    rule = canonical_rule(rule)
    lengths = response_mask.sum(-1)
    scalar = _first_token_values(advantages, response_mask)
    weights = aggregation_weights(rule, lengths, scalar, list(index), scope=default_scope(rule))
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
    ``norm_adv_by_std_in_grpo``. Returns (advantages, returns), both the folded advantages as verl's GRPO
    returns them twice."""
    norm_by_std = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
    advantages, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=token_level_rewards,
        response_mask=response_mask,
        index=index,
        norm_adv_by_std_in_grpo=norm_by_std,
        config=config,
    )
    folded = fold_rule_weights(advantages, response_mask, index, rule)
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

    Raises ValueError, naming the key, for every setting under which the loss would not be exactly the
    rule's ``sum_i w_i sum_t l_it`` (see the module docstring)."""
    actor = "actor_rollout_ref.actor."
    problems = []
    estimator = str(_get(config, "algorithm.adv_estimator", ""))
    if not estimator.startswith(ESTIMATOR_PREFIX):
        problems.append(f"algorithm.adv_estimator={estimator!r} is not a balagg estimator ({estimator_name('balanced-agg')}, ...)")
    else:
        estimator_name(estimator[len(ESTIMATOR_PREFIX):])  # raises on an unknown rule
    if _get(config, actor + "policy_loss.loss_mode", "vanilla") != POLICY_LOSS:
        problems.append(f"{actor}policy_loss.loss_mode must be {POLICY_LOSS!r}")
    if _get(config, actor + "loss_agg_mode", "token-mean") != LOSS_AGG_MODE:
        problems.append(f"{actor}loss_agg_mode must be {LOSS_AGG_MODE!r} (its normaliser is constant)")
    problems += _regulariser_problems(
        _get(config, actor + "entropy_coeff", 0), _get(config, actor + "use_kl_loss", False), prefix=actor
    )
    if _get(config, "actor_rollout_ref.rollout.multi_turn.enable", False):
        problems.append("actor_rollout_ref.rollout.multi_turn.enable: multi-turn sessions are not one response per row")
    if problems:
        raise ValueError("balagg verl plug-in: " + "; ".join(problems))
    return actor_path(config)


def _regulariser_problems(entropy_coeff: float, use_kl_loss: bool, prefix: str = "") -> list[str]:
    # verl reduces the entropy bonus and the KL loss with the same loss_agg_mode: under
    # seq-mean-token-sum they would silently change scale (token sums instead of token means).
    problems = []
    if entropy_coeff:
        problems.append(f"{prefix}entropy_coeff={entropy_coeff}: the entropy bonus would be reduced by {LOSS_AGG_MODE}; set it to 0")
    if use_kl_loss:
        problems.append(f"{prefix}use_kl_loss=True: the KL loss would be reduced by {LOSS_AGG_MODE}; use algorithm.use_kl_in_reward or none")
    return problems


def check_actor(config: Any, loss_agg_mode: str, response_mask: torch.Tensor) -> str:
    """Check, inside the policy loss, that this micro-batch's reduction has a constant normaliser;
    return the actor path it reads from ``config.global_batch_info`` (empty on the legacy worker).

    Raises ValueError for ``token-mean`` and other modes, an engine path without ``global_batch_size``
    (a per-micro-batch count, summed over micro-batches without 1/grad-accumulation), a legacy micro-batch
    holding an empty response (verl's count would skip it), and an entropy bonus or KL loss."""
    problems = []
    if loss_agg_mode != LOSS_AGG_MODE:
        problems.append(
            f"actor.loss_agg_mode={loss_agg_mode!r}: the balagg policy loss needs {LOSS_AGG_MODE!r}, whose "
            "normaliser is constant (token-mean divides by each mini- or micro-batch's token count)"
        )
    problems += _regulariser_problems(config.get("entropy_coeff", 0), config.get("use_kl_loss", False), "actor.")
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
    """verl's ``vanilla`` policy loss on advantages folded by a ``balagg-<rule>`` estimator, after
    :func:`check_actor`. Same signature and metrics as verl's registered losses."""
    if config is None:
        raise ValueError("balagg verl plug-in: the policy loss needs the actor config")
    check_actor(config, loss_agg_mode, response_mask)
    return core_algos.compute_policy_loss_vanilla(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=response_mask,
        loss_agg_mode=loss_agg_mode,
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
