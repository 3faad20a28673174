"""The command-line arguments that a campaign's evaluation jobs take from the config."""

from __future__ import annotations

import shlex

from balagg.grid.campaign import CELL_MODEL_KEYS

PROMPT_KEYS = ("math_template", "code_template", *CELL_MODEL_KEYS)
"""Model keys that shape the evaluation's prompts and context exactly as the training's (the cell config)."""


def prompt_args(spec: dict) -> str:
    """How evaluation prompts are built for a model (its config entry ``spec``): chat template or plain, its
    templates, the answer format the template asks for, the chat template's enable_thinking and the
    context override."""
    args = ["--prompt-style", "chat" if spec.get("chat_template") else "plain"]
    for key in PROMPT_KEYS:
        if key in spec:
            value = spec[key]
            args += [f"--{key.replace('_', '-')}", str(value).lower() if isinstance(value, bool) else str(value)]
    return " ".join(shlex.quote(arg) for arg in args)


def generation_args(evaluation: dict) -> str:
    """Sampling settings of the eval section as command-line flags."""
    e = evaluation
    return (f"--n {e['n']} --temperature {e['temperature']} --top-p {e['top_p']} --max-tokens {e['max_tokens']}"
            f" --seed {e['seed']} --batch-size {e['batch_size']}")


def data_selector(kind: str, name: str, loader: str) -> str:
    """What ``python -m balagg prepare-data`` prepares: ``--dataset LOADER`` (a training set) or ``--benchmark``."""
    return f"--dataset {loader}" if kind == "train" else f"--benchmark {name}"


def tinyworld_regime_arg(spec: dict) -> str:
    """``--regime NAME`` for a tiny model with a laboratory length regime (docs/laboratory.md), else nothing."""
    regime = spec.get("tinyworld_regime")
    return f"--regime {regime}" if regime else ""
