"""Training prompts from the normalised training-set JSONL (docs/files.md):

    {"id": "dapo-00042", "problem": "...", "answer": "34", "source": "dapo-math-17k"}

Each row becomes a TRL prompt -- ``prompt_template`` rendered by ``balagg.prompts.render_prompt(template,
problem=...)``, as one user message when the cell uses the chat template, else as plain text, wrapped by
:mod:`balagg.prompts` exactly as the evaluation renders it -- with its gold answer(s) in the ``answer``
column (a list of strings, the form the verifier accepts for several golds). Prompts longer than
``max_prompt_length`` tokens are counted and skipped (as verl's ``filter_overlong_prompts``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from balagg.io import read_jsonl
from balagg.prompts import prompt_ids, render_prompt, trl_prompt

log = logging.getLogger("balagg.train")


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The training rows with their golds as a list of strings; a bad line raises ValueError naming it."""
    if not Path(path).is_file():
        raise ValueError(f"training file {path} does not exist")
    rows = []
    for number, row in enumerate(read_jsonl(path), 1):
        where = f"{path}: row {number} (id {row.get('id')!r})"
        for key in ("id", "problem", "answer"):
            if key not in row:
                raise ValueError(f"{where}: missing key {key!r}")
        if not isinstance(row["problem"], str) or not row["problem"].strip():
            raise ValueError(f"{where}: 'problem' must be a non-empty string")
        answer = row["answer"]
        golds = answer if isinstance(answer, list) else [answer]
        if not golds or not all(isinstance(g, (str, int, float)) and not isinstance(g, bool) for g in golds):
            raise ValueError(f"{where}: 'answer' must be a string or a non-empty list of strings")
        rows.append({"id": str(row["id"]), "problem": row["problem"], "answer": [str(g) for g in golds]})
    return rows


def build_prompts(cell, tokenizer):
    """A ``datasets.Dataset`` with columns id, prompt, answer for ``cell``."""
    from datasets import Dataset

    records, skipped = [], 0
    fmt = cell.prompt_format()
    for path in cell.train_files:
        for row in read_rows(path):
            text = render_prompt(cell.prompt_template, problem=row["problem"])
            if len(prompt_ids(tokenizer, text, fmt)) > cell.max_prompt_length:
                skipped += 1
                continue
            records.append({"id": row["id"], "prompt": trl_prompt(text, fmt), "answer": row["answer"]})
    if skipped:
        log.warning("skipped %d prompts longer than max_prompt_length=%d tokens", skipped, cell.max_prompt_length)
    if len(records) < cell.prompts_per_step:
        raise ValueError(
            f"only {len(records)} usable prompts in {cell.train_files} (after skipping {skipped} over-long ones); "
            f"a step needs prompts_per_step={cell.prompts_per_step}"
        )
    return Dataset.from_list(records)
