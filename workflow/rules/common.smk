"""Helpers shared by all workflow stages: the grid, per-cell configs, paths and resources.

Everything the DAG needs is derived from the validated config, so `snakemake -n` shows every job of
the grid (every checkpoint step) up front.
"""

import importlib.util
import os
import re
import shlex
import sys
from functools import cache, lru_cache
from itertools import product
from pathlib import Path

from snakemake_interface_common.exceptions import WorkflowError
from snakemake_interface_executor_plugins.settings import DeploymentMethod

# the workflow imports this checkout's balagg too, as its jobs do (job_environment below)
sys.path.insert(0, str(Path(workflow.basedir, "src")))

from balagg import checkpoints as externals, layout, prompts
from balagg.context import check_model_lengths
from balagg.hub import is_hub_id
from balagg.io import write_json
from balagg.train.config import CellConfig
from balagg.train.launch import check_accelerate_config, conda_env_packages

CAMPAIGN = config["campaign"]
config.setdefault("checkpoints", {})  # the schema's default, also where a Snakefile includes this unvalidated
RESULTS = layout.campaign_dir(CAMPAIGN)
CELL = os.path.join(RESULTS, layout.CELL_PATTERN)
# What an evaluation belongs to: a cell ("{dataset}/{aggregator}/seed{seed}") or the initial model.
EVAL_RUN = os.path.join(RESULTS, "{model}", "{run}")
EVAL_STEP = os.path.join(EVAL_RUN, layout.eval_step_relpath("{step}"))
INITIAL = layout.INITIAL_RUN
# An external checkpoint's evaluation (config `checkpoints:`): results/{campaign}/{name}/external/.
EXTERNAL = layout.EXTERNAL_RUN
CURVE = f"{layout.EVAL_DIR}/{layout.CURVE_FILE}"  # relative to a cell folder
CELL_RUN_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]*/[a-z-]+/seed\d+"
RUN_PATTERN = rf"{INITIAL}|{EXTERNAL}|{CELL_RUN_PATTERN}"
CURVE_RUNS = rf"{EXTERNAL}|{CELL_RUN_PATTERN}"  # what has a curve: a cell, an external checkpoint
EVAL_JOBS = config["eval"]["jobs"]
# eval.jobs: cell -- the per-checkpoint rules evaluate only the initial model and external checkpoints;
# cells have their own rules.
PER_CHECKPOINT_RUNS = f"{INITIAL}|{EXTERNAL}" if EVAL_JOBS == "cell" else RUN_PATTERN
BENCHMARKS = list(config["benchmarks"])
TINYWORLD = layout.TINYWORLD_SOURCE
RESOURCE_DEFAULTS = {"gpus": 0, "cpus": 1, "mem_mb": 4000, "runtime": 60}
FETCH = f"{RESULTS}/fetch.json"
GPU_ENV = Path(workflow.basedir, "envs", "gpu.yaml")


# ---- what every job runs: this checkout's code, and hub ids offline from the shared cache

def hub_models():
    """Hub ids of the config's models (the rest are built here or local folders), and of its external
    checkpoints pinned as `org/name@revision`."""
    pinned = [externals.pinned(spec["path"], spec["revision"]) for spec in config["checkpoints"].values()
              if spec.get("revision") and is_hub_id(spec["path"])]
    return list(dict.fromkeys([*(spec["path"] for spec in config["models"].values() if is_hub_id(spec["path"])),
                               *pinned]))


def hub_datasets():
    """{registry name: hub id} of the config's training sets and benchmarks that come from the hub."""
    found = {spec["loader"]: spec["source"] for spec in config["datasets"].values() if is_hub_id(spec["source"])}
    return found | {name: source for name, source in config["benchmarks"].items() if is_hub_id(source)}


def hf_home():
    """The shared hub cache (HF_HOME) that fetch fills and every job reads: the config's `hf_home`, else
    the submit host's HF_HOME, else huggingface_hub's default; absolute, so every node agrees."""
    home = config.get("hf_home") or os.environ.get("HF_HOME") or os.path.join("~", ".cache", "huggingface")
    return str(Path(os.path.expanduser(home)).resolve())


