"""balagg.integrations.verl against verl's own loss code (verl 0.9.1; .ci/verl-tests runs these in an
environment of their own, the main venv skips them).

Each test builds a random batch of groups with mixed signs and lengths, scatters the groups over the
batch (as verl's balance_batch does), and runs it through verl's real functions the way each actor path
splits it: data-parallel ranks, then micro-batches of fixed or dynamic size. The optimiser sees the mean
over ranks of each rank's accumulated micro-batch losses (FSDP averages gradients). Each step returns the
loss and its gradients with respect to the log-probs and the entropies (the model outputs verl's loss
reads). Float64 throughout, so "equal" means to 1e-10.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from omegaconf import OmegaConf  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402
from verl.workers.config.actor import PolicyLossConfig  # noqa: E402
from verl.workers.utils.losses import ppo_loss  # noqa: E402

from balagg.integrations import verl as plugin  # noqa: E402

T = 24  # padded response length
CLIP_LOW, CLIP_HIGH, CLIP_C = 0.2, 0.28, 3.0
# verl's regularisers, large enough to weigh on the loss as much as the policy term does
REGULARISERS = {"entropy_coeff": 0.3, "use_kl_loss": True, "kl_loss_coef": 0.5, "kl_loss_type": "low_var_kl"}
ACTOR_MODE = "token-mean"  # the actor's loss_agg_mode (verl's default): it reduces the entropy and KL terms
VERL_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# Micro-batch layouts per rank (rows per rank = 12): fixed size 4 (gradient accumulation 3) on 2 ranks,
# and dynamic sizes (verl's use_dynamic_bsz packs by tokens) on 2 ranks; one rank of 24 rows in 5.
LAYOUTS = {
    "dp2-fixed4": (2, [[4, 4, 4], [4, 4, 4]]),
    "dp2-dynamic": (2, [[5, 2, 5], [1, 7, 4]]),
    "dp1-dynamic": (1, [[3, 9, 1, 6, 5]]),
}


def make_batch(seed: int, n_groups: int = 6, group_size: int = 4) -> dict:
    """Groups with mixed signs (and one all-correct, one all-wrong group), lengths 1..T, rows shuffled."""
    gen = torch.Generator().manual_seed(seed)
    size = n_groups * group_size
    rewards = torch.randint(0, 2, (size,), generator=gen).double()
    rewards[:group_size] = 1.0  # all correct: zero advantages
    rewards[group_size : 2 * group_size] = 0.0  # all wrong
    rewards[2 * group_size : 3 * group_size] = torch.tensor([1.0, 0.0, 0.0, 0.0])  # one short positive ...
    lengths = torch.randint(1, T + 1, (size,), generator=gen)
    lengths[2 * group_size : 3 * group_size] = torch.tensor([2, T, T - 1, T - 3])  # ... long negatives
    uid = np.array([f"prompt-{g}" for g in range(n_groups) for _ in range(group_size)], dtype=object)
    order = torch.randperm(size, generator=gen)
    rewards, lengths, uid = rewards[order], lengths[order], uid[order.numpy()]
    mask = torch.arange(T)[None, :] < lengths[:, None]
    token_level_rewards = torch.zeros(size, T, dtype=torch.float64)
    token_level_rewards[torch.arange(size), lengths - 1] = rewards
    old_log_prob = -2.0 * torch.rand(size, T, generator=gen, dtype=torch.float64)
    log_prob = old_log_prob + 0.4 * torch.randn(size, T, generator=gen, dtype=torch.float64)  # some clipped
    entropy = 2.0 * torch.rand(size, T, generator=gen, dtype=torch.float64)
    ref_log_prob = old_log_prob + 0.3 * torch.randn(size, T, generator=gen, dtype=torch.float64)
    return {"token_level_rewards": token_level_rewards, "mask": mask, "uid": uid,
            "old_log_prob": old_log_prob, "log_prob": log_prob, "entropy": entropy, "ref_log_prob": ref_log_prob}


def grpo_advantages(batch: dict, norm_by_std: bool = True) -> torch.Tensor:
    advantages, _ = core_algos.compute_grpo_outcome_advantage(
        batch["token_level_rewards"], batch["mask"].double(), batch["uid"], norm_adv_by_std_in_grpo=norm_by_std
    )
    return advantages


def plugin_advantages(batch: dict, rule: str, norm_by_std: bool = True) -> torch.Tensor:
    estimator = core_algos.get_adv_estimator_fn(plugin.estimator_name(rule))
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": norm_by_std})
    advantages, _ = estimator(
        token_level_rewards=batch["token_level_rewards"], response_mask=batch["mask"].double(),
        index=batch["uid"], config=config,
    )
    return advantages


def actor_config(loss_agg_mode: str, **overrides) -> ActorConfig:
    return ActorConfig(strategy="fsdp", ppo_mini_batch_size=6, ppo_micro_batch_size_per_gpu=4, rollout_n=4,
                       loss_agg_mode=loss_agg_mode, clip_ratio_low=CLIP_LOW, clip_ratio_high=CLIP_HIGH,
                       clip_ratio_c=CLIP_C, **overrides)


Step = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""(loss, d loss / d log_prob, d loss / d entropy)"""


