"""Weights-only evaluation checkpoints (``train/checkpoints/step-N``, docs/files.md): what ``balagg generate``
loads with ``from_pretrained`` or vLLM.

:func:`write_eval_checkpoint` saves, on the main process, the full state dict that every process helped
gather (accelerate's ``get_state_dict``: under FSDP2 the shards are gathered onto rank 0's CPU; under DDP or
one process it is the model's own), cast to the training's compute dtype (:func:`compute_dtype`: bf16 for a
bf16 cell, the precision its forward passes and its vLLM rollouts ran in; the fp32 master weights stay in
the resumable state), with the model's config (``dtype`` = the saved dtype, so an evaluation with dtype
``auto`` loads what was saved), generation config and tokenizer. Tied weights are written once.

:func:`check_eval_checkpoint` is the guard: a folder counts as an evaluation checkpoint only if it holds a
config and at least one weight tensor. A save that wrote nothing (e.g. ``Trainer.save_model`` under FSDP's
``SHARDED_STATE_DICT``, which writes no weights, or an empty gathered state dict) is a ValueError naming the
folder, instead of an empty checkpoint that the evaluation would fail on much later.

Bytes on disk: ``bytes(dtype) x P`` for P parameters (tied embeddings once), plus the tokenizer and the
configs (about 10 MB for Qwen's tokenizers).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

CONFIG_FILE = "config.json"
WEIGHTS_SUFFIX = ".safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"


def compute_dtype(args) -> Any:
    """The dtype the training computes in, from its ``TrainingArguments``: bf16, fp16 or fp32."""
    import torch

    if getattr(args, "bf16", False):
        return torch.bfloat16
    if getattr(args, "fp16", False):
        return torch.float16
    return torch.float32


def _without_tied_copies(model, state_dict: dict[str, Any]) -> dict[str, Any]:
    """``state_dict`` less the keys that the model ties to another key also present (transformers'
    ``all_tied_weights_keys``: {tied key: source key}); a gathered or cast state dict no longer shares their
    storage, so ``save_pretrained`` would write both."""
    tied = getattr(model, "all_tied_weights_keys", None) or {}
    drop = {target for target, source in tied.items() if target in state_dict and source in state_dict}
    return {key: value for key, value in state_dict.items() if key not in drop}


def write_eval_checkpoint(model, state_dict: dict[str, Any], tokenizer, folder: str | Path, dtype) -> None:
    """Save ``state_dict`` (the full weights of ``model``, a transformers ``PreTrainedModel``, possibly
    FSDP-wrapped) in ``dtype`` with the model's config, generation config and ``tokenizer`` into ``folder``,
    then :func:`check_eval_checkpoint` it. Main process only."""
    folder = Path(folder)
    if not state_dict:
        raise ValueError(f"evaluation checkpoint {folder}: the gathered state dict is empty, nothing to save "
                         "(was it gathered on another process?)")
    weights = {key: value.to(dtype) if value.is_floating_point() else value
               for key, value in _without_tied_copies(model, state_dict).items()}
    model.save_pretrained(folder, state_dict=weights)
    config = copy.deepcopy(model.config)
    config.dtype = dtype  # save_pretrained records the live parameters' dtype (fp32 masters)
    config.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    check_eval_checkpoint(folder)


def check_eval_checkpoint(folder: str | Path) -> int:
    """The number of weight tensors in the evaluation checkpoint ``folder``; a ValueError (one line naming
    the folder) when it has no config, no safetensors weights, a shard its index lists is missing, or no
    tensor at all."""
    from safetensors import safe_open

    folder = Path(folder)
    problem = None
    files = sorted(folder.glob("*" + WEIGHTS_SUFFIX)) if folder.is_dir() else []
    if not folder.is_dir():
        problem = "the folder does not exist"
    elif not (folder / CONFIG_FILE).is_file():
        problem = f"no {CONFIG_FILE}"
    elif not files:
        problem = f"no *{WEIGHTS_SUFFIX} weights file"
    elif (folder / WEIGHTS_INDEX).is_file():
        listed = set(json.loads((folder / WEIGHTS_INDEX).read_text()).get("weight_map", {}).values())
        missing = sorted(name for name in listed if not (folder / name).is_file())
        if missing:
            problem = f"shards {missing} listed in {WEIGHTS_INDEX} are missing"
    tensors = 0
    if problem is None:
        for path in files:
            with safe_open(str(path), framework="pt") as handle:
                tensors += len(list(handle.keys()))
        if tensors == 0:
            problem = f"its {WEIGHTS_SUFFIX} files hold no tensor"
    if problem is not None:
        raise ValueError(f"evaluation checkpoint {folder} holds no weights: {problem}; the save wrote nothing "
                         "the evaluation could load")
    return tensors