USES_HUB = bool(hub_models() or hub_datasets())
# the submit host's own setting, for the fetch rule (every other job runs with HF_HUB_OFFLINE=1)
os.environ.setdefault("BALAGG_FETCH_OFFLINE", os.environ.get("HF_HUB_OFFLINE", "0"))


def job_environment():
    """The shell prefix of every rule. PYTHONPATH: the checkout's src/ (workflow.basedir), so jobs run this
    code whatever environment runs them (Snakemake drops an inherited PYTHONPATH under --sdm conda, and
    the conda envs hold dependencies only). With hub sources: HF_HOME/HF_HUB_CACHE = the shared cache and
    HF_HUB_OFFLINE=1 (compute nodes read what fetch stored; fetch itself sets HF_HUB_OFFLINE back)."""
    src = shlex.quote(str(Path(workflow.basedir, "src")))
    exports = [f'export PYTHONPATH={src}"${{{{PYTHONPATH:+:$PYTHONPATH}}}}"']
    if USES_HUB:
        home = shlex.quote(hf_home())
        exports += [f"export HF_HOME={home}", f"export HF_HUB_CACHE={home}/hub", "export HF_HUB_OFFLINE=1"]
    return "set -euo pipefail; " + "; ".join(exports) + "; "


shell.prefix(job_environment())


def fetch_args():
    """`python -m balagg fetch` arguments for every hub model and dataset of the config."""
    args = [f"--model {shlex.quote(m)}" for m in hub_models()]
    args += [f"--dataset {shlex.quote(f'{name}={repo}')}" for name, repo in hub_datasets().items()]
    return " ".join(args)


def fetch_inputs(source):
    """fetch.json for a hub source (its snapshot is then in the shared cache), nothing otherwise. Only its
    existence counts (ancient): a fetch rerun for a newly added model must not retrain every cell."""
    return [ancient(FETCH)] if is_hub_id(source) else []


@cache
def train_env_check(accelerate_config):
    """Refuse at DAG build an accelerate config whose backend package the train jobs cannot import:
    envs/gpu.yaml under --sdm conda, else this interpreter (jobs inherit its environment)."""
    if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
        packages = conda_env_packages(GPU_ENV)
        check_accelerate_config(accelerate_config, lambda p: p.replace("_", "-") in packages, str(GPU_ENV))
    else:
        check_accelerate_config(accelerate_config, lambda p: importlib.util.find_spec(p) is not None, sys.executable)


def model_spec(name):
    """The settings of a grid model or of an external checkpoint (the schema's model_settings: prompts,
    chat template, answer format, thinking, context, generation resources)."""
    return config["models"][name] if name in config["models"] else config["checkpoints"][name]


def evaluated_models():
    """Every name whose evaluation the campaign runs: the grid's models and the external checkpoints."""
    return [*config["models"], *config["checkpoints"]]


def external_run(name):
    return os.path.join(RESULTS, name, EXTERNAL)


def merged_dir(name, step):
    """Where a verl checkpoint's step is merged into a Hugging Face folder."""
    return os.path.join(external_run(name), layout.MERGED_DIR, layout.step_dirname(step))


def verl_in_jobs():
    """Whether the merge_verl jobs can import verl: under --sdm conda they run in envs/verl.yaml, else in this
    interpreter's environment."""
    if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
        return True
    return importlib.util.find_spec("verl") is not None