def leaves(batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    return batch["log_prob"].clone().requires_grad_(True), batch["entropy"].clone().requires_grad_(True)


def step(total: torch.Tensor, log_prob: torch.Tensor, entropy: torch.Tensor) -> Step:
    grads = torch.autograd.grad(total, (log_prob, entropy), materialize_grads=True)
    return (total.detach(), *grads)


def actor_step(batch: dict, advantages: torch.Tensor, *, path: str, layout: str, loss_mode: str,
               loss_agg_mode: str, **regularisers) -> Step:
    """One mini-batch (the whole batch) as verl's actor path computes its loss.

    engine: every micro-batch gets the global info (dp_size, all-reduced token count, global batch size),
    losses summed over micro-batches (verl/workers/engine/fsdp/transformer_impl.py, workers/utils/losses.py).
    legacy: no global info, each micro-batch loss times rows / rows-per-rank (1 / gradient accumulation,
    or the dynamic-batch ratio), as verl's removed dp_actor.update_policy did.
    Either way the entropy bonus and KL loss are verl's agg_loss with the actor's loss_agg_mode and the
    micro-batch's global info, added to the policy loss before that scaling, as both paths add them."""
    dp, splits = LAYOUTS[layout]
    size = batch["mask"].shape[0]
    per_rank = size // dp
    log_prob, entropy = leaves(batch)
    policy_loss = core_algos.get_policy_loss_fn(loss_mode)
    config = actor_config(loss_agg_mode, **regularisers)
    total = torch.zeros((), dtype=torch.float64)
    for rank in range(dp):
        start = rank * per_rank
        assert sum(splits[rank]) == per_rank
        for rows in splits[rank]:
            sl = slice(start, start + rows)
            start += rows
            config.global_batch_info.clear()
            if path == plugin.ENGINE:
                config.global_batch_info.update(dp_size=dp, batch_num_tokens=int(batch["mask"].sum()),
                                                global_batch_size=size, loss_scale_factor=None)
            mask = batch["mask"][sl]
            loss, _ = policy_loss(batch["old_log_prob"][sl], log_prob[sl], advantages[sl], mask,
                                  loss_agg_mode, config, None)
            if config.entropy_coeff:
                loss = loss - config.entropy_coeff * core_algos.agg_loss(
                    entropy[sl], mask, loss_agg_mode, **config.global_batch_info)
            if config.use_kl_loss:
                kld = core_algos.kl_penalty(log_prob[sl], batch["ref_log_prob"][sl], config.kl_loss_type)
                loss = loss + config.kl_loss_coef * core_algos.agg_loss(
                    kld, mask, loss_agg_mode, **config.global_batch_info)
            if path == plugin.LEGACY:
                loss = loss * rows / per_rank
            total = total + loss
    total = total / dp  # FSDP/DDP average the ranks' gradients
    return step(total, log_prob, entropy)


def engine_ppo_loss_step(batch: dict, advantages: torch.Tensor, *, layout: str, loss_mode: str,
                         loss_agg_mode: str, **regularisers) -> Step:
    """Like :func:`actor_step` on the engine path, but through the loss function the engine workers call,
    ``verl.workers.utils.losses.ppo_loss``: it reads dp_size / batch_num_tokens / global_batch_size from
    the micro-batch's TensorDict (as FSDPEngine.forward_backward_batch assigns them), un-pads the
    model's flat log-probs and entropies (prompt length 2, responses left-shifted by one token as a
    causal LM's), and adds the entropy bonus and the KL loss itself."""
    dp, splits = LAYOUTS[layout]
    mask = batch["mask"]
    size, prompt = mask.shape[0], 2
    per_rank = size // dp
    log_prob, entropy = leaves(batch)
    config = actor_config(loss_agg_mode, policy_loss=PolicyLossConfig(loss_mode=loss_mode), **regularisers)

    def flat(values: torch.Tensor, sl: slice) -> torch.Tensor:
        # one value per token of prompt + response; response token t's value sits at position
        # prompt - 1 + t (the logits that predict it), the last position predicts nothing
        return torch.cat([torch.cat([torch.zeros(prompt - 1, dtype=torch.float64), row[: int(n)],
                                     torch.zeros(1, dtype=torch.float64)])
                          for row, n in zip(values[sl], mask[sl].sum(-1))])

    total = torch.zeros((), dtype=torch.float64)
    for rank in range(dp):
        start = rank * per_rank
        for rows in splits[rank]:
            sl = slice(start, start + rows)
            start += rows
            data = TensorDict({
                "prompts": torch.ones(rows, prompt, dtype=torch.long),
                "responses": torch.ones(rows, T, dtype=torch.long),
                "attention_mask": torch.cat([torch.ones(rows, prompt, dtype=torch.long), mask[sl].long()], dim=1),
                "response_mask": mask[sl].long(),
                "old_log_probs": batch["old_log_prob"][sl],
                "advantages": advantages[sl],
                "ref_log_prob": batch["ref_log_prob"][sl],
            }, batch_size=[rows])
            tu.assign_non_tensor(data, dp_size=dp, batch_num_tokens=int(mask.sum()), global_batch_size=size)
            loss, _ = ppo_loss(config, {"log_probs": flat(log_prob, sl), "entropy": flat(entropy, sl)}, data)
            total = total + loss
    total = total / dp
    return step(total, log_prob, entropy)


def clipped_surrogate(batch: dict, advantages: torch.Tensor) -> torch.Tensor:
    """l_it: the dual-clip PPO surrogate per token, written out (not verl's code)."""
    log_prob = batch["log_prob"]
    ratio = torch.exp(torch.clamp(log_prob - batch["old_log_prob"], -20.0, 20.0))
    clipped = torch.maximum(-advantages * ratio, -advantages * torch.clamp(ratio, 1 - CLIP_LOW, 1 + CLIP_HIGH))
    dual = torch.minimum(-advantages * CLIP_C, clipped)
    return torch.where(advantages < 0, dual, clipped)


def balanced_aggregation_reference(batch: dict) -> Step:
    """The paper's formula, group by group: BA_g = (k/G)(1/L+) sum_P sum_t l + (|N|/G)(1/L-) sum_N sum_t l,
    loss = mean over groups (groups without a sign contribute 0)."""
    log_prob, entropy = leaves(batch)
    advantages = grpo_advantages(batch)
    surrogate = clipped_surrogate({**batch, "log_prob": log_prob}, advantages) * batch["mask"]
    sign = advantages[torch.arange(len(advantages)), 0]
    groups = sorted(set(batch["uid"]))
    total = torch.zeros((), dtype=torch.float64)
    for group in groups:
        rows = torch.from_numpy(batch["uid"] == group)
        size = int(rows.sum())
        for side in (rows & (sign > 0), rows & (sign < 0)):
            if side.any():
                side_tokens = batch["mask"][side].sum()
                total = total + (int(side.sum()) / size) * surrogate[side].sum() / side_tokens
    total = total / len(groups)
    return step(total, log_prob, entropy)


def token_mean_regularisers_reference(batch: dict, path: str, layout: str, *, entropy_coeff: float,
                                      use_kl_loss: bool, kl_loss_coef: float, kl_loss_type: str) -> Step:
    """verl's token-mean entropy bonus and KL loss as each actor path reduces them, written out:
    engine, one token mean over the mini-batch (the all-reduced token count); legacy, each micro-batch's
    own token mean times rows / rows-per-rank, averaged over ranks (verl#5625). Per token:
    kl_loss_coef * KL (verl's kl_penalty) - entropy_coeff * H."""
    assert use_kl_loss
    log_prob, entropy = leaves(batch)
    mask = batch["mask"].double()
    per_token = (kl_loss_coef * core_algos.kl_penalty(log_prob, batch["ref_log_prob"], kl_loss_type)
                 - entropy_coeff * entropy) * mask
    if path == plugin.ENGINE:
        total = per_token.sum() / mask.sum()
    else:
        dp, splits = LAYOUTS[layout]
        per_rank, start = mask.shape[0] // dp, 0
        total = torch.zeros((), dtype=torch.float64)
        for rows in (rows for rank in splits for rows in rank):
            sl = slice(start, start + rows)
            start += rows
            total = total + (rows / per_rank) * per_token[sl].sum() / mask[sl].sum()
        total = total / dp
    return step(total, log_prob, entropy)


def plus(a: Step, b: Step) -> Step:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def assert_same(got: Step, want: Step) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def run_plugin(batch: dict, rule: str, path: str, layout: str, norm_by_std: bool = True,
               loss_agg_mode: str = ACTOR_MODE, **regularisers) -> Step:
    return actor_step(batch, plugin_advantages(batch, rule, norm_by_std), path=path, layout=layout,
                      loss_mode=plugin.POLICY_LOSS, loss_agg_mode=loss_agg_mode, **regularisers)


PATHS = [(plugin.ENGINE, layout) for layout in LAYOUTS] + [(plugin.LEGACY, layout) for layout in LAYOUTS]


@pytest.mark.parametrize("path,layout", PATHS)
@pytest.mark.parametrize("seed", [0, 1])
def test_token_agg_equals_verls_token_mean(seed, path, layout):
    batch = make_batch(seed)
    # verl's token-mean on the engine path: the global token mean of the mini-batch
    want = actor_step(batch, grpo_advantages(batch), path=plugin.ENGINE, layout=layout, loss_mode="vanilla",
                      loss_agg_mode="token-mean")
    assert_same(run_plugin(batch, "token-agg", path, layout), want)


@pytest.mark.parametrize("path,layout", PATHS)
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_seq_agg_equals_verls_seq_mean_token_mean(norm_by_std, path, layout):
    batch = make_batch(2)
    want = actor_step(batch, grpo_advantages(batch, norm_by_std), path=plugin.ENGINE, layout=layout,
                      loss_mode="vanilla", loss_agg_mode="seq-mean-token-mean")
    assert_same(run_plugin(batch, "seq-agg", path, layout, norm_by_std), want)


@pytest.mark.parametrize("path,layout", PATHS)
@pytest.mark.parametrize("seed", [3, 4])
def test_balanced_agg_equals_the_papers_formula_per_group(seed, path, layout):
    batch = make_batch(seed)
    assert_same(run_plugin(batch, "balanced-agg", path, layout), balanced_aggregation_reference(batch))


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_through_the_engine_workers_ppo_loss(layout):
    """The same equalities through verl's engine-worker loss (workers/utils/losses.py::ppo_loss)."""
    batch = make_batch(8)
    plugin_step = {rule: engine_ppo_loss_step(batch, plugin_advantages(batch, rule), layout=layout,
                                              loss_mode=plugin.POLICY_LOSS, loss_agg_mode=ACTOR_MODE)
                   for rule in ("token-agg", "seq-agg", "balanced-agg")}
    for rule, mode in (("token-agg", "token-mean"), ("seq-agg", "seq-mean-token-mean")):
        assert_same(plugin_step[rule], engine_ppo_loss_step(batch, grpo_advantages(batch), layout=layout,
                                                            loss_mode="vanilla", loss_agg_mode=mode))
    assert_same(plugin_step["balanced-agg"], balanced_aggregation_reference(batch))


@pytest.mark.parametrize("path,layout", PATHS)
def test_with_verls_token_mean_entropy_bonus_and_kl_loss(path, layout):
    """entropy_coeff != 0 and use_kl_loss=True under the actor's token-mean: the loss and its gradients
    are the rule's policy term plus verl's own token-mean regularisers, as each actor path reduces them."""
    batch = make_batch(3)
    policy = balanced_aggregation_reference(batch)
    regularisers = token_mean_regularisers_reference(batch, path, layout, **REGULARISERS)
    assert_same(run_plugin(batch, "balanced-agg", path, layout, **REGULARISERS), plus(policy, regularisers))
    # the regularisers weigh on the loss and on both gradients as much as the policy term does
    assert abs(float(regularisers[0])) > 0.1 * abs(float(policy[0]))
    assert regularisers[1].abs().max() > 0.1 * policy[1].abs().max() and regularisers[2].abs().max() > 0


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_with_entropy_bonus_and_kl_loss_through_the_engine_workers_ppo_loss(layout):
    """The same through verl's ppo_loss, which adds the regularisers itself; and the plug-in's token-agg
    with them is verl's own token-mean loss with them."""
    batch = make_batch(9)
    got = engine_ppo_loss_step(batch, plugin_advantages(batch, "balanced-agg"), layout=layout,
                               loss_mode=plugin.POLICY_LOSS, loss_agg_mode=ACTOR_MODE, **REGULARISERS)
    regularisers = token_mean_regularisers_reference(batch, plugin.ENGINE, layout, **REGULARISERS)
    assert_same(got, plus(balanced_aggregation_reference(batch), regularisers))
    token_agg = engine_ppo_loss_step(batch, plugin_advantages(batch, "token-agg"), layout=layout,
                                     loss_mode=plugin.POLICY_LOSS, loss_agg_mode=ACTOR_MODE, **REGULARISERS)
    assert_same(token_agg, engine_ppo_loss_step(batch, grpo_advantages(batch), layout=layout, loss_mode="vanilla",
                                                loss_agg_mode="token-mean", **REGULARISERS))


@pytest.mark.parametrize("path", [plugin.ENGINE, plugin.LEGACY])
@pytest.mark.parametrize("mode", VERL_MODES)
def test_the_policy_term_is_the_rules_whatever_the_actors_loss_agg_mode(mode, path):
    batch = make_batch(4)
    assert_same(run_plugin(batch, "balanced-agg", path, "dp2-dynamic", loss_agg_mode=mode),
                balanced_aggregation_reference(batch))


def test_the_rules_differ_on_this_batch():
    """The batches above tell the rules apart (else the equalities would prove little)."""
    batch = make_batch(3)
    losses = {rule: float(run_plugin(batch, rule, plugin.ENGINE, "dp2-dynamic")[0])
              for rule in ("token-agg", "seq-agg", "balanced-agg")}
    values = sorted(losses.values())
    assert min(b - a for a, b in zip(values, values[1:])) > 1e-3 * max(abs(v) for v in values), losses


@pytest.mark.parametrize("layout", ["dp2-dynamic", "dp1-dynamic"])
def test_micro_batch_normalisation_matters_and_only_the_plugin_is_exact_on_the_legacy_path(layout):
    """verl's token-mean on the legacy worker is a mean of micro-batch means (verl#5625): with uneven
    micro-batches it misses the global token mean that the plug-in's token-agg reaches on the same path.
    A plug-in whose micro-batch normaliser were wrong would fail the equalities above the same way."""
    batch = make_batch(5)
    global_mean = actor_step(batch, grpo_advantages(batch), path=plugin.ENGINE, layout=layout,
                             loss_mode="vanilla", loss_agg_mode="token-mean")
    legacy_mean = actor_step(batch, grpo_advantages(batch), path=plugin.LEGACY, layout=layout,
                             loss_mode="vanilla", loss_agg_mode="token-mean")
    plugin_legacy = run_plugin(batch, "token-agg", plugin.LEGACY, layout)
    assert_same(plugin_legacy, global_mean)
    assert (legacy_mean[1] - global_mean[1]).abs().max() > 1e-3 * global_mean[1].abs().max()
    # the same folded advantages reduced per micro-batch by token counts (token-mean) are not the rule
    folded = plugin_advantages(batch, "token-agg")
    wrong = actor_step(batch, folded, path=plugin.LEGACY, layout=layout, loss_mode="vanilla",
                       loss_agg_mode="token-mean")
    assert (wrong[1] / wrong[1].abs().max() - global_mean[1] / global_mean[1].abs().max()).abs().max() > 1e-3


def test_several_mini_batches_each_carry_their_share_on_the_scale_of_a_batch():
    """With M < B responses per mini-batch, mini-batch j's loss is (B/M) sum_{i in j} w_i sum_t l_it."""
    batch = make_batch(6)
    folded = plugin_advantages(batch, "balanced-agg")
    full = balanced_aggregation_reference(batch)[0]
    config = actor_config(ACTOR_MODE)
    policy_loss = core_algos.get_policy_loss_fn(plugin.POLICY_LOSS)
    size, halves = batch["mask"].shape[0], []
    for sl in (slice(0, size // 2), slice(size // 2, size)):
        config.global_batch_info.clear()
        config.global_batch_info.update(dp_size=1, batch_num_tokens=int(batch["mask"][sl].sum()),
                                        global_batch_size=size // 2, loss_scale_factor=None)
        loss, _ = policy_loss(batch["old_log_prob"][sl], batch["log_prob"][sl], folded[sl], batch["mask"][sl],
                              ACTOR_MODE, config, None)
        halves.append(loss)
    torch.testing.assert_close(sum(halves) / 2, full, rtol=1e-10, atol=1e-12)


def test_fold_uses_verls_grpo_and_aggregation_weights():
    """The one documented call: A'_i = A_i * aggregation_weights(...)_i * B, A_i from verl's GRPO."""
    from balagg.aggregation import aggregation_weights

    batch = make_batch(7)
    advantages = grpo_advantages(batch)
    lengths = batch["mask"].sum(-1)
    scalar = advantages[torch.arange(len(lengths)), 0]
    weights = aggregation_weights("balanced-agg", lengths, scalar, list(batch["uid"]))
    want = advantages * (weights * len(lengths)).unsqueeze(-1)
    torch.testing.assert_close(plugin_advantages(batch, "balanced-agg"), want, rtol=1e-12, atol=0)


def test_constant_length_rules_take_verls_padded_width_and_alpha_from_the_algorithm_config():
    """dr-grpo, seq-mean-token-sum-norm and delta-l-norm divide by the batch's padded width (verl pads
    rollouts to rollout.response_length) unless ``algorithm.balagg_max_length`` is set; dr-grpo through the
    plug-in is then verl's own seq-mean-token-sum-norm on GRPO advantages, and delta-l-norm reads its alpha
    from ``algorithm.balagg_alpha``."""
    batch = make_batch(11)
    plain = grpo_advantages(batch)
    for layout in ("dp2-fixed4", "dp1-dynamic"):
        assert_same(actor_step(batch, plugin_advantages(batch, "dr-grpo"), path=plugin.ENGINE, layout=layout,
                               loss_mode=plugin.POLICY_LOSS, loss_agg_mode=ACTOR_MODE),
                    actor_step(batch, plain, path=plugin.ENGINE, layout=layout, loss_mode="vanilla",
                               loss_agg_mode="seq-mean-token-sum-norm"))
    from balagg.aggregation import aggregation_weights

    lengths = batch["mask"].sum(-1)
    scalar = plain[torch.arange(len(lengths)), 0]
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": True, plugin.ALPHA_KEY: 0.75})
    folded, _ = plugin.ESTIMATORS[plugin.estimator_name("delta-l-norm")](
        batch["token_level_rewards"], batch["mask"].double(), batch["uid"], config=config)
    weights = aggregation_weights("delta-l-norm", lengths, scalar, list(batch["uid"]), scope="batch", max_length=T,
                                  alpha=0.75)
    torch.testing.assert_close(folded, plain * (weights * len(lengths)).unsqueeze(-1), rtol=1e-12, atol=0)
    assert not torch.allclose(folded, plugin_advantages(batch, "delta-l-norm"))  # alpha 1 by default
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": True, plugin.MAX_LENGTH_KEY: 40})
    folded, _ = plugin.ESTIMATORS[plugin.estimator_name("dr-grpo")](
        batch["token_level_rewards"], batch["mask"].double(), batch["uid"], config=config)
    weights = aggregation_weights("dr-grpo", lengths, scalar, list(batch["uid"]), max_length=40)
    torch.testing.assert_close(folded, plain * (weights * len(lengths)).unsqueeze(-1), rtol=1e-12, atol=0)


# --------------------------------------------------------------------------------------------------
# Refusals and registration
# --------------------------------------------------------------------------------------------------


def call_loss(config: ActorConfig, mask: torch.Tensor, mode: str = ACTOR_MODE):
    old = torch.zeros(mask.shape, dtype=torch.float64)
    return plugin.compute_policy_loss_balagg(old, old.clone(), old.clone(), mask, mode, config, None)


def test_policy_loss_refuses_settings_that_would_not_be_exact():
    mask = torch.ones(2, 3, dtype=torch.bool)
    config = actor_config(ACTOR_MODE)
    config.global_batch_info.update(dp_size=2, batch_num_tokens=6, global_batch_size=None)
    with pytest.raises(ValueError, match="without global_batch_size"):
        call_loss(config, mask)
    empty = mask.clone()
    empty[1] = False
    with pytest.raises(ValueError, match="empty response"):
        call_loss(actor_config(ACTOR_MODE), empty)
    # the engine path tolerates an empty response: its count is the configured global batch size
    config = actor_config(ACTOR_MODE)
    config.global_batch_info.update(dp_size=1, batch_num_tokens=3, global_batch_size=2)
    loss, metrics = call_loss(config, empty)
    assert float(loss) == 0.0 and "actor/pg_clipfrac" in metrics
    # the path is read from what verl hands the loss: global counts on the engine workers, none on the legacy one
    assert plugin.check_actor(config, empty) == plugin.ENGINE
    assert plugin.check_actor(actor_config(ACTOR_MODE), mask) == plugin.LEGACY


def test_policy_loss_takes_any_loss_agg_mode_and_verls_regularisers():
    """One engine micro-batch: whatever the actor's loss_agg_mode, entropy_coeff and use_kl_loss, the
    policy loss is verl's vanilla loss reduced by seq-mean-token-sum over the global batch size."""
    batch = make_batch(5)
    sl = slice(0, 7)
    args = (batch["old_log_prob"][sl], batch["log_prob"][sl], plugin_advantages(batch, "balanced-agg")[sl],
            batch["mask"][sl])
    want = None
    for mode in VERL_MODES:
        config = actor_config(mode, **REGULARISERS)
        config.global_batch_info.update(dp_size=2, batch_num_tokens=int(batch["mask"].sum()),
                                        global_batch_size=24, loss_scale_factor=None)
        if want is None:
            want = core_algos.compute_policy_loss_vanilla(*args, plugin.POLICY_AGG_MODE, config, None)
        loss, metrics = plugin.compute_policy_loss_balagg(*args, mode, config, None)
        torch.testing.assert_close(loss, want[0], rtol=0, atol=0)
        assert metrics == want[1]


def verl_trainer_config(*overrides: str):
    """verl's own generated PPO trainer config with Hydra-style dotted overrides."""
    import verl

    base = OmegaConf.load(Path(verl.__file__).parent / "trainer/config/_generated_ppo_trainer.yaml")
    return OmegaConf.merge(base, OmegaConf.from_dotlist(list(overrides)))


PLUGIN_OVERRIDES = (
    "algorithm.adv_estimator=balagg-balanced-agg",
    "actor_rollout_ref.actor.policy_loss.loss_mode=balagg",
)


def test_check_config_reads_the_actor_path_and_names_the_bad_key():
    assert plugin.check_config(verl_trainer_config(*PLUGIN_OVERRIDES)) == plugin.ENGINE
    legacy = verl_trainer_config(*PLUGIN_OVERRIDES, "trainer.use_legacy_worker_impl=enable")
    assert plugin.check_config(legacy) == plugin.LEGACY
    with pytest.raises(ValueError, match="actor_rollout_ref.actor.policy_loss.loss_mode must be"):
        plugin.check_config(verl_trainer_config(*PLUGIN_OVERRIDES[:1]))
    with pytest.raises(ValueError, match="algorithm.adv_estimator='grpo'"):
        plugin.check_config(verl_trainer_config("algorithm.adv_estimator=grpo", *PLUGIN_OVERRIDES[1:]))
    with pytest.raises(ValueError, match="unknown aggregation rule"):
        plugin.check_config(verl_trainer_config("algorithm.adv_estimator=balagg-nonsense", *PLUGIN_OVERRIDES[1:]))


def test_check_config_takes_verls_regularisers_and_any_loss_agg_mode():
    actor = "actor_rollout_ref.actor."
    regularised = verl_trainer_config(*PLUGIN_OVERRIDES, actor + "entropy_coeff=0.001", actor + "use_kl_loss=True")
    assert regularised.actor_rollout_ref.actor.loss_agg_mode == "token-mean"  # verl's default
    assert plugin.check_config(regularised) == plugin.ENGINE
    for mode in VERL_MODES:
        assert plugin.check_config(verl_trainer_config(*PLUGIN_OVERRIDES, actor + f"loss_agg_mode={mode}")) == plugin.ENGINE


def test_import_verl_registers_the_plugin_through_its_entry_point():
    """verl imports `verl.plugins` entry points itself (every Ray worker): no balagg import needed."""
    code = (
        "import verl\n"
        "from verl.trainer.ppo import core_algos\n"
        "core_algos.get_policy_loss_fn('balagg')\n"
        "print(sorted(n for n in core_algos.ADV_ESTIMATOR_REGISTRY if n.startswith('balagg-')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    names = eval(result.stdout.strip().splitlines()[-1])  # a printed list of str
    assert names == sorted(plugin.estimator_name(rule) for rule in plugin.VERL_RULES)
    assert {"balagg-balanced-agg", "balagg-dr-grpo", "balagg-delta-l-norm", "balagg-prompt-mean"} <= set(names)
