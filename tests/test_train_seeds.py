"""A cell's seed reaches TRL's colocated vLLM engine and the trainer's random streams.

vLLM is not installed here: its ``LLM`` class is replaced by a stand-in that records the engine
arguments and seeds the process's RNGs with its seed, as vLLM's workers do when the engine starts."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

from balagg.train.seeding import engine_seed  # noqa: E402
from balagg.train.trainer import AggregatedGRPOTrainer  # noqa: E402
from test_train_equivalence import length_parity_reward, model_dir  # noqa: E402,F401


class StandInLLM:
    """Records its keyword arguments; seeds Python, NumPy and torch with ``seed`` (vLLM's set_random_seed)."""

    built: list[dict] = []

    def __init__(self, **kwargs):
        StandInLLM.built.append(kwargs)
        random.seed(kwargs["seed"])
        np.random.seed(kwargs["seed"])
        torch.manual_seed(kwargs["seed"])


@pytest.fixture
def stand_in_vllm(monkeypatch):
    from trl.generation import vllm_generation

    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(vllm_generation, "LLM", StandInLLM, raising=False)
    # TRL's colocate init sets these in os.environ: each is recorded here (set, then deleted: a delenv of
    # an absent name records nothing) so that the test's end restores it, or removes it
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(name, os.environ.get(name, ""))
        if not os.environ[name]:
            monkeypatch.delenv(name)
    StandInLLM.built = []
    return StandInLLM


def build(model_dir, out_dir, seed, use_vllm):
    """A trainer for ``seed`` and the RNG draws right after its construction (what the first generation
    batch's row order would draw from)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM

    from balagg.prompts import load_tokenizer

    args = trl.GRPOConfig(
        output_dir=str(out_dir), loss_type="dr_grpo", beta=0.0, num_generations=4, per_device_train_batch_size=4,
        max_completion_length=8, max_steps=1, seed=seed, report_to="none", save_strategy="no", disable_tqdm=True,
        use_vllm=use_vllm, vllm_mode="colocate", bf16=False,
    )
    trainer = AggregatedGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir), args=args, processing_class=load_tokenizer(model_dir),
        train_dataset=Dataset.from_list([{"prompt": f"{a}+{a}="} for a in range(8)]),
        reward_funcs=[length_parity_reward], aggregation="balanced-agg")
    draws = (torch.randperm(1000)[:8].tolist(), random.random(), float(np.random.random()))
    return trainer, draws


def test_the_colocated_engine_gets_the_cells_seed_and_leaves_the_trainers_rngs(model_dir, tmp_path, stand_in_vllm):
    _, with_engine_3 = build(model_dir, tmp_path / "a", seed=3, use_vllm=True)
    _, with_engine_4 = build(model_dir, tmp_path / "b", seed=4, use_vllm=True)
    seeds = [kwargs["seed"] for kwargs in stand_in_vllm.built]
    assert seeds == [engine_seed(3, 0), engine_seed(4, 0)]  # TRL's own: process_index // tp = 0 for both
    assert with_engine_3 != with_engine_4  # the seed reaches the row order and the sampling noise
    _, without_engine = build(model_dir, tmp_path / "c", seed=3, use_vllm=False)
    assert with_engine_3 == without_engine  # the RNGs as TRL's set_seed(seed) left them


def test_engine_seeds_are_distinct_per_cell_seed_and_rank_group():
    seeds = {engine_seed(cell, group) for cell in range(50) for group in range(8)}
    assert len(seeds) == 400 and all(0 <= s < 2**32 for s in seeds)
    assert engine_seed(1, 0) != engine_seed(0, 1)
    assert engine_seed(5, 2) == engine_seed(5, 2)
    with pytest.raises(ValueError, match="seeds must be >= 0"):
        engine_seed(-1, 0)