def resolve_externals():
    """Every external checkpoint resolved to its steps and checked before any job runs: one line naming the
    checkpoint and the problem (balagg.checkpoints), a name shared with a model, a verl checkpoint where verl
    is not installed (with the merge command to run by hand), a context too short for prompt + eval budget."""
    cache = Path(hf_home(), "hub")
    offline = os.environ.get("BALAGG_FETCH_OFFLINE", "0") not in ("", "0")
    prompt = config.get("train", {}).get("max_prompt_length", CellConfig.max_prompt_length)
    found = {}
    for name, spec in config["checkpoints"].items():
        if name in config["models"] or name in layout.CAMPAIGN_DIRS:
            raise WorkflowError(f"config: checkpoints.{name}: the name is taken by "
                                + ("a model of the grid" if name in config["models"] else "a campaign folder"))
        try:
            external = externals.resolve(name, spec, cache, offline, lambda step: merged_dir(name, step))
            if external.verl and not verl_in_jobs():
                step, actor = next(iter(external.verl.items()))
                raise ValueError(f"checkpoints.{name}: {actor} is a verl checkpoint and verl is not installed where "
                                 "the jobs run; "
                                 f"merge it with verl's own merger and set path to the merged folder: "
                                 f"{externals.verl_merge_command(actor, merged_dir(name, step))}")
            source = externals.context_source(external)
            if source is None:  # a hub id: its snapshot at the revision, once fetched
                source = externals.hub_snapshot(cache, external.source, external.revision)
            if source is not None:
                check_model_lengths(f"checkpoints.{name}", source, spec.get("max_position_embeddings"),
                                    {"evaluation": (prompt, config["eval"]["max_tokens"])})
        except ValueError as error:
            raise WorkflowError(f"config: {error}") from None
        found[name] = external
    return found


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
    """The train section with the model's own overrides applied. The schema types both sections alike
    and neither may hold a key that names the cell (model, dataset, aggregator, seed)."""
    return {**config["train"], **config["models"][model].get("train", {})}


def cell_step_summaries(wildcards):
    """Every checkpoint's summary.json of one cell; step 0's is the initial model's, shared by all cells.
    An external checkpoint's run: the summary of each of its steps."""
    run = EVAL_RUN.format(**wildcards)
    if wildcards.run == EXTERNAL:
        return [os.path.join(run, layout.eval_step_relpath(step, layout.SUMMARY_FILE))
                for step in EXTERNALS[wildcards.model].steps]
    initial = EVAL_RUN.format(model=wildcards.model, run=INITIAL)
    return [
        os.path.join(initial if step == 0 else run, layout.eval_step_relpath(step, layout.SUMMARY_FILE))
        for step in checkpoint_steps(wildcards.model)
    ]


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
    return [os.path.join(EVAL_RUN.format(**wildcards), layout.MANIFEST_FILE)]


def checkpoint_path(wildcards):
    if wildcards.run == INITIAL:
        if int(wildcards.step) != 0:
            raise ValueError(f"the initial model has only step 0, not {wildcards.step}")
        return model_source(wildcards.model)
    if wildcards.run == EXTERNAL:
        steps = EXTERNALS[wildcards.model].steps
        if int(wildcards.step) not in steps:
            raise ValueError(f"checkpoints.{wildcards.model} has no step {int(wildcards.step)}; it has {sorted(steps)}")
        return steps[int(wildcards.step)]
    return cell_checkpoint(EVAL_RUN.format(**wildcards), wildcards.step)


def cell_checkpoint(cell_dir, tag):
    """The trainer's weights-only checkpoint of step `tag` (six digits) in a cell folder."""
    return os.path.join(cell_dir, layout.checkpoint_relpath(tag))


def cell_eval_groups():
    """eval.jobs: cell -- models grouped by their checkpoint steps after 0 (one rule per group, since a
    rule's outputs cannot depend on its wildcards); step 0 is the initial model's, evaluated per model."""
    groups = {}
    for model in config["models"]:
        groups.setdefault(tuple(s for s in checkpoint_steps(model) if s > 0), []).append(model)
    return list(groups.items())


def cell_step_pairs(option, make_input):
    """eval.jobs: cell -- `--{option} INPUT --out STEP_DIR` for every step folder among a rule's outputs."""

    def pairs(wildcards, output):
        cell = CELL.format(**wildcards)
        step_dirs = list(dict.fromkeys(os.path.dirname(path) for path in output))
        return " ".join(f"--{option} {make_input(cell, d)} --out {d}" for d in step_dirs)

    return pairs


def tracking_uri():
    """The configured MLflow URI, or the campaign's SQLite file (absolute, so every job agrees)."""
    if config.get("tracking_uri"):
        return config["tracking_uri"]
    return "sqlite:///" + str(Path(RESULTS, "mlflow.db").resolve())


