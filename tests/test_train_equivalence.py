"""AggregatedGRPOTrainer is exact: token-agg (scope batch) == TRL dapo, seq-agg == TRL grpo (loss and
gradients at every optimiser step, with gradient accumulation 2 and num_iterations 2), and
balanced-agg == a direct per-group implementation of the paper's formula; beta > 0 is refused."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
from transformers import AutoModelForCausalLM, TrainerCallback  # noqa: E402

from balagg.prompts import load_tokenizer  # noqa: E402
from balagg.tinyworld.model import build_model, build_tokenizer  # noqa: E402
from balagg.train.trainer import AggregatedGRPOTrainer  # noqa: E402

G = 4
MAX_LEN = 12


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("tiny")
    tokenizer = build_tokenizer()
    build_model("tiny-s", tokenizer, seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def length_parity_reward(completions, **_):
    """Binary and length-coupled, so groups are mixed and positives/negatives differ in length."""
    return [float(len(c) % 2 == 0) for c in completions]


class GradientRecorder(TrainerCallback):
    def __init__(self):
        self.gradients = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.gradients.append(torch.cat([p.grad.detach().flatten().clone() for p in model.parameters()]))


def make_trainer(model_dir, out_dir, *, loss_type, aggregation=None, beta=0.0, steps=4, cls=None):
    from datasets import Dataset

    tokenizer = load_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    dataset = Dataset.from_list([{"prompt": f"{a}+{b}="} for a in range(4) for b in range(4)])
    args = trl.GRPOConfig(
        output_dir=str(out_dir), loss_type=loss_type, beta=beta, num_generations=G,
        per_device_train_batch_size=4, gradient_accumulation_steps=2, num_iterations=2,
        max_completion_length=MAX_LEN, max_steps=steps, learning_rate=0.1, optim="sgd",
        lr_scheduler_type="constant", seed=3, max_grad_norm=0.0,  # no clipping: raw gradients are compared
        logging_steps=1, report_to="none", bf16=False,
        gradient_checkpointing=False, epsilon=0.2, epsilon_high=0.28, save_strategy="no", disable_tqdm=True,
        generation_kwargs={"sequence_bias": {(tokenizer.eos_token_id,): 3.0}},
    )
    recorder = GradientRecorder()
    common = dict(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                  reward_funcs=[length_parity_reward], callbacks=[recorder])
    if aggregation is None:
        trainer = trl.GRPOTrainer(**common)
    else:
        trainer = (cls or AggregatedGRPOTrainer)(**common, aggregation=aggregation)
    return trainer, recorder


def train_and_record(trainer, recorder):
    torch.set_num_threads(1)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return losses, recorder.gradients


def relative_l2(a, b):
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@pytest.mark.parametrize(("rule", "trl_loss"), [("token-agg", "dapo"), ("seq-agg", "grpo")])
def test_rule_reproduces_trl_loss_type(model_dir, tmp_path, rule, trl_loss):
    # build and train one after the other: constructing a trainer re-seeds the global RNG
    ours, ours_rec = make_trainer(model_dir, tmp_path / "ours", loss_type="dr_grpo", aggregation=rule)
    our_losses, our_grads = train_and_record(ours, ours_rec)
    ref, ref_rec = make_trainer(model_dir, tmp_path / "ref", loss_type=trl_loss)
    ref_losses, ref_grads = train_and_record(ref, ref_rec)

    assert len(our_losses) == len(ref_losses) == 4 and len(our_grads) == 4
    # clipping was active (num_iterations 2 makes the second pass off-policy), so the test covers the clip
    clip = [e["clip_ratio/region_mean"] for e in ref.state.log_history if "clip_ratio/region_mean" in e]
    assert max(clip) > 0
    # lengths vary, so the rule matters (seq and token aggregation would give different gradients)
    stats = ours.generation_stats
    assert stats["len_std"] > 0 and stats["mixed_group_frac"] > 0
    for step, (ours_loss, ref_loss) in enumerate(zip(our_losses, ref_losses, strict=True)):
        assert ours_loss == pytest.approx(ref_loss, rel=1e-5, abs=1e-7), f"loss differs at step {step + 1}"
    for step, (g_ours, g_ref) in enumerate(zip(our_grads, ref_grads, strict=True)):
        assert g_ref.norm() > 0
        assert relative_l2(g_ours, g_ref) < 1e-5, f"gradient differs at step {step + 1}"


class RecordingTrainer(AggregatedGRPOTrainer):
    """Keeps TRL's raw generation batches (before the weights are folded in)."""

    def _weight_advantages(self, output, order):
        self.raw_batches = getattr(self, "raw_batches", []) + [{k: v.clone() if torch.is_tensor(v) else v
                                                                 for k, v in output.items()}]
        return super()._weight_advantages(output, order)


