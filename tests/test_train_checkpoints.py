"""Evaluation checkpoints: written from the gathered weights in the training's compute dtype, tied weights
once, no step-0 copy (step 0 is the initial model, evaluated from its own folder), and never an empty folder.
Resumable state of the FSDP2 config: sharded (tests/test_fsdp2_checkpoints.py runs it on 2 CPU processes).
The collective timeout: test_train_config.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from balagg.train.callbacks import CellCallback
from balagg.train.files import CellDir

REPO = Path(__file__).resolve().parents[1]


class StubAccelerator:
    """What the callback asks of accelerate: the gathered state dict (``get_state_dict``) and barriers."""

    def __init__(self, state_dict):
        self.state_dict = state_dict
        self.collectives = []

    def get_state_dict(self, model):
        self.collectives.append("get_state_dict")
        return self.state_dict

    def unwrap_model(self, model):
        return model

    def wait_for_everyone(self):
        self.collectives.append("wait_for_everyone")


def stub_trainer(model, tokenizer, state_dict, *, bf16: bool, save_model):
    return SimpleNamespace(accelerator=StubAccelerator(state_dict), model=model, processing_class=tokenizer,
                           args=SimpleNamespace(bf16=bf16, fp16=False), is_world_process_zero=lambda: True,
                           save_model=save_model)


@pytest.fixture(scope="module")
def tiny():
    from balagg.tinyworld.model import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    return build_model("tiny-s", tokenizer, seed=0), tokenizer


def trainer_save_model(model, tokenizer):
    """Trainer.save_model of a run without FSDP: the model's weights as they are, and the tokenizer."""
    def save(output_dir):
        model.save_pretrained(output_dir)
        tokenizer.save_pretrained(output_dir)
    return save


def callback_for(tmp_path, trainer) -> CellCallback:
    callback = CellCallback(CellDir(tmp_path / "train"), [0, 2, 4], mini_batches=1, tracker=None)
    callback.trainer = trainer
    return callback


def test_a_save_that_writes_nothing_fails_naming_the_folder(tmp_path, tiny):
    """Trainer.save_model under FSDP's SHARDED_STATE_DICT writes no weights, and a rank can gather an empty
    state dict: neither may leave an evaluation checkpoint behind."""
    model, tokenizer = tiny
    writes_nothing = lambda output_dir: Path(output_dir).mkdir(parents=True)  # noqa: E731
    callback = callback_for(tmp_path, stub_trainer(model, tokenizer, {}, bf16=False, save_model=writes_nothing))
    with pytest.raises(ValueError) as caught:
        callback.save_eval_checkpoint(4)
    message = str(caught.value)
    assert "step-000004" in message and "\n" not in message
    assert not callback.cell_dir.checkpoint(4).exists()


@pytest.mark.parametrize("main", [True, False])
def test_every_rank_makes_the_same_collectives_whether_or_not_the_checkpoint_exists(tmp_path, tiny, main):
    """A rank slower than the main process may find the checkpoint already renamed into place: it must
    still take part in the gather and the barrier the main process is in, or the two ranks' next
    collectives pair up wrongly and the job hangs. Only the main process writes, and only once."""
    model, tokenizer = tiny
    done = []
    for exists in (False, True):
        trainer = stub_trainer(model, tokenizer, model.state_dict(), bf16=False,
                               save_model=trainer_save_model(model, tokenizer))
        trainer.is_world_process_zero = lambda: main
        callback = callback_for(tmp_path / str(exists), trainer)
        if exists:
            callback.cell_dir.checkpoint(4).mkdir(parents=True)
        callback.save_eval_checkpoint(4)
        done.append(trainer.accelerator.collectives)
        written = (callback.cell_dir.checkpoint(4) / "model.safetensors").exists()
        assert written == (main and not exists)
    assert done == [["get_state_dict", "wait_for_everyone"]] * 2


def test_a_folder_without_weights_is_refused_naming_it(tmp_path, tiny):
    from balagg.train.eval_checkpoints import check_eval_checkpoint

    model, _ = tiny
    folder = tmp_path / "step-000002"
    model.config.save_pretrained(folder)  # a config, no weights
    with pytest.raises(ValueError, match=f"evaluation checkpoint {folder} holds no weights: no \\*.safetensors"):
        check_eval_checkpoint(folder)


@pytest.mark.parametrize("bf16", [True, False])
def test_eval_checkpoint_is_in_the_training_precision_with_tied_weights_once(tmp_path, tiny, bf16):
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    model, tokenizer = tiny
    assert model.config.tie_word_embeddings
    trainer = stub_trainer(model, tokenizer, model.state_dict(), bf16=bf16,
                           save_model=trainer_save_model(model, tokenizer))
    callback = callback_for(tmp_path, trainer)
    callback.save_eval_checkpoint(2)
    folder = callback.cell_dir.checkpoint(2)
    dtype = torch.bfloat16 if bf16 else torch.float32
    assert json.loads((folder / "config.json").read_text())["dtype"] == str(dtype).removeprefix("torch.")
    with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
        keys = list(handle.keys())
        assert {handle.get_tensor(key).dtype for key in keys} == {dtype}
    assert "lm_head.weight" not in keys  # tied to the embedding: written once
    loaded = AutoModelForCausalLM.from_pretrained(folder, dtype="auto")
    assert next(loaded.parameters()).dtype == dtype
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value.to(dtype)), name
    assert (folder / "tokenizer_config.json").is_file()
    assert not list(folder.parent.glob(".*.tmp"))


@pytest.mark.slow
def test_training_saves_no_step_0_copy_and_bf16_eval_checkpoints(tmp_path):
    """A bf16 cell trained for 2 steps on the CPU: the evaluation checkpoint is the resumable state's fp32
    master weights in bf16; step 0, the initial model, gets no copy."""
    from safetensors.torch import load_file

    from tiny_cell import addition_rows, write_cell_inputs

    cell = {**write_cell_inputs(tmp_path, addition_rows()), "seed": 3, "learning_rate": 1e-3, "warmup_steps": 0,
            "num_generations": 4, "prompts_per_step": 2, "mini_batches": 1, "micro_batch_size": 4, "max_prompt_length": 64, "max_completion_length": 16,
            "overlong_buffer_len": 4, "total_steps": 2, "save_every": 2, "eval_every": 2, "bf16": True,
            "verifier_workers": 1, "keep_resumable_state": True}  # its fp32 masters are compared below
    (tmp_path / "cell.json").write_text(json.dumps(cell))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "balagg", "train", "--cell", str(tmp_path / "cell.json"),
                             "--workdir", str(tmp_path / "train"), "--out", str(tmp_path / "manifest.json")],
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [c["step"] for c in manifest["checkpoints"]] == [2]
    assert not (tmp_path / "train" / "checkpoints" / "step-000000").exists()
    saved = load_file(str(tmp_path / "train" / "checkpoints" / "step-000002" / "model.safetensors"))
    master = load_file(str(tmp_path / "train" / "state" / "checkpoint-2" / "model.safetensors"))
    assert {value.dtype for value in master.values()} == {torch.float32}
    assert saved.keys() == master.keys()
    for name, value in master.items():
        assert saved[name].dtype == torch.bfloat16 and torch.equal(saved[name], value.to(torch.bfloat16)), name
