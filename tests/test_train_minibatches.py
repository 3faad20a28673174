"""Mini-batches of AggregatedGRPOTrainer: what every optimiser step's gradient weights really are.

Each test trains the tiny model for a few steps with 2 mini-batches per generation batch (4 groups of 4
responses per generation batch, 2 groups per optimiser step), gradient accumulation 2 and
num_iterations 1 or 2, records every micro-batch that reaches TRL's loss, and recovers each response's
effective weight in its optimiser step's gradient, e_i = A'_i / A_i / (B_micro * L_max * GA) (the
dr_grpo normaliser; one process). The rule then says what e must be per step and per group."""

from __future__ import annotations

import os
from collections import Counter

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
from transformers import AutoModelForCausalLM  # noqa: E402

from balagg.prompts import load_tokenizer  # noqa: E402
from balagg.train.trainer import (AggregatedGRPOTrainer, importance_sampling_masked_counts,  # noqa: E402
                                  importance_sampling_masked_fractions)
from test_train_equivalence import (MAX_LEN, GradientRecorder, length_parity_reward, model_dir,  # noqa: E402,F401
                                    relative_l2)

G = 4
MICRO = 4  # responses per micro-batch
GA = 2
MINI_BATCHES = 2
GROUPS_PER_STEP = MICRO * GA // G  # 2


