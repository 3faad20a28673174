"""Warm start and step-0 statistics (balagg.tinyworld.warmstart)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")

from balagg.tinyworld.warmstart import (  # noqa: E402
    WarmStartConfig,
    _batch_loss_backward,
    _batches,
    _collate,
    _length_parts,
    _lr_factor,
    boxed_integer,
    step0_statistics,
)

torch.set_num_threads(1)


def test_lr_schedule_warms_up_then_decays_to_zero():
    config = WarmStartConfig(steps=200, warmup_steps=50)
    factors = [_lr_factor(s, config) for s in range(200)]
    assert factors[0] == pytest.approx(1 / 50) and factors[49] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(factors[49:], factors[50:]))
    assert factors[-1] < 1e-3 and factors[125] == pytest.approx(0.5, abs=0.01)


def test_collate_labels_only_completion_tokens():
    ids, mask, labels = _collate([([5, 6, 7], [8, 1]), ([5], [9, 9, 9, 1])], pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 8, 1], [5, 9, 9, 9, 1]]
    assert mask.tolist() == [[1] * 5, [1] * 5]
    assert labels.tolist() == [[-100, -100, -100, 8, 1], [-100, 9, 9, 9, 1]]
    ids, mask, labels = _collate([([5], [8, 1]), ([5, 6], [9, 9, 9, 1])], pad_id=0)
    assert ids[0].tolist() == [5, 8, 1, 0, 0, 0] and mask[0].tolist() == [1, 1, 1, 0, 0, 0]
    assert labels[0].tolist() == [-100, 8, 1, -100, -100, -100]


def test_length_parts_sort_and_cut_the_batch():
    batch = [([1] * n, [2] * n) for n in (5, 1, 4, 2, 3)]
    assert _length_parts(batch, 1) == [batch]
    parts = _length_parts(batch, 2)
    assert [[len(p) for p, _ in part] for part in parts] == [[1, 2], [3, 4, 5]]
    assert len(_length_parts(batch, 5)) == 5
    with pytest.raises(ValueError, match="length_buckets"):
        WarmStartConfig(length_buckets=0)


@pytest.mark.parametrize("buckets", [2, 3])
def test_length_buckets_give_the_one_batch_gradient(buckets):
    """Padding a batch in length-sorted parts changes the padding, not the update: the loss and every
    parameter's gradient equal the one padded batch's (a wrong token count in any part breaks this)."""
    from balagg.tinyworld.model import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    batch = _batches(WarmStartConfig(steps=1, seed=3), tokenizer)[0]
    assert len({len(p) + len(c) for p, c in batch}) > 3  # lengths vary: the parts pad differently

    def gradient(k):
        model = build_model("tiny-xs", tokenizer, seed=0)
        loss, tokens = _batch_loss_backward(model, batch, tokenizer.pad_token_id, k)
        return loss, tokens, {n: p.grad.clone() for n, p in model.named_parameters()}

    (loss1, tokens1, grads1), (loss_k, tokens_k, grads_k) = gradient(1), gradient(buckets)
    assert loss_k == pytest.approx(loss1, rel=1e-5)
    assert tokens_k == tokens1 == sum(len(p) + len(c) for p, c in batch)
    for name, grad in grads1.items():
        torch.testing.assert_close(grads_k[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_boxed_integer():
    assert boxed_integer("1+2=3. \\boxed{3}") == 3
    assert boxed_integer("\\boxed{1} then \\boxed{-4}") == -4
    assert boxed_integer("no box") is None and boxed_integer("\\boxed{x}") is None


def test_step0_statistics_by_hand():
    # problem 0 (gold 3): right 10, right 10, wrong 20, wrong 30; problem 1 (gold 5): wrong 20, 20, 20, 20
    texts = ["\\boxed{3}", "\\boxed{3}", "\\boxed{4}", "nothing", "\\boxed{4}", "\\boxed{4}", "\\boxed{4}", "x"]
    lengths = [10, 10, 20, 30, 20, 20, 20, 20]
    samples = [{"problem": i // 4, "text": t, "length": n, "truncated": n == 30}
               for i, (t, n) in enumerate(zip(texts, lengths))]
    stats = step0_statistics(samples, ["3", "5"], samples_per_problem=4)
    assert stats["accuracy"] == 0.25 and stats["n_samples"] == 8 and stats["n_problems"] == 2
    assert stats["len_right_mean"] == 10 and stats["len_wrong_mean"] == pytest.approx(130 / 6)
    mean = 150 / 8
    std = math.sqrt(sum((n - mean) ** 2 for n in lengths) / 8)
    assert stats["len_cv"] == pytest.approx(std / mean)
    assert stats["mixed_group_frac"] == 0.5 and stats["truncation_rate"] == 1 / 8
    assert stats["len_pos_mean"] == 10 and stats["len_neg_mean"] == 25  # mixed groups only
    assert stats["wrong_longer"] is True and stats["in_regime"] is True
    everything_right = step0_statistics(
        [{"problem": 0, "text": "\\boxed{3}", "length": n, "truncated": False} for n in (5, 15)], ["3"], 2)
    assert everything_right["accuracy"] == 1.0 and everything_right["in_regime"] is False
    assert everything_right["wrong_longer"] is False and math.isnan(everything_right["len_wrong_mean"])


def test_project_verifier_agrees_with_integer_boxes_on_boxed_solutions():
    """The card uses verify_math where math-verify is installed (the project venv pins it); on every
    boxed synthetic solution its verdict is the integer comparison's."""
    pytest.importorskip("math_verify")
    import random

    from balagg.tinyworld.tasks import flawed_solution, sample_chain, worked_solution
    from balagg.tinyworld.warmstart import answer_checker

    name, check = answer_checker()
    assert name.startswith("math-verify")
    rng = random.Random(0)
    for _ in range(60):
        chain = sample_chain(rng, rng.randint(1, 5))
        gold = str(chain.answer)
        assert check(worked_solution(chain), gold)
        wrong_text, _ = flawed_solution(chain, rng, rng.choice(["long", "same", "short"]))
        assert not check(wrong_text, gold)


