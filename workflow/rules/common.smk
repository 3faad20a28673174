"""The campaign config loaded (balagg.campaign) and its grid (balagg.grid) turned into what the rules need:
path patterns, input functions that look a job's wildcards up in the grid, and the checks that stop the
workflow before any job runs. `snakemake -n` shows every job of the grid (every checkpoint step) up front.
"""

import importlib.util
import json
import os
import re
import sys
from functools import cache
from pathlib import Path

from snakemake_interface_common.exceptions import WorkflowError
from snakemake_interface_executor_plugins.settings import DeploymentMethod

# the workflow imports this checkout's balagg too, as its jobs do (job_environment below)
sys.path.insert(0, str(Path(workflow.basedir, "src")))

from balagg import campaign as campaigns
from balagg import external_checkpoints as externals, layout, prompts
from balagg.grid import Cell, DataFile, Grid
from balagg.grid import arguments, checks, environment, targets
from balagg.hub import is_hub_id
from balagg.io import write_json
from balagg.train.launch import check_accelerate_config, conda_env_packages

# The config as Snakemake merged it (its files, then --config), loaded as everything else loads a campaign:
# validated, every default filled in, rule names canonical; a problem is one line naming the file that
# holds the key. The rules read the completed mapping as `config`, the typed campaign as GRID.campaign.
try:
    GRID = Grid(campaigns.resolve(config, [
        *((str(path), campaigns.read_yaml(path)) for path in workflow.overwrite_configfiles or workflow.configfiles),
        *([("--config", dict(workflow.config_settings.config))] if workflow.config_settings.config else []),
    ]))
except ValueError as error:
    raise WorkflowError(str(error)) from None
config.update(GRID.config)
CAMPAIGN = GRID.name
RESULTS = GRID.results
CELL = os.path.join(RESULTS, layout.CELL_PATTERN)
# What an evaluation belongs to: a cell ("{dataset}/{aggregator}/seed{seed}") or the initial model.
EVAL_RUN = os.path.join(RESULTS, "{model}", "{run}")
EVAL_STEP = os.path.join(EVAL_RUN, layout.eval_step_relpath("{step}"))
INITIAL = layout.INITIAL_RUN
# An external checkpoint's evaluation (config `checkpoints:`): results/{campaign}/{name}/external/.
EXTERNAL = layout.EXTERNAL_RUN
CURVE = targets.CURVE  # relative to a cell folder
CELL_RUN_PATTERN = layout.pattern_regex(layout.CELL_PATTERN.removeprefix("{model}/"), named=False)  # dataset/rule/seedN
RUN_PATTERN = rf"{INITIAL}|{EXTERNAL}|{CELL_RUN_PATTERN}"
CURVE_RUNS = rf"{EXTERNAL}|{CELL_RUN_PATTERN}"  # what has a curve: a cell, an external checkpoint
BENCHMARKS = GRID.benchmarks
FETCH = f"{RESULTS}/fetch.json"
GPU_ENV = Path(workflow.basedir, "envs", "gpu.yaml")
USES_HUB = environment.uses_hub(config)
# the submit host's own setting, for the fetch rule (every other job runs with HF_HUB_OFFLINE=1)
os.environ.setdefault("BALAGG_FETCH_OFFLINE", os.environ.get("HF_HUB_OFFLINE", "0"))
shell.prefix(environment.job_environment(config, Path(workflow.basedir, "src")))


def in_conda():
    """Whether jobs run in the workflow's conda envs (--sdm conda) rather than in this interpreter's."""
    return DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method


def fetch_inputs(source):
    """fetch.json for a hub source (its snapshot is then in the shared cache), nothing otherwise. Only its
    existence counts (ancient): a fetch rerun for a newly added model must not retrain every cell."""
    return [ancient(FETCH)] if is_hub_id(source) else []


@cache
def train_env_check(accelerate_config):
    """Refuse at DAG build an accelerate config whose backend package the train jobs cannot import:
    envs/gpu.yaml under --sdm conda, else this interpreter (jobs inherit its environment)."""
    if in_conda():
        packages = conda_env_packages(GPU_ENV)
        check_accelerate_config(accelerate_config, lambda p: p.replace("_", "-") in packages, str(GPU_ENV))
    else:
        check_accelerate_config(accelerate_config, lambda p: importlib.util.find_spec(p) is not None, sys.executable)


def cell_config(wildcards):
    """The cell's resolved training config (Grid.cell_config); a bad combination, a length past the model's
    context or an accelerate config the jobs cannot run stops the workflow before any job runs."""
    resolved = GRID.cell_config(Cell.of(wildcards))
    checks.check_context(GRID, wildcards.model)
    if resolved.get("accelerate_config"):
        train_env_check(resolved["accelerate_config"])
    return resolved