class StepRecorder(AggregatedGRPOTrainer):
    """Tags every response with its group and raw advantage, and keeps every micro-batch fed to the loss."""

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            rows = output["advantages"].numel()
            self._generations = getattr(self, "_generations", 0) + 1
            output["raw_advantages"] = output["advantages"].clone()
            output["group"] = (torch.arange(rows) // G) + 1000 * self._generations  # unique over batches
        return output

    def _compute_loss(self, model, inputs):
        self.micro_batches = getattr(self, "micro_batches", []) + [{
            key: inputs[key].detach().clone() for key in ("advantages", "raw_advantages", "group", "completion_mask",
                                                          "completion_ids", "prompt_ids", "prompt_mask")}]
        return super()._compute_loss(model, inputs)


def train(model_dir, out_dir, *, rule, group_preserving, num_iterations, steps):
    from datasets import Dataset

    tokenizer = load_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    dataset = Dataset.from_list([{"prompt": f"{a}+{b}="} for a in range(4) for b in range(4)])
    args = trl.GRPOConfig(
        output_dir=str(out_dir), loss_type="dr_grpo", beta=0.0, num_generations=G,
        per_device_train_batch_size=MICRO, gradient_accumulation_steps=GA, steps_per_generation=GA * MINI_BATCHES,
        num_iterations=num_iterations, max_completion_length=MAX_LEN, max_steps=steps, learning_rate=0.1,
        optim="sgd", lr_scheduler_type="constant", seed=3, max_grad_norm=0.0, logging_steps=1, report_to="none",
        bf16=False, gradient_checkpointing=False, epsilon=0.2, epsilon_high=0.28, save_strategy="no",
        disable_tqdm=True, generation_kwargs={"sequence_bias": {(tokenizer.eos_token_id,): 3.0}},
    )
    recorder = GradientRecorder()
    trainer = StepRecorder(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                           reward_funcs=[length_parity_reward], callbacks=[recorder], aggregation=rule,
                           group_preserving_minibatches=group_preserving)
    torch.set_num_threads(1)
    trainer.train()
    return trainer, recorder


def optimiser_steps(trainer):
    """Per optimiser step: group, raw advantage, length, effective weight e and micro-batch of each response."""
    records = trainer.micro_batches
    assert len(records) % GA == 0
    steps = []
    for start in range(0, len(records), GA):
        rows = {"group": [], "raw": [], "length": [], "e": [], "micro": []}
        for micro, record in enumerate(records[start:start + GA]):
            raw = record["raw_advantages"].double()
            safe = torch.where(raw != 0, raw, torch.ones_like(raw))
            effective = torch.where(raw != 0, record["advantages"].double() / safe, torch.nan)
            rows["group"] += record["group"].tolist()
            rows["raw"] += raw.tolist()
            rows["length"] += record["completion_mask"].sum(1).tolist()
            rows["e"] += (effective / (MICRO * MAX_LEN * GA)).tolist()
            rows["micro"] += [micro] * len(raw)
        steps.append(rows)
    return steps


def by_group(step):
    groups = {}
    for i, group in enumerate(step["group"]):
        groups.setdefault(group, []).append(i)
    return groups


@pytest.mark.parametrize(("rule", "num_iterations"), [("balanced-agg", 1), ("seq-agg", 2), ("balanced-agg", 2)])
def test_group_preserving_steps_hold_whole_groups_weighted_as_the_rule_says(model_dir, tmp_path, rule,
                                                                           num_iterations):
    trainer, _ = train(model_dir, tmp_path, rule=rule, group_preserving=True, num_iterations=num_iterations,
                       steps=4)
    steps = optimiser_steps(trainer)
    assert len(steps) == 4
    mixed_checked = 0
    for number, step in enumerate(steps, start=1):
        groups = by_group(step)
        assert len(groups) == GROUPS_PER_STEP, f"step {number} holds {len(groups)} groups"
        assert all(len(rows) == G for rows in groups.values()), f"step {number} splits a group"
        for rows in groups.values():
            raw = [step["raw"][i] for i in rows]
            if not (any(a > 0 for a in raw) and any(a < 0 for a in raw)):
                continue  # all-equal rewards: advantages 0, no gradient
            mixed_checked += 1
            carried = {side: sum(step["e"][i] * step["length"][i] for i in rows if sign * step["raw"][i] > 0)
                       for side, sign in (("pos", 1), ("neg", -1))}
            k = sum(a > 0 for a in raw)
            if rule == "balanced-agg":  # each side: its count share of the group's 1/#groups
                assert carried["pos"] == pytest.approx((k / G) / GROUPS_PER_STEP, rel=1e-5)
                assert carried["neg"] == pytest.approx(((G - k) / G) / GROUPS_PER_STEP, rel=1e-5)
            else:  # seq-agg: every response 1 / (G |o_i|) / #groups
                for i in rows:
                    assert step["e"][i] * step["length"][i] == pytest.approx(1 / G / GROUPS_PER_STEP, rel=1e-5)
                assert carried["pos"] + carried["neg"] == pytest.approx(1 / GROUPS_PER_STEP, rel=1e-5)
    assert mixed_checked >= 3
    if num_iterations == 2:  # the second pass over a generation batch repeats its steps' weights
        assert steps[0]["group"] == steps[2]["group"] and steps[0]["e"] == pytest.approx(steps[2]["e"], nan_ok=True)


def test_group_preserving_token_agg_is_the_steps_token_mean(model_dir, tmp_path):
    trainer, _ = train(model_dir, tmp_path, rule="token-agg", group_preserving=True, num_iterations=1, steps=4)
    for step in optimiser_steps(trainer):
        step_tokens = sum(step["length"])
        weights = [e for e in step["e"] if e == e]
        assert weights and weights == pytest.approx([1 / step_tokens] * len(weights), rel=1e-5)


def test_token_agg_microbatch_weights_come_from_the_actual_micro_batches(model_dir, tmp_path):
    trainer, recorder = train(model_dir, tmp_path, rule="token-agg-microbatch", group_preserving=False,
                              num_iterations=2, steps=4)
    steps = optimiser_steps(trainer)
    uneven = False
    for step in steps:
        tokens = Counter()
        for micro, length in zip(step["micro"], step["length"], strict=True):
            tokens[micro] += length
        uneven |= len(set(tokens.values())) > 1
        for e, micro in zip(step["e"], step["micro"], strict=True):
            if e == e:
                assert e == pytest.approx(1 / (tokens[micro] * GA), rel=1e-5)
    assert uneven  # otherwise the rule would equal the step's token mean and the test would prove less

    # step 1's gradient against verl's legacy loop on the same micro-batches: masked mean / GA each
    model = AutoModelForCausalLM.from_pretrained(model_dir)  # the parameters of step 1
    for record in trainer.micro_batches[:GA]:
        per_token = on_policy_token_loss(model, record)
        mask = record["completion_mask"].float()
        ((per_token * mask).sum() / mask.sum() / GA).backward()
    direct = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert relative_l2(recorder.gradients[0], direct) < 1e-4


def on_policy_token_loss(model, record):
    """-A_i * ratio_it with ratio = exp(logp - logp.detach()) (1 in value, the policy gradient in grad)."""
    ids = torch.cat([record["prompt_ids"], record["completion_ids"]], dim=1)
    attention = torch.cat([record["prompt_mask"], record["completion_mask"]], dim=1)
    logits = model(input_ids=ids, attention_mask=attention).logits[:, record["prompt_ids"].shape[1] - 1:-1]
    logps = torch.log_softmax(logits.float(), dim=-1).gather(-1, record["completion_ids"].unsqueeze(-1)).squeeze(-1)
    return -(record["raw_advantages"][:, None] * torch.exp(logps - logps.detach()))


def test_trls_response_shuffle_weights_each_step_with_the_batch_rule_times_the_mini_batches(model_dir, tmp_path):
    """TRL's response shuffle with 2 mini-batches: token-agg (scope batch) weights every response of a
    generation batch 1 / (the batch's tokens) times 2, so that each optimiser step, half of the batch, carries
    the rule's whole loss in expectation (sum of e |o| over the two steps of a batch: 2, each step about 1).
    Without the factor the steps of a batch would carry half of it between them."""
    trainer, _ = train(model_dir, tmp_path, rule="token-agg", group_preserving=False, num_iterations=1, steps=4)
    steps = optimiser_steps(trainer)
    assert len(steps) == 2 * MINI_BATCHES
    for first in range(0, len(steps), MINI_BATCHES):
        batch = steps[first:first + MINI_BATCHES]
        tokens = sum(length for step in batch for length in step["length"])
        weights = [e for step in batch for e in step["e"] if e == e]
        assert weights and weights == pytest.approx([MINI_BATCHES / tokens] * len(weights), rel=1e-5)
        carried = sum(e * length for step in batch for e, length in zip(step["e"], step["length"]) if e == e)
        signal = sum(length for step in batch for e, length in zip(step["e"], step["length"]) if e == e)
        assert carried == pytest.approx(MINI_BATCHES * signal / tokens, rel=1e-5)


def test_trls_response_shuffle_splits_groups_across_steps(model_dir, tmp_path):
    """Without group preservation (TRL's order) a step sees parts of groups: the case the option fixes."""
    trainer, _ = train(model_dir, tmp_path, rule="balanced-agg", group_preserving=False, num_iterations=1, steps=2)
    steps = optimiser_steps(trainer)
    assert any(len(rows) < G for step in steps for rows in by_group(step).values())


def untrained(model_dir, tmp_path, *, aggregation="balanced-agg", group_preserving=False, **config):
    """An AggregatedGRPOTrainer that is only built (for its bookkeeping methods)."""
    from datasets import Dataset

    args = trl.GRPOConfig(**{"output_dir": str(tmp_path), "loss_type": "dr_grpo", "beta": 0.0, "num_generations": G,
                             "per_device_train_batch_size": 4, "max_completion_length": MAX_LEN, "max_steps": 1,
                             "report_to": "none", "bf16": False, "use_cpu": True, "save_strategy": "no", **config})
    return AggregatedGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), args=args,
                                 train_dataset=Dataset.from_list([{"prompt": "1+1="}] * 4),
                                 processing_class=load_tokenizer(model_dir), reward_funcs=[length_parity_reward],
                                 aggregation=aggregation, group_preserving_minibatches=group_preserving)