def model_family(model):
    """The tiny-world task family of a model's problems: a tiny model's warm start's (its regime's, else
    the default mix's); the default family for a model not built here."""
    from balagg.tinyworld.regimes import model_family as family_of

    return family_of(model_spec(model))


def tinyworld_manifest(family):
    """The manifest of one family's raw tiny-world files (written last by `tinyworld data`)."""
    return os.path.join(RESULTS, layout.tinyworld_raw_dir(family), layout.RAW_MANIFEST_FILE)


def data_path(model, kind, name, make=layout.data_file):
    """The prepared training set or benchmark (or, with `make=balagg.layout.data_report_file`, its report) that a
    model's jobs read: a tiny-world source in the model's family, any other source's one file."""
    family = model_family(model) if data_source(kind, name) == TINYWORLD else None
    return os.path.join(RESULTS, make(kind, name, family))


def model_benchmarks(wildcards):
    """The model's prepared benchmark files, in the config's order (evaluation's inputs)."""
    return [data_path(wildcards.model, "bench", name) for name in BENCHMARKS]


def check_benchmark_folders():
    """Each model's benchmark files share one folder (generate and score take one --benchmarks-dir): a model
    of a family other than the default cannot mix tiny-world benchmarks with real ones (one line if not)."""
    for model in evaluated_models():
        if len({os.path.dirname(data_path(model, "bench", name)) for name in BENCHMARKS}) > 1:
            raise WorkflowError(f"config: models.{model}: its {model_family(model)} benchmarks must all come from "
                                "the tiny world (benchmarks: ... tinyworld), not from " + ", ".join(
                                    f"{n}: {config['benchmarks'][n]}" for n in BENCHMARKS
                                    if config["benchmarks"][n] != TINYWORLD))


def model_source(model):
    """Hub id or folder of the initial policy; tiny-world models are built under results/."""
    spec = config["models"][model]
    return os.path.join(RESULTS, layout.MODELS_DIR, model) if spec["path"] == TINYWORLD else spec["path"]


def model_inputs(wildcards):
    """What a cell's training waits for besides its data: the tiny model when it is built here, the
    fetched snapshot for a hub id."""
    if config["models"][wildcards.model]["path"] == TINYWORLD:
        return [os.path.join(model_source(wildcards.model), layout.MODEL_CARD_FILE)]
    return fetch_inputs(config["models"][wildcards.model]["path"])


def tinyworld_cards():
    """The card.json of every model the workflow builds itself (none for real models)."""
    return [os.path.join(model_source(m), layout.MODEL_CARD_FILE)
            for m, spec in config["models"].items() if spec["path"] == TINYWORLD]


def data_reports():
    """The prepare-data report of every training set and benchmark some model reads (bad rows skipped, and
    why): a tiny-world source once per family in use; an external checkpoint reads benchmarks only."""
    return list(dict.fromkeys(
        data_path(model, kind, name, layout.data_report_file)
        for model in evaluated_models()
        for kind, names in (("train", config["datasets"] if model in config["models"] else {}), ("bench", BENCHMARKS))
        for name in names
    ))


def bad_rows_summary():
    """End-of-run lines naming every prepared file with skipped bad rows (none when all rows were good)."""
    import json

    lines = []
    for path in data_reports():
        try:
            counts = json.loads(Path(path).read_text())
        except (OSError, ValueError):  # not made in this run, or not a report: nothing to say
            continue
        if isinstance(counts, dict) and counts.get("skipped"):
            lines.append(f"{counts['out']}: {counts['skipped']} bad row(s) of {counts['rows_read']} skipped "
                         f"(data.on_bad_row: skip); see {path}")
    return lines


def data_source(kind, name):
    return config["datasets"][name]["source"] if kind == "train" else config["benchmarks"][name]


def data_family(wildcards):
    """The tiny-world family of a prepare_data job: its `family` folder's, else the default."""
    return wildcards.get("family", layout.TINYWORLD_DEFAULT_FAMILY)


