"""Gradient accumulation under FSDP2, on 2 CPU processes over gloo through balagg's own train path
(tests/fsdp2_accumulation_worker.py: run_cell with configs/accelerate/fsdp2.yaml's environment and policy,
gradient accumulation 4, two optimiser steps).

- No unsharded gradient survives a micro-batch: each one reduce-scatters into the sharded gradient. Without
  ``sync_each_batch`` (transformers' default ``no_sync`` for micro-batches 1..GA-1) FSDP2 keeps every
  parameter's whole gradient in the reduce dtype between micro-batches: P x 4 bytes per process, what
  balagg.train.memory says that mode would cost.
- The gradients and losses of both modes are the same (the reduction's order only).
- The bytes each process holds after an accumulated step, counted from its real sharded parameters,
  gradients and AdamW moments, are what balagg.train.memory predicts for that shape.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelerate_launch import launch_env
from tiny_cell import addition_rows, write_cell_inputs

REPO = Path(__file__).resolve().parents[1]
FSDP2 = REPO / "configs" / "accelerate" / "fsdp2.yaml"
PROCESSES = 2


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("accumulation")
    cell = {**write_cell_inputs(root, addition_rows()), "seed": 3, "learning_rate": 1e-3, "num_generations": 4,
            "prompts_per_step": 4, "mini_batches": 1, "micro_batch_size": 2, "num_iterations": 1,
            "max_prompt_length": 32, "max_completion_length": 8, "overlong_buffer_len": 4, "total_steps": 2,
            "save_every": 2, "eval_every": 2, "verifier_workers": 1, "num_processes": PROCESSES, "bf16": True,
            "accelerate_config": str(FSDP2)}
    (root / "cell.json").write_text(json.dumps(cell))
    env = {**os.environ, **launch_env(FSDP2, PROCESSES), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                             str(PROCESSES), str(REPO / "tests" / "fsdp2_accumulation_worker.py"), str(root)],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return root, json.loads((root / "result.json").read_text())


def tiny_shape(root: Path):
    """The tiny model's :class:`ModelShape` from its config.json (Qwen2: biased q, k, v projections)."""
    from balagg.train.memory import ModelShape

    config = json.loads((root / "model" / "config.json").read_text())
    names = ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size", "num_attention_heads",
             "num_key_value_heads", "tie_word_embeddings")
    return ModelShape(**{name: config[name] for name in names}, attention_bias=True)


def memory_of(root: Path, sync_each_batch: bool):
    from balagg.train.memory import train_memory

    return train_memory(tiny_shape(root), gpus=PROCESSES, gpu_memory_gb=80, micro_batch_size=2, prompt_tokens=32,
                        completion_tokens=8, bf16=True, reduce_bytes=4, sharded=True, engine_share=None,
                        sync_each_batch=sync_each_batch)


@pytest.mark.slow
def test_every_micro_batch_reduce_scatters_and_no_unsharded_gradient_survives(run):
    _, result = run
    sync = result["sync"]
    assert sync["is_fsdp2"] and sync["distributed_type"] == "DistributedType.FSDP"
    assert sync["gradient_accumulation_steps"] == 4 and sync["sync_each_batch"]
    between = sync["between_micro_batches"]
    assert len(between) == 2 * 3  # micro-batches 1..3 of each of the two steps
    assert all(entry["unsharded_grad_bytes"] == 0 for entry in between), between
    assert all(entry["sharded_grad_bytes"] > 0 for entry in between), between  # reduced, into the shard


@pytest.mark.slow
def test_no_sync_keeps_the_whole_gradient_in_the_reduce_dtype_as_the_memory_model_says(run):
    root, result = run
    no_sync = result["no_sync"]
    assert not no_sync["sync_each_batch"]
    kept = {entry["unsharded_grad_bytes"] for entry in no_sync["between_micro_batches"]}
    predicted = next(term.bytes for term in memory_of(root, sync_each_batch=False).persistent
                     if term.name.startswith("gradients kept between micro-batches"))
    assert kept == {predicted} and predicted == 4 * tiny_shape(root).parameters
    assert next(term.bytes for term in memory_of(root, sync_each_batch=True).persistent
                if term.name.startswith("gradients kept between micro-batches")) == 0


@pytest.mark.slow
def test_reducing_every_micro_batch_changes_no_loss_and_no_gradient(run):
    root, result = run
    assert result["max_relative_gradient_difference"] < 1e-6
    from balagg.train.files import read_metrics

    losses = {mode: [row["pg_loss"] for row in read_metrics(root / mode / "train" / "metrics.jsonl")]
              for mode in ("sync", "no_sync")}
    assert len(losses["sync"]) == 2 and losses["sync"] == pytest.approx(losses["no_sync"], rel=1e-6, abs=1e-9)


@pytest.mark.slow
def test_counted_sharded_state_is_the_memory_models_state_terms(run):
    """Weights, gradients and AdamW moments each process holds after an accumulated step, counted from
    the storages of its real shards, against balagg.train.memory's terms for the tiny model's shape."""
    root, result = run
    state = result["sync"]["state"]
    assert state["parameters"] == tiny_shape(root).parameters  # the shape's count is the model's
    assert state["dtypes"] == ["torch.float32"]
    predicted = {term.name: term.bytes for term in memory_of(root, sync_each_batch=True).persistent}
    for counted, name in ((state["weights"], "weights (fp32, sharded)"),
                          (state["gradients"], "gradients (fp32, sharded)"),
                          (state["moments"], "AdamW moments (2 x fp32, sharded)")):
        assert counted == pytest.approx(predicted[name], rel=0.03), name