def test_group_preserving_needs_whole_groups_per_step(model_dir, tmp_path):
    with pytest.raises(ValueError, match="whole groups"):
        untrained(model_dir, tmp_path, group_preserving=True, per_device_train_batch_size=2,
                  gradient_accumulation_steps=1, steps_per_generation=4)


def test_eval_batches_get_the_rule_over_the_batch_whatever_the_mini_batches(model_dir, tmp_path):
    trainer = untrained(model_dir, tmp_path, per_device_train_batch_size=4, gradient_accumulation_steps=2,
                        steps_per_generation=4, per_device_eval_batch_size=4)
    trainer.model.eval()
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]])
    advantages = torch.tensor([1.0, -1.0, 1.0, -1.0])
    out = trainer._weight_advantages({"completion_mask": mask, "advantages": advantages}, torch.arange(4))
    # balanced-agg over one group of 4: sides 1/2 each, over 3 + 1 and 2 + 3 tokens; C = 1 * 4 * MAX_LEN
    expected = advantages * torch.tensor([0.5 / 4, 0.5 / 5, 0.5 / 4, 0.5 / 5]) * 4 * MAX_LEN
    assert torch.allclose(out["advantages"], expected)


def test_importance_sampling_masked_fractions():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    # sequence_mask: ratio [B, 1]; responses 0 and 3 masked (3 has no loss tokens and does not count)
    sequence = torch.tensor([[0.0], [1.3], [0.7], [0.0]])
    counts = importance_sampling_masked_counts(sequence, mask)
    assert counts.tolist() == [1, 3, 3, 6]
    assert importance_sampling_masked_fractions(counts) == {"vllm_is_masked_frac": 1 / 3,
                                                            "vllm_is_masked_token_frac": 3 / 6}
    # token_mask: ratio [B, T]; a response is masked only when all its loss tokens are
    token = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 1.1, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [1.0] * 4])
    fractions = importance_sampling_masked_fractions(importance_sampling_masked_counts(token, mask))
    assert fractions == {"vllm_is_masked_frac": 1 / 3, "vllm_is_masked_token_frac": 4 / 6}
    # counts from two processes add up
    both = importance_sampling_masked_counts(sequence, mask) + importance_sampling_masked_counts(token, mask)
    assert importance_sampling_masked_fractions(both)["vllm_is_masked_frac"] == pytest.approx(2 / 6)
    with pytest.raises(ValueError, match="does not fit"):
        importance_sampling_masked_counts(torch.ones(4, 3), mask)