def data_inputs(wildcards):
    """The family's raw tiny-world folder when the source is built here, fetch.json for hub ids, nothing for
    local mirrors."""
    if data_source(wildcards.kind, wildcards.name) == TINYWORLD:
        return [tinyworld_manifest(data_family(wildcards))]
    return fetch_inputs(data_source(wildcards.kind, wildcards.name))


def data_loader(wildcards):
    """The registry name of balagg.data's loader: the dataset's `loader`, or the benchmark itself."""
    return config["datasets"][wildcards.name]["loader"] if wildcards.kind == "train" else wildcards.name


def data_source_arg(wildcards):
    """Hub id or local mirror; the tiny world keeps one mirror folder per registry name and family."""
    source = data_source(wildcards.kind, wildcards.name)
    if source != TINYWORLD:
        return source
    return os.path.join(RESULTS, layout.tinyworld_raw_dir(data_family(wildcards)), data_loader(wildcards))


def data_selector(wildcards):
    return f"--dataset {data_loader(wildcards)}" if wildcards.kind == "train" else f"--benchmark {wildcards.name}"


def tinyworld_size(wildcards):
    return config["models"][wildcards.model].get("tinyworld_size", wildcards.model)


PROMPT_KEYS = ("math_template", "code_template", "answer_format", "enable_thinking", "max_position_embeddings")
"""Model keys that shape the evaluation's prompts and context exactly as the training's (cell_config)."""


def tinyworld_regime_arg(wildcards):
    """`--regime NAME` for a tiny model with a laboratory length regime (docs/laboratory.md), else nothing."""
    regime = config["models"][wildcards.model].get("tinyworld_regime")
    return f"--regime {regime}" if regime else ""


def prompt_args(wildcards):
    """How evaluation prompts are built for the model: chat template or plain, its templates, the answer
    format the template asks for, the chat template's enable_thinking and the context override."""
    spec = model_spec(wildcards.model)
    args = ["--prompt-style", "chat" if spec.get("chat_template") else "plain"]
    for key in PROMPT_KEYS:
        if key in spec:
            value = spec[key]
            args += [f"--{key.replace('_', '-')}", str(value).lower() if isinstance(value, bool) else str(value)]
    return " ".join(shlex.quote(arg) for arg in args)


@lru_cache(maxsize=None)
def check_context(model):
    """Prompt + completion (training) and prompt + eval budget fit the model's effective context: checked
    here, before any job, when its config.json is local or in the HF cache; otherwise the train job checks
    at start (balagg.context) and this says so once."""
    settings, spec = train_settings(model), config["models"][model]
    prompt = settings.get("max_prompt_length", CellConfig.max_prompt_length)
    lengths = {"training": (prompt, settings.get("max_completion_length", CellConfig.max_completion_length)),
               "evaluation": (prompt, config["eval"]["max_tokens"])}
    context = check_model_lengths(model, model_source(model), spec.get("max_position_embeddings"), lengths)
    if context is None:
        print(f"balagg: model {model}: no config.json of {model_source(model)} yet (not fetched or built); "
              "the context check runs in the train job at start", file=sys.stderr)
    return context


def cell_config(wildcards):
    """The resolved per-cell training config that `python -m balagg train --cell` reads: every field of
    CellConfig with the cell's value, defaults filled in (the scope from the aggregator). Resolved, so that
    a config change reruns exactly the cells whose training it changes (`train: {scope: group}` only the
    token-agg cells; a key set to its default none)."""
    model, spec = wildcards.model, config["models"][wildcards.model]
    settings = train_settings(model)
    cell = {
        "model": model_source(model),
        "model_name": model,
        "dataset_name": wildcards.dataset,
        "train_files": [data_path(model, "train", wildcards.dataset)],
        "aggregator": wildcards.aggregator,
        "seed": int(wildcards.seed),
        "use_chat_template": spec.get("chat_template", False),
        **{key: spec[key] for key in ("answer_format", "enable_thinking", "max_position_embeddings") if key in spec},
        "num_processes": max(1, spec.get("train_resources", {}).get("gpus", 0)),
        # the trainer stops at a resumable checkpoint before the job's own Slurm time limit
        "time_limit_minutes": model_resource("train_resources", "runtime")(wildcards),
        "mlflow_tracking_uri": tracking_uri(),
        "mlflow_experiment": CAMPAIGN,
        **({"prompt_template": spec["math_template"]} if "math_template" in spec else {}),
        **settings,
    }
    resolved = CellConfig.from_dict(cell).to_dict()  # a bad combination stops the workflow before any job runs
    check_context(model)  # so do lengths past the model's context
    if resolved.get("accelerate_config"):
        train_env_check(resolved["accelerate_config"])
    return resolved