def paper_balanced_loss(model, batch):
    """The paper's BA, written directly: per group g with k positives of G responses,
    L_g = (k/G) * sum_{i in P} sum_t l_it / L+  +  ((G-k)/G) * sum_{i in N} sum_t l_it / L-,
    loss = mean_g L_g, with l_it = -A_i * ratio_it (ratio 1 on the first, on-policy step)."""
    prompt_ids, completion_ids = batch["prompt_ids"], batch["completion_ids"]
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    logits = model(input_ids=ids, attention_mask=attention).logits[:, prompt_ids.shape[1] - 1:-1]
    logps = torch.log_softmax(logits.float(), dim=-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    ratio = torch.exp(logps - logps.detach())
    mask = batch["completion_mask"].float()
    advantages = batch["advantages"]
    groups = []
    for start in range(0, len(advantages), G):
        rows = slice(start, start + G)
        adv, tok_loss, m = advantages[rows], -(advantages[rows, None] * ratio[rows]), mask[rows]
        positive, negative = adv > 0, adv < 0
        k = int(positive.sum())
        group_loss = torch.zeros(())
        if k:
            group_loss = group_loss + (k / G) * (tok_loss[positive] * m[positive]).sum() / m[positive].sum()
        if int(negative.sum()):
            group_loss = group_loss + ((G - k) / G) * (tok_loss[negative] * m[negative]).sum() / m[negative].sum()
        groups.append(group_loss)
    return torch.stack(groups).mean()


def test_balanced_agg_equals_paper_formula(model_dir, tmp_path):
    trainer, recorder = make_trainer(model_dir, tmp_path / "ba", loss_type="dr_grpo", aggregation="balanced-agg",
                                     steps=1, cls=RecordingTrainer)
    train_and_record(trainer, recorder)
    (batch,) = trainer.raw_batches
    assert ((batch["advantages"] > 0).any() and (batch["advantages"] < 0).any())
    model = AutoModelForCausalLM.from_pretrained(model_dir)  # the parameters of step 1
    paper_balanced_loss(model, batch).backward()
    direct = torch.cat([p.grad.flatten() for p in model.parameters()])
    logged_loss = next(e["loss"] for e in trainer.state.log_history if "loss" in e)
    with torch.no_grad():
        assert logged_loss == pytest.approx(float(paper_balanced_loss(model, batch)), rel=1e-5, abs=1e-7)
    assert relative_l2(recorder.gradients[0], direct) < 1e-4
    # and it is not token aggregation in disguise: the global token mean gives another gradient here
    model.zero_grad()
    mask = batch["completion_mask"].float()
    paper_token_mean = paper_token_loss(model, batch, mask)
    paper_token_mean.backward()
    token_direct = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert relative_l2(token_direct, direct) > 1e-2


def paper_token_loss(model, batch, mask):
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    logits = model(input_ids=ids, attention_mask=attention).logits[:, batch["prompt_ids"].shape[1] - 1:-1]
    logps = torch.log_softmax(logits, dim=-1).gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)
    return (-(batch["advantages"][:, None] * torch.exp(logps - logps.detach())) * mask).sum() / mask.sum()


def test_beta_is_refused(model_dir, tmp_path):
    with pytest.raises(ValueError, match="beta"):
        make_trainer(model_dir, tmp_path / "kl", loss_type="dr_grpo", aggregation="balanced-agg", beta=0.04)


def test_other_loss_types_are_refused(model_dir, tmp_path):
    with pytest.raises(ValueError, match="dr_grpo"):
        make_trainer(model_dir, tmp_path / "dapo", loss_type="dapo", aggregation="token-agg")