@pytest.mark.slow
def test_reduced_warm_start_reaches_the_step0_regime(tmp_path):
    """tiny-s warm-started as the embedded default does (configs/default.yaml's tinyworld sft_steps and
    sft_length_buckets: 600 steps, each batch padded in 2 length-sorted parts) and a 32-problem card already
    sits in the regime the aggregation rules need: accuracy in [0.2, 0.8] and length CV >= 0.3 on both
    training sets, wrong answers clearly longer than right ones where they ramble (dapo-math-17k).
    Fewer steps do not reach it for every seed: at 400 steps seeds 0 and 2 miss the accuracy bound, at 500
    seed 0 meets it by 0.007."""
    import yaml

    from balagg.benchmarks import TRAINING_SETS as TRAIN_SETS
    from balagg.tinyworld.raw import write_raw

    default = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs/default.yaml").read_text())["tinyworld"]
    from balagg.tinyworld.warmstart import build_warm_model

    write_raw(tmp_path / "raw", seed=0, train_problems=32, bench_problems=1, names=TRAIN_SETS)
    card = build_warm_model("tiny-s", tmp_path / "raw", tmp_path / "model", seed=0,
                            config=WarmStartConfig(steps=default["sft_steps"], seed=0,
                                                   length_buckets=default["sft_length_buckets"]),
                            card_problems=32,
                            samples_per_problem=8)
    assert set(card["datasets"]) == set(TRAIN_SETS)
    for name, stats in card["datasets"].items():
        assert stats["n_samples"] == 256
        assert 0.2 <= stats["accuracy"] <= 0.8, (name, stats)
        assert stats["len_cv"] >= 0.3, (name, stats)
        assert stats["truncation_rate"] < 0.05
    dapo = card["datasets"]["dapo-math-17k"]
    assert dapo["len_wrong_mean"] > dapo["len_right_mean"] + 3
    assert dapo["len_neg_mean"] > dapo["len_pos_mean"]  # also inside mixed groups, where the loss sees it
    assert card["regime"]["met"] is True
    assert json.loads((tmp_path / "model" / "card.json").read_text())["datasets"] == card["datasets"]
