"""The prompt order over several epochs: a function of (seed, epoch) only, so a job resumed in any epoch
trains on the uninterrupted run's prompts (a kill -9 in epoch 1 of 3, resumed, gives its metrics)."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from balagg.train.files import read_metrics  # noqa: E402
from test_train_run import comparable, kill_9_after_steps, train_command  # noqa: E402

PROMPTS = 6
PROMPTS_PER_STEP = 2
STEPS_PER_EPOCH = PROMPTS // PROMPTS_PER_STEP  # one optimiser step per generation batch
EPOCHS = 3
TOTAL_STEPS = STEPS_PER_EPOCH * EPOCHS


def sampler(seed=7, **kwargs):
    from balagg.train.sampler import EpochRepeatSampler

    return EpochRepeatSampler(list(range(10)), mini_repeat_count=2, batch_size=3, repeat_count=2, seed=seed,
                              **kwargs)


def test_an_epochs_order_depends_on_seed_and_epoch_only():
    from trl.trainer.utils import RepeatSampler

    uninterrupted = sampler()
    trl_sampler = RepeatSampler(list(range(10)), mini_repeat_count=2, batch_size=3, repeat_count=2, seed=7)
    orders = []
    for epoch in range(4):
        uninterrupted.set_epoch(epoch)
        orders.append(list(uninterrupted))
        # the uninterrupted order is TRL's (its generator's successive permutations)
        assert orders[-1] == list(trl_sampler), epoch
        fresh = sampler()  # as after a resume in this epoch
        fresh.set_epoch(epoch)
        assert list(fresh) == orders[-1], epoch
        assert list(fresh) == orders[-1], "iterating twice must not advance the order"
    assert len({tuple(order) for order in orders}) == 4
    other_seed = sampler(seed=8)
    assert list(other_seed) != orders[0]


def test_an_unshuffled_sampler_keeps_the_dataset_order():
    plain = sampler(shuffle=False)
    plain.set_epoch(3)
    assert list(plain)[:4] == [0, 0, 1, 1]


def test_the_trainer_sets_each_epoch_on_its_sampler_also_behind_a_resume_skip(tmp_path, monkeypatch):
    """accelerate's ``set_epoch`` does not reach a sampler behind a skip wrapper over a process shard, so
    the trainer sets the epoch itself before every epoch it runs."""
    from accelerate.data_loader import BatchSamplerShard, SkipBatchSampler
    from transformers import Trainer

    from balagg.tinyworld.model import build_model, build_tokenizer
    from test_train_equivalence import make_trainer

    path = tmp_path / "model"
    tokenizer = build_tokenizer()
    build_model("tiny-s", tokenizer, seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    trainer, _ = make_trainer(path, tmp_path / "out", loss_type="dr_grpo", aggregation="token-agg")
    loader = trainer.get_train_dataloader()
    train_sampler = trainer.train_sampler
    assert train_sampler.seed == trainer.args.seed
    # two processes' shards behind a resume's skip, as accelerate builds them
    shard = BatchSamplerShard(torch.utils.data.BatchSampler(train_sampler, 4, False), num_processes=2)
    skipped = SkipBatchSampler(shard, skip_batches=1)
    seen = {}

    def run_epoch(self, *, epoch, train_dataloader, **_):
        seen[epoch] = list(skipped)

    monkeypatch.setattr(Trainer, "_run_epoch", run_epoch)
    for epoch in (2, 0):
        trainer._run_epoch(model=None, epoch=epoch, train_dataloader=loader)
        expected = sampler_order(train_sampler, epoch)
        first_shard = [expected[i:i + 4] for i in range(0, len(expected), 8)]
        assert seen[epoch] == first_shard[1:], epoch


def sampler_order(template, epoch):
    from balagg.train.sampler import EpochRepeatSampler

    fresh = EpochRepeatSampler(template.data_source, mini_repeat_count=template.mini_repeat_count,
                               batch_size=template.batch_size, repeat_count=template.repeat_count,
                               seed=template.seed)
    fresh.set_epoch(epoch)
    return list(fresh)


@pytest.fixture(scope="module")
def epochs_cell(tmp_path_factory):
    """A cell whose 6 prompts make 3 steps per epoch: 9 steps are 3 epochs."""
    from tiny_cell import addition_rows, write_cell_inputs

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("epochs")
    rows = addition_rows(3, 2)
    assert len(rows) == PROMPTS
    cell = {
        **write_cell_inputs(root, rows), "seed": 7, "learning_rate": 1e-3, "warmup_steps": 0, "num_generations": 4, "prompts_per_step": PROMPTS_PER_STEP, "mini_batches": 1,
        "micro_batch_size": 4, "num_iterations": 1, "max_prompt_length": 64, "max_completion_length": 12,
        "overlong_buffer_len": 4, "total_steps": TOTAL_STEPS, "save_every": 1, "keep_checkpoints": 2,
        "verifier_workers": 1,
    }
    path = root / "cell.json"
    path.write_text(json.dumps(cell))
    return path


@pytest.fixture(scope="module")
def epochs_reference(epochs_cell, tmp_path_factory):
    root = tmp_path_factory.mktemp("epochs-reference")
    result = subprocess.run(train_command(epochs_cell, root / "train", root / "manifest.json"),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "train"


@pytest.mark.slow
def test_kill_9_in_a_later_epoch_then_resume_matches_uninterrupted_run(epochs_reference, epochs_cell, tmp_path):
    reference = read_metrics(epochs_reference / "metrics.jsonl")
    assert [row["step"] for row in reference] == list(range(1, TOTAL_STEPS + 1))
    workdir, manifest = tmp_path / "train", tmp_path / "manifest.json"
    # killed inside epoch 1 (steps 4-6), after at least the checkpoint that ends epoch 0
    kill_9_after_steps(epochs_cell, workdir, manifest, steps=STEPS_PER_EPOCH + 2, timeout=400)

    result = subprocess.run(train_command(epochs_cell, workdir, manifest), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    resumed_from = re.search(r"resuming from \S*checkpoint-(\d+)", (workdir / "train.log").read_text())
    assert resumed_from, "the second attempt did not resume"
    step = int(resumed_from.group(1))
    assert STEPS_PER_EPOCH <= step < TOTAL_STEPS - STEPS_PER_EPOCH, f"resumed at step {step}, not in epoch 1"
    resumed = read_metrics(workdir / "metrics.jsonl")
    # steps after the resume, in epoch 1 and all of epoch 2, equal the uninterrupted run's
    assert comparable(resumed) == comparable(reference)
