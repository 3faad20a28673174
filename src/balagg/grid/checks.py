"""What the workflow checks of a campaign before any job runs, each problem one line (a ValueError): the
external checkpoints resolved to their steps, and prompt + completion lengths within each model's context."""

from __future__ import annotations

import os
import sys
from functools import cache

from balagg import external_checkpoints as externals
from balagg.context import check_model_lengths
from balagg.grid.grid import Grid
from balagg.grid.targets import external_run
from balagg.layout import MERGED_DIR, step_dirname
from balagg.tinyworld.model import context_config
from balagg.train.config import CellConfig


def merged_dir(grid: Grid, name: str, step: int) -> str:
    """Where a verl checkpoint's step is merged into a Hugging Face folder."""
    return os.path.join(external_run(grid, name), MERGED_DIR, step_dirname(step))


def resolve_externals(grid: Grid, hub_cache: str | os.PathLike, offline: bool,
                      verl_in_jobs: bool) -> dict[str, externals.External]:
    """Every external checkpoint resolved to its steps (balagg.external_checkpoints) and checked: its path, a verl
    checkpoint where the jobs cannot import verl (``verl_in_jobs``; the message gives the merge command to
    run by hand), a context too short for prompt + eval budget. Each problem names the config file that
    holds the checkpoint."""
    prompt = (grid.config.get("train") or {}).get("max_prompt_length", CellConfig.max_prompt_length)
    found = {}
    for name, spec in grid.checkpoints.items():
        try:
            external = externals.resolve(name, spec, hub_cache, offline, lambda step: merged_dir(grid, name, step))
            if external.verl and not verl_in_jobs:
                step, actor = next(iter(external.verl.items()))
                raise ValueError(f"checkpoints.{name}: {actor} is a verl checkpoint and verl is not installed where "
                                 "the jobs run; "
                                 f"merge it with verl's own merger and set path to the merged folder: "
                                 f"{externals.verl_merge_command(actor, merged_dir(grid, name, step))}")
            source = externals.context_source(external)
            if source is None:  # a hub id: its snapshot at the revision, once fetched
                source = externals.hub_snapshot(hub_cache, external.source, external.revision)
            if source is not None:
                check_model_lengths(f"checkpoints.{name}", source, spec.get("max_position_embeddings"),
                                    {"evaluation": (prompt, grid.config["eval"]["max_tokens"])})
        except ValueError as error:
            raise ValueError(f"config {grid.campaign.file_of('checkpoints', name)}: {error}") from None
        found[name] = external
    return found


@cache
def check_context(grid: Grid, model: str):
    """Prompt + completion (training) and prompt + eval budget fit the model's effective context: checked
    when its config.json is local or in the HF cache, or for a model the workflow builds, against the
    config it will write (ValueError if not); otherwise (a hub model not fetched yet) the train job checks
    at start (balagg.context) and this says so on stderr, once per grid and model. The effective context,
    or None."""
    settings, spec = grid.full_train_settings(model), grid.models[model]
    prompt = settings["max_prompt_length"]
    lengths = {"training": (prompt, settings["max_completion_length"]),
               "evaluation": (prompt, grid.config["eval"]["max_tokens"])}
    source = grid.model_source(model)
    planned = context_config(grid.tinyworld_size(model)) if grid.builds_model(model) else None
    context = check_model_lengths(model, source, spec.get("max_position_embeddings"), lengths, planned=planned)
    if context is None:
        print(f"balagg: model {model}: no config.json of {source} yet (not fetched); "
              "the context check runs in the train job at start", file=sys.stderr)
    return context