def test_is_masked_fractions_reach_the_step_statistics(model_dir, tmp_path):
    """With the correction on, TRL's ratio in the generation output becomes vllm_is_masked_* in
    generation_stats, which the metrics callback writes into every step's metrics.jsonl line."""
    trainer = untrained(model_dir, tmp_path)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]])
    lengths, advantages, groups = mask.sum(1), torch.tensor([1.0, -1.0, 1.0, -1.0]), torch.zeros(4, dtype=torch.long)
    output = {"completion_mask": mask, "importance_sampling_ratio": torch.tensor([[0.0], [1.2], [0.9], [0.0]])}
    trainer._record_generation_stats("train", lengths, advantages, groups, torch.ones(4) / 9, output)
    assert trainer.generation_stats["vllm_is_masked_frac"] == 0.5
    assert trainer.generation_stats["vllm_is_masked_token_frac"] == 6 / 9
    trainer._record_generation_stats("train", lengths, advantages, groups, torch.ones(4) / 9, {"completion_mask": mask})
    assert "vllm_is_masked_frac" not in trainer.generation_stats  # correction off: no such metric


def test_two_processes_layout_and_step_weights_without_processes():
    """The multi-process bookkeeping on its own: 2 ranks, each with 4 groups of 4 in a group order,
    micro-batches of 2, GA 2, 4 mini-batches. Every optimiser step (over both ranks) gets whole groups and
    balanced-agg sides k/G, (G-k)/G of 1/#groups-in-step; token-agg-microbatch 1/(T_m * GA * P)."""
    from types import SimpleNamespace

    def fake(rank, rule, group_preserving=True):
        return SimpleNamespace(
            accelerator=SimpleNamespace(process_index=rank), num_generations=G, aggregation=rule, aggregation_alpha=None,
            aggregation_scope="group" if rule == "balanced-agg" else "batch", max_completion_length=MAX_LEN,
            group_preserving_minibatches=group_preserving, mini_batches=4,
            args=SimpleNamespace(per_device_train_batch_size=2, gradient_accumulation_steps=2, steps_per_generation=8))

    gen = torch.Generator().manual_seed(0)
    rows_per_rank = 16
    lengths = torch.randint(1, 30, (2 * rows_per_rank,), generator=gen)
    rewards = torch.tensor([1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 1] * 2, dtype=torch.float64)
    groups = torch.arange(2 * rows_per_rank) // G
    advantages = (rewards - rewards.view(-1, G).mean(1).repeat_interleave(G)).float()
    for rule in ("balanced-agg", "token-agg-microbatch"):
        micro, step = [], []
        for rank in range(2):
            order = (torch.randperm(4, generator=gen)[:, None] * G + torch.arange(G)).flatten()
            m, s = AggregatedGRPOTrainer._local_layout(fake(rank, rule), order, "train")
            micro.append(m)
            step.append(s)
        micro, step = torch.cat(micro), torch.cat(step)
        assert sorted(Counter(step.tolist()).values()) == [8] * 4  # 4 steps of 2 x 4 responses
        weights = AggregatedGRPOTrainer.step_weights(fake(0, rule), lengths, advantages, groups, micro, step).double()
        for s in range(4):
            in_step = step == s
            step_groups = Counter(groups[in_step].tolist())
            assert set(step_groups.values()) == {G} and len(step_groups) == 2  # one whole group from each rank
            if rule == "balanced-agg":
                for g in step_groups:
                    rows = groups == g
                    k = int((advantages[rows] > 0).sum())
                    pos = float((weights * lengths)[rows & (advantages > 0)].sum())
                    assert pos == pytest.approx((k / G) / 2)
            else:
                for m in micro[in_step].unique():
                    rows = micro == m
                    assert torch.allclose(weights[rows], 1 / (lengths[rows].sum().double() * 2 * 2))


