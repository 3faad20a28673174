"""Padding columns are not computed: each micro-batch runs at its own widest row (prompt and completion
trimmed separately), the no-gradient log-prob passes at their chunks' widths, and rows of an optimiser
step are ordered by width; the losses and gradients equal those of TRL's padded batches."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
from transformers import AutoModelForCausalLM  # noqa: E402

from balagg.prompts import load_tokenizer  # noqa: E402
from balagg.train.trainer import AggregatedGRPOTrainer  # noqa: E402
from test_train_equivalence import (GradientRecorder, length_parity_reward, model_dir,  # noqa: E402,F401
                                    relative_l2)

G = 4
MICRO = 4
GA = 2
MAX_LEN = 12
PROMPTS = [f"{a}+{b}=" for a in (1, 23, 456, 7890) for b in (5, 67, 890, 1234)]  # 4 to 10 characters


def padded_widths(prompt_mask, completion_mask):
    """Columns a micro-batch needs: its longest prompt plus its longest completion."""
    prompt = int(prompt_mask.sum(1).max())
    columns = torch.arange(1, completion_mask.shape[1] + 1)
    completion = int(((completion_mask != 0) * columns).amax(1).max())
    return prompt, completion


class WidthRecorder(AggregatedGRPOTrainer):
    """Records each generation batch's padded widths, each micro-batch reaching the loss, and (with the
    hook of :func:`train`) the width of every log-prob forward pass (with and without gradients), not
    those of generation."""

    scoring = False

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        self.scoring = True
        try:
            return super()._get_per_token_logps_and_entropies(*args, **kwargs)
        finally:
            self.scoring = False

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self.generation_widths = getattr(self, "generation_widths", []) + [
                (output["prompt_ids"].shape[1], output["completion_ids"].shape[1],
                 padded_widths(output["prompt_mask"], output["completion_mask"]))]
        return output

    def _compute_loss(self, model, inputs):
        self.loss_inputs = getattr(self, "loss_inputs", []) + [
            {key: inputs[key].detach().clone() for key in ("prompt_mask", "completion_mask", "old_per_token_logps")
             if key in inputs}]
        return super()._compute_loss(model, inputs)


def train(model_dir, out_dir, *, rule="balanced-agg", steps=4, num_iterations=2, cls=WidthRecorder, **options):
    """2 mini-batches of 2 micro-batches per generation batch; with num_iterations 2 the 4 steps train on
    one generation batch (twice), whose old log-probs are computed in a no-gradient pass."""
    from datasets import Dataset

    tokenizer = load_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    args = trl.GRPOConfig(
        output_dir=str(out_dir), loss_type="dr_grpo", beta=0.0, num_generations=G,
        per_device_train_batch_size=MICRO, gradient_accumulation_steps=GA, steps_per_generation=2 * GA,
        num_iterations=num_iterations, max_completion_length=MAX_LEN, max_steps=steps, learning_rate=0.1,
        optim="sgd", lr_scheduler_type="constant", seed=5, max_grad_norm=0.0, logging_steps=1, report_to="none",
        bf16=False, gradient_checkpointing=False, epsilon=0.2, epsilon_high=0.28, save_strategy="no",
        disable_tqdm=True, generation_kwargs={"sequence_bias": {(tokenizer.eos_token_id,): 3.0}},
    )
    recorder = GradientRecorder()
    trainer = cls(model=model, args=args, train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS]),
                  processing_class=tokenizer, reward_funcs=[length_parity_reward], callbacks=[recorder],
                  aggregation=rule, **options)
    forwards = []
    trainer.model.register_forward_pre_hook(
        lambda module, args, kwargs: forwards.append((kwargs["input_ids"].shape[1], torch.is_grad_enabled()))
        if trainer.scoring else None, with_kwargs=True)
    torch.set_num_threads(1)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return trainer, losses, recorder.gradients, forwards


def assert_same_steps(losses, gradients, reference_losses, reference_gradients):
    assert len(losses) == len(reference_losses) == len(gradients) == len(reference_gradients) == 4
    for step, (loss, reference) in enumerate(zip(losses, reference_losses, strict=True), start=1):
        assert loss == pytest.approx(reference, rel=1e-5, abs=1e-7), f"loss differs at step {step}"
    for step, (gradient, reference) in enumerate(zip(gradients, reference_gradients, strict=True), start=1):
        assert reference.norm() > 0
        assert relative_l2(gradient, reference) < 1e-5, f"gradient differs at step {step}"


@pytest.fixture(scope="module")
def padded_run(model_dir, tmp_path_factory):
    """TRL's padded micro-batches and passes, in TRL's order within each step."""
    return train(model_dir, tmp_path_factory.mktemp("padded"), trim_padding=False, length_sorted_microbatches=False)


def test_the_forward_passes_see_each_micro_batchs_own_width(model_dir, tmp_path):
    trainer, _, _, forwards = train(model_dir, tmp_path)
    training = [width for width, grad in forwards if grad]
    assert len(training) == len(trainer.loss_inputs) == 4 * GA
    for width, micro_batch in zip(training, trainer.loss_inputs, strict=True):
        prompt, completion = padded_widths(micro_batch["prompt_mask"], micro_batch["completion_mask"])
        assert micro_batch["prompt_mask"].shape[1] == prompt  # no leading column without a prompt token
        assert micro_batch["completion_mask"].shape[1] == completion  # no trailing column without a token
        assert micro_batch["old_per_token_logps"].shape[1] == completion  # the matching old log-probs
        assert width == prompt + completion
    (full,) = [prompt + completion for prompt, completion, _ in trainer.generation_widths]  # one generation batch
    assert sum(training) < len(training) * full
    # the no-gradient pass (old log-probs, 4 chunks of MICRO rows) also runs below the batch's width
    no_grad = [width for width, grad in forwards if not grad]
    assert len(no_grad) == 2 * GA and max(no_grad) <= full and min(no_grad) < full


def test_trimmed_micro_batches_give_the_padded_losses_and_gradients(model_dir, tmp_path, padded_run):
    padded, padded_losses, padded_gradients, padded_forwards = padded_run
    (width,) = [prompt + completion for prompt, completion, _ in padded.generation_widths]
    assert {width for width, _ in padded_forwards} == {width}  # TRL: every pass at the batch's width
    trainer, losses, gradients, forwards = train(model_dir, tmp_path, length_sorted_microbatches=False)
    assert len({width for width, grad in forwards if grad}) > 1  # trimming happened
    assert_same_steps(losses, gradients, padded_losses, padded_gradients)


def test_width_sorted_steps_give_the_padded_losses_and_gradients(model_dir, tmp_path, padded_run):
    _, padded_losses, padded_gradients, padded_forwards = padded_run
    trainer, losses, gradients, forwards = train(model_dir, tmp_path)
    assert_same_steps(losses, gradients, padded_losses, padded_gradients)
    assert sum(w for w, grad in forwards if grad) < sum(w for w, grad in padded_forwards if grad)


@pytest.mark.parametrize("rule", ["token-agg-microbatch"])
def test_micro_batch_rules_keep_their_micro_batches(model_dir, tmp_path, rule):
    """The micro-batch rules are defined by their micro-batches: those are not reordered by width."""
    sorted_run = train(model_dir, tmp_path / "sorted", rule=rule, steps=2, num_iterations=1)[0]
    plain = train(model_dir, tmp_path / "plain", rule=rule, steps=2, num_iterations=1,
                  length_sorted_microbatches=False)[0]
    for ours, theirs in zip(sorted_run.loss_inputs, plain.loss_inputs, strict=True):
        assert torch.equal(ours["completion_mask"], theirs["completion_mask"])


# ---- the padding functions ------------------------------------------------------------------------


def test_trim_micro_batch_cuts_prompt_and_completion_padding_from_every_per_token_tensor():
    from balagg.train.padding import trim_micro_batch

    prompt_mask = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 1, 1, 1]])
    completion_mask = torch.tensor([[1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0]])
    batch = {
        "prompt_ids": torch.arange(10).view(2, 5), "prompt_mask": prompt_mask,
        "completion_ids": torch.arange(12).view(2, 6), "completion_mask": completion_mask,
        "old_per_token_logps": -torch.rand(2, 6), "sampling_per_token_logps": -torch.rand(2, 6),
        "tool_mask": torch.ones(2, 6), "importance_sampling_ratio": torch.ones(2, 1),
        "advantages": torch.tensor([1.0, -1.0]), "num_items_in_batch": torch.tensor(5),
    }
    trimmed = trim_micro_batch(batch)
    assert torch.equal(trimmed["prompt_ids"], batch["prompt_ids"][:, 2:])
    assert torch.equal(trimmed["prompt_mask"], prompt_mask[:, 2:])
    for key in ("completion_ids", "completion_mask", "old_per_token_logps", "sampling_per_token_logps", "tool_mask"):
        assert torch.equal(trimmed[key], batch[key][:, :3]), key
    for key in ("importance_sampling_ratio", "advantages", "num_items_in_batch"):
        assert trimmed[key] is batch[key], key
    # TRL's pad_to_multiple_of is kept
    rounded = trim_micro_batch(batch, multiple_of=2)
    assert rounded["prompt_ids"].shape[1] == 4 and rounded["completion_ids"].shape[1] == 4
    # an all-padding completion keeps one column (TRL reads completion_ids.size(1) log-probs)
    empty = trim_micro_batch(dict(batch, completion_mask=torch.zeros(2, 6, dtype=torch.long)))
    assert empty["completion_ids"].shape[1] == 1


def test_trim_micro_batch_refuses_an_unknown_per_token_tensor():
    from balagg.train.padding import trim_micro_batch

    batch = {"prompt_ids": torch.zeros(2, 5), "prompt_mask": torch.ones(2, 5), "completion_ids": torch.zeros(2, 6),
             "completion_mask": torch.ones(2, 6), "per_token_bonus": torch.zeros(2, 6)}
    with pytest.raises(ValueError, match="per_token_bonus"):
        trim_micro_batch(batch)


def test_sort_within_steps_keeps_each_steps_rows():
    from balagg.train.padding import sort_within_steps

    order = torch.tensor([5, 0, 3, 1, 4, 2, 7, 6])
    widths = torch.tensor([3, 9, 3, 3, 8, 0, 2, 7])  # rows 0 and 3 tie: they keep order's order
    sorted_order = sort_within_steps(order, widths, rows_per_step=4)
    assert sorted_order.tolist() == [1, 0, 3, 5, 4, 7, 2, 6]
    with pytest.raises(ValueError, match="whole optimiser steps"):
        sort_within_steps(order, widths, rows_per_step=3)