def write_external_record(wildcards, params, input, output):
    """An external checkpoint's checkpoint.json (balagg.external_checkpoints.record), with fetch.json's commit."""
    fetch = json.loads(Path(input.fetch[0]).read_text()) if input.fetch else None
    write_json(output[0], externals.record(EXTERNALS[wildcards.model], params.settings, fetch, CAMPAIGN,
                                           GRID.tracking_uri()))


def model_resource(rule_key, key):
    """Resource `key` of `rule_key` (train_resources / generate_resources) for the job's model."""
    return lambda wildcards: GRID.resource(wildcards.model, rule_key, key)


def cell_step_summaries(wildcards):
    """Every checkpoint's summary.json of one cell; step 0's is the initial model's, shared by all cells.
    An external checkpoint's run: the summary of each of its steps."""
    run = EVAL_RUN.format(**wildcards)
    initial = EVAL_RUN.format(model=wildcards.model, run=INITIAL)
    if wildcards.run == EXTERNAL:
        steps = [(run, step) for step in EXTERNALS[wildcards.model].steps]
    else:
        steps = [(initial if step == 0 else run, step) for step in GRID.checkpoint_steps(wildcards.model)]
    return [os.path.join(folder, layout.eval_step_relpath(step, layout.SUMMARY_FILE)) for folder, step in steps]


def generate_weights_inputs(wildcards):
    """The initial model's files (step 0), the cell's manifest (its checkpoints), or for an external
    checkpoint fetch.json (a hub id) or its merged folder (a verl checkpoint)."""
    if wildcards.run == INITIAL:
        return model_inputs(wildcards)
    if wildcards.run == EXTERNAL:
        external, step = EXTERNALS[wildcards.model], int(wildcards.step)
        if external.kind == "hub":
            return [ancient(FETCH)]
        return [os.path.join(external.steps[step], "config.json")] if step in external.verl else []
    return [os.path.join(EVAL_RUN.format(**wildcards), layout.CELL_MANIFEST_FILE)]


def checkpoint_path(wildcards):
    """The weights a generate job loads: the initial model, an external checkpoint's step, a cell's step."""
    step = int(wildcards.step)
    if wildcards.run == INITIAL:
        if step != 0:
            raise ValueError(f"the initial model has only step 0, not {wildcards.step}")
        return GRID.model_source(wildcards.model)
    if wildcards.run == EXTERNAL:
        steps = EXTERNALS[wildcards.model].steps
        if step not in steps:
            raise ValueError(f"checkpoints.{wildcards.model} has no step {step}; it has {sorted(steps)}")
        return steps[step]
    return os.path.join(EVAL_RUN.format(**wildcards), layout.checkpoint_relpath(wildcards.step))



def model_benchmarks(wildcards):
    """The model's prepared benchmark files, in the config's order (evaluation's inputs)."""
    return [GRID.data_path(wildcards.model, "bench", name) for name in BENCHMARKS]


def model_inputs(wildcards):
    """What a cell's training waits for besides its data: the tiny model when it is built here, the
    fetched snapshot for a hub id."""
    if GRID.builds_model(wildcards.model):
        return [os.path.join(GRID.model_source(wildcards.model), layout.MODEL_CARD_FILE)]
    return fetch_inputs(GRID.models[wildcards.model]["path"])


def prepare_job(wildcards):
    """The file a prepare_data job makes: a tiny-world one in its `family` folder's family (else the default)."""
    tiny = GRID.data_source(wildcards.kind, wildcards.name) == layout.TINYWORLD_SOURCE
    return DataFile(wildcards.kind, wildcards.name,
                    wildcards.get("family", layout.TINYWORLD_DEFAULT_FAMILY) if tiny else None)


def data_inputs(wildcards):
    """The family's raw tiny-world files when the source is built here, fetch.json for hub ids, nothing for
    local mirrors."""
    data = prepare_job(wildcards)
    return [GRID.raw_manifest(data.family)] if data.family else fetch_inputs(GRID.data_source(data.kind, data.name))


def output_dir(wildcards, output):
    """The folder of a rule's first output (commands that write several files there take it)."""
    return os.path.dirname(output[0])


def bench_dir(wildcards, input):
    return os.path.dirname(input.benchmarks[0])


if error := GRID.benchmark_folder_error():
    raise WorkflowError(error)
try:
    EXTERNALS = checks.resolve_externals(
        GRID, Path(environment.hf_home(config), "hub"),
        offline=os.environ.get("BALAGG_FETCH_OFFLINE", "0") not in ("", "0"),
        # merge_verl jobs run in envs/verl.yaml under --sdm conda, else in this interpreter's environment
        verl_in_jobs=in_conda() or importlib.util.find_spec("verl") is not None)
except ValueError as error:
    raise WorkflowError(str(error)) from None
