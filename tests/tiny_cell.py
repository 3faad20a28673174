"""Test-only training cell: the tiny world's tiny-s (random weights) and addition prompts written beside
it, and the cell-config keys every training test shares; each test adds or overrides its own sizes."""

from __future__ import annotations

import json
from pathlib import Path


def addition_rows(a_values: int = 3, b_values: int = 3) -> list[dict]:
    """``a+b`` problems for a < a_values, b < b_values, with their sums as golds."""
    return [{"id": f"add-{a}-{b}", "problem": f"{a}+{b}", "answer": str(a + b), "source": "test"}
            for a in range(a_values) for b in range(b_values)]


def write_cell_inputs(root: Path, rows: list[dict]) -> dict:
    """Save tiny-s and its tokenizer to ``root/model`` and ``rows`` to ``root/train.jsonl``; return the
    cell-config keys naming them, with the prompt and answer format the tests train on."""
    from balagg.tinyworld.model import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    build_model("tiny-s", tokenizer, seed=0).save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    (root / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return {"model": str(root / "model"), "train_files": [str(root / "train.jsonl")], "aggregator": "balanced-agg",
            "prompt_template": "{problem}=", "answer_format": "boxed"}
