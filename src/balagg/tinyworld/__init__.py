"""The tiny world: a character-level tokenizer, random-init tiny Qwen2 models, synthetic datasets and
benchmarks in the real datasets' raw schemas, and a supervised warm start, so that the whole paper
pipeline runs on a laptop CPU with no download.

Submodules import torch/transformers lazily where they can; ``balagg.tinyworld.model`` needs them.
"""

from __future__ import annotations

__all__ = ["ALPHABET", "PROMPT_TEMPLATE", "SIZES", "build_tokenizer", "build_model", "load_checkpoint", "save_checkpoint"]


def __getattr__(name: str):  # lazy: keep ``import balagg.tinyworld`` free of torch
    if name in __all__:
        from balagg.tinyworld import model

        return getattr(model, name)
    raise AttributeError(name)