def checkpoint_steps(model):
    """Steps with a weights-only checkpoint (0, every eval_every, the last), as the trainer saves them."""
    settings = train_settings(model)
    return CellConfig.checkpoint_steps_of(settings["total_steps"], settings["eval_every"])


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


def model_resource(rule_key, key):
    """Resource `key` of `rule_key` (train_resources / generate_resources) for the job's model."""

    def lookup(wildcards):
        return model_spec(wildcards.model).get(rule_key, {}).get(key, RESOURCE_DEFAULTS[key])

    return lookup


def analysis_curves(wildcards):
    """Every cell's eval curve (the analysis rules' inputs)."""
    return cell_paths(CURVE)


def external_record(name, settings, fetch_files):
    """checkpoint.json of an external checkpoint (balagg.checkpoints.record), with the commit fetch.json
    recorded for a hub id."""
    import json

    fetch = json.loads(Path(fetch_files[0]).read_text()) if fetch_files else None
    return externals.record(EXTERNALS[name], settings, fetch, CAMPAIGN, tracking_uri())


def external_paths(name):
    """`name` (relative to an external checkpoint's run folder) for every external checkpoint."""
    return [os.path.join(external_run(checkpoint), name) for checkpoint in EXTERNALS]


def external_records(wildcards=None):
    """Every external checkpoint's checkpoint.json; its eval/curve.csv lies beside (Table 1's rows)."""
    return external_paths(layout.EXTERNAL_RECORD_FILE)


def analysis_manifests(wildcards):
    """Every cell's manifest: its train/metrics.jsonl is complete once the manifest exists."""
    return cell_paths(layout.MANIFEST_FILE)


def analysis_targets():
    """Table 1 (the grid's cells and the external checkpoints), and, for a campaign with a grid, the figures,
    the diagnosis and the comparison of its cells."""
    folder = os.path.join(RESULTS, layout.ANALYSIS_DIR)
    if not grid():
        return [f"{folder}/table1.{ext}" for ext in ("csv", "md", "tex")]
    return [
        *(f"{folder}/table1.{ext}" for ext in ("csv", "md", "tex")),
        *(f"{folder}/figure{n}.{ext}" for n in (1, 2, 3) for ext in ("png", "pdf")),
        f"{folder}/diagnosis.md",
        f"{folder}/diagnosis.csv",
        *(f"{folder}/comparison.{ext}" for ext in ("md", "csv")),
        *(f"{folder}/mechanism.{ext}" for ext in ("png", "pdf", "csv")),
    ]


def campaign_targets():
    """Everything `rule all` asks for except the HTML report, which is built last from all of it.

    The report rule runs a nested `snakemake --report` over the same DAG, and that refuses to start
    while any file of it is still being written (Snakemake's incomplete marker), so the report must
    wait for every one of these, not only the analysis artifacts it embeds.
    """
    return [
        *cell_paths(CURVE),
        *cell_paths(f"{layout.EVAL_DIR}/{layout.EVAL_TRACKING_FILE}"),
        *external_paths(CURVE),
        *external_paths(f"{layout.EVAL_DIR}/{layout.EVAL_TRACKING_FILE}"),
        *analysis_targets(),
        f"{RESULTS}/{layout.ANALYSIS_DIR}/mlflow.json",
        *([f"{RESULTS}/data/card.json"] if tinyworld_cards() else []),
    ]


if not config["aggregators"] and not config["checkpoints"]:
    raise WorkflowError("config: nothing to run: give aggregators (a grid to train, with models and datasets) "
                        "or checkpoints (to evaluate without training)")
check_benchmark_folders()
EXTERNALS = resolve_externals()