def test_rule_parameters_and_the_padded_width_reach_the_step_weights():
    """delta-l-norm takes the trainer's alpha (a cell's delta_l_alpha) and the budget; seq-mean-token-sum-norm
    the generation batch's padded width, its longest completion."""
    from types import SimpleNamespace

    from balagg.aggregation import aggregation_weights

    lengths = torch.tensor([3, 9, 4, 7, 2, 5, 8, 6])
    advantages = torch.tensor([1.0, -1.0, 1.0, -1.0, -1.0, 1.0, 1.0, -1.0])
    groups = torch.arange(8) // 4
    for rule, scope, alpha, expected in (
            ("delta-l-norm", "batch", 0.75, dict(max_length=MAX_LEN, alpha=0.75)),
            ("seq-mean-token-sum-norm", "group", None, dict(padded_width=9))):
        fake = SimpleNamespace(aggregation=rule, aggregation_scope=scope, aggregation_alpha=alpha,
                               max_completion_length=MAX_LEN, group_preserving_minibatches=False, mini_batches=2)
        got = AggregatedGRPOTrainer.step_weights(fake, lengths, advantages, groups, torch.zeros(8), torch.zeros(8))
        want = aggregation_weights(rule, lengths, advantages, groups, scope=scope, **expected) * 2
        assert torch.allclose(got.double(), want.double())
    assert not torch.allclose(
        aggregation_weights("delta-l-norm", lengths, advantages, groups, max_length=MAX_LEN, alpha=0.75),
        aggregation_weights("delta-l-norm", lengths, advantages, groups, max_length=MAX_LEN))


def test_the_padded_width_counts_tool_output_that_the_loss_masks(model_dir, tmp_path):
    """seq-mean-token-sum-norm divides by the rows' padded width: the longest completion, tool tokens included,
    though a tool mask keeps them out of the loss (and out of the lengths the other rules read)."""
    from balagg.aggregation import aggregation_weights

    trainer = untrained(model_dir, tmp_path, per_device_train_batch_size=4, per_device_eval_batch_size=4,
                        aggregation="seq-mean-token-sum-norm")
    trainer.model.eval()
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]])
    tool = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]])  # row 0's last two: tool output
    advantages = torch.tensor([1.0, -1.0, 1.0, -1.0])
    out = trainer._weight_advantages({"completion_mask": mask, "tool_mask": tool, "advantages": advantages},
                                     torch.arange(4))
    lengths, groups = torch.tensor([2, 2, 1, 3]), torch.zeros(4, dtype=torch.long)
    weights = aggregation_weights("seq-mean-token-sum-norm", lengths, advantages, groups, padded_width=4)
    assert torch.allclose(out["advantages"], advantages * weights * 4 * MAX_LEN)  # 1 / (G x 4), not 1 / (G x 3)
