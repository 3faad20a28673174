"""Helpers shared by all workflow stages: the grid, per-cell configs, paths and resources.

Everything the DAG needs is derived from the validated config, so `snakemake -n` shows every job of
the grid (every checkpoint step) up front.
"""

import hashlib
import json
import os
from itertools import product
from pathlib import Path

CAMPAIGN = config["campaign"]
RESULTS = f"results/{CAMPAIGN}"
CELL = os.path.join(RESULTS, "{model}", "{dataset}", "{aggregator}", "seed{seed}")
# What an evaluation belongs to: a cell ("{dataset}/{aggregator}/seed{seed}") or the initial model.
EVAL_RUN = os.path.join(RESULTS, "{model}", "{run}")
INITIAL = "initial"
BENCHMARKS = list(config["benchmarks"])
TINYWORLD = "tinyworld"
RESOURCE_DEFAULTS = {"gpus": 0, "cpus": 1, "mem_mb": 4000, "runtime": 60}


def grid():
    """Every cell of the grid as a dict of wildcard values."""
    return [
        dict(model=m, dataset=d, aggregator=a, seed=s)
        for m, d, a, s in product(config["models"], config["datasets"], config["aggregators"], config["seeds"])
    ]


def cell_paths(pattern):
    """`pattern` (relative to a cell folder) for every cell of the grid."""
    return [os.path.join(CELL, pattern).format(**cell) for cell in grid()]


def train_settings(model):
    """The train section with the model's own overrides applied."""
    return {**config["train"], **config["models"][model].get("train", {})}


def checkpoint_steps(model):
    """Optimiser steps with a weights-only checkpoint: 0, every eval_every, and the last step."""
    settings = train_settings(model)
    total, every = settings["total_steps"], settings["eval_every"]
    return sorted(set(range(0, total + 1, every)) | {total})


def step_tag(step):
    return f"{int(step):06d}"


def cell_step_summaries(wildcards):
    """Every checkpoint's summary.json of one cell; step 0's is the initial model's, shared by all cells."""
    cell = CELL.format(**wildcards)
    initial = EVAL_RUN.format(model=wildcards.model, run=INITIAL)
    return [
        f"{initial if step == 0 else cell}/eval/step-{step_tag(step)}/summary.json"
        for step in checkpoint_steps(wildcards.model)
    ]


def generate_weights_inputs(wildcards):
    """The initial model's files (step 0) or the cell's manifest (its checkpoints)."""
    if wildcards.run == INITIAL:
        return model_inputs(wildcards)
    return [f"{EVAL_RUN.format(**wildcards)}/manifest.json"]


def checkpoint_path(wildcards):
    if wildcards.run == INITIAL:
        if int(wildcards.step) != 0:
            raise ValueError(f"the initial model has only step 0, not {wildcards.step}")
        return model_source(wildcards.model)
    return f"{EVAL_RUN.format(**wildcards)}/train/checkpoints/step-{wildcards.step}"


def tracking_uri():
    """The configured MLflow URI, or the campaign's SQLite file (absolute, so every job agrees)."""
    if config.get("tracking_uri"):
        return config["tracking_uri"]
    return "sqlite:///" + str(Path(RESULTS, "mlflow.db").resolve())


def model_source(model):
    """Hub id or folder of the initial policy; tiny-world models are built under results/."""
    spec = config["models"][model]
    return f"{RESULTS}/models/{model}" if spec["path"] == TINYWORLD else spec["path"]


def model_inputs(wildcards):
    """What a cell's training waits for besides its data: the tiny model when it is built here."""
    if config["models"][wildcards.model]["path"] == TINYWORLD:
        return [f"{RESULTS}/models/{wildcards.model}/card.json"]
    return []


def data_source(kind, name):
    return config["datasets"][name]["source"] if kind == "train" else config["benchmarks"][name]


def data_inputs(wildcards):
    """The raw tiny-world folder when the source is built here; nothing for hub ids and local mirrors."""
    if data_source(wildcards.kind, wildcards.name) == TINYWORLD:
        return [f"{RESULTS}/tinyworld/raw/manifest.json"]
    return []


def data_source_arg(wildcards):
    source = data_source(wildcards.kind, wildcards.name)
    return f"{RESULTS}/tinyworld/raw" if source == TINYWORLD else source


def data_loader(wildcards):
    return config["datasets"][wildcards.name]["loader"] if wildcards.kind == "train" else wildcards.name


def data_limit(wildcards):
    """Cap on problems per file (0 = all)."""
    return config["data"][f"max_{wildcards.kind}_problems"] or 0


def tinyworld_size(wildcards):
    return config["models"][wildcards.model].get("tinyworld_size", wildcards.model)


def chat_template_flag(wildcards):
    return "--chat-template" if config["models"][wildcards.model].get("chat_template") else ""


def cell_config(wildcards):
    """The resolved per-cell training config that `python -m balagg train --cell` reads."""
    model = wildcards.model
    cell = {
        "campaign": CAMPAIGN,
        "model": model,
        "dataset": wildcards.dataset,
        "aggregator": wildcards.aggregator,
        "seed": int(wildcards.seed),
        "model_path": model_source(model),
        "chat_template": config["models"][model].get("chat_template", False),
        "train_file": f"{RESULTS}/data/train/{wildcards.dataset}.jsonl",
        "checkpoint_steps": checkpoint_steps(model),
        "tracking_uri": tracking_uri(),
        "experiment": CAMPAIGN,
        **train_settings(model),
    }
    cell["config_hash"] = hashlib.sha256(json.dumps(cell, sort_keys=True).encode()).hexdigest()[:16]
    return cell


def output_dir(wildcards, output):
    """The folder of a rule's first output (commands that write several files there take it)."""
    return os.path.dirname(output[0])


def bench_dir(wildcards, input):
    return os.path.dirname(input.benchmarks[0])


def raw_dir(wildcards, input):
    return os.path.dirname(input.raw)


def generation_args():
    """Sampling settings of the eval section as command-line flags."""
    e = config["eval"]
    return (f"--n {e['n']} --temperature {e['temperature']} --top-p {e['top_p']} --max-tokens {e['max_tokens']}"
            f" --seed {e['seed']} --batch-size {e['batch_size']}")


def write_json(path, data):
    """Atomic JSON write (temp file in the same folder, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def model_resource(rule_key, key):
    """Resource `key` of `rule_key` (train_resources / generate_resources) for the job's model."""

    def lookup(wildcards):
        return config["models"][wildcards.model].get(rule_key, {}).get(key, RESOURCE_DEFAULTS[key])

    return lookup


def train_launcher(wildcards):
    """`python` on one device; `accelerate launch` with the cell's GPU count on several."""
    gpus = config["models"][wildcards.model].get("train_resources", {}).get("gpus", 0)
    if gpus <= 1:
        return "python"
    accelerate_config = train_settings(wildcards.model).get("accelerate_config")
    config_arg = f"--config_file {accelerate_config} " if accelerate_config else ""
    return f"accelerate launch {config_arg}--num_processes {gpus}"
