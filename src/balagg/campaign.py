"""A campaign config, the one way in: :func:`load` merges config files as Snakemake merges them, validates
the result against the schema the dataclasses below generate (:func:`campaign_schema`), fills in every
default, checks the relations between settings, makes each rule name canonical (a verl alias becomes its
rule) and returns the typed :class:`Campaign`. The workflow (its Snakefile hands :func:`resolve` the mapping
Snakemake merged), ``balagg plan``, ``balagg tinyworld hub-cache``, the grid (:class:`balagg.grid.Grid`)
and the tests load a campaign this way.

Every problem is one line (a ValueError) naming the config file that holds the key -- the last of the
files that sets it, or all of them for a key none sets -- the key and the problem::

    config configs/rehearsal.yaml: train.total_stpes: unknown key (did you mean total_steps?)

Files are read and merged key by key in order, later files winning, as ``snakemake --configfile a.yaml
b.yaml`` merges them (nested mappings merged, other values replaced); ``--config KEY=VALUE`` last. A file
that is missing or not valid YAML is one line naming the file, the line and the column (Snakemake 9.27
reads ``--configfile`` before any workflow code runs and says only "Config file is not valid JSON or
YAML", so ``python -m balagg plan --configfile FILE`` is the way to find the line).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any

from balagg.aggregation.rules import ALIASES, RULES, aggregator
from balagg.config_schema import Checked, Overrides, document, from_mapping, setting
from balagg.data.sources import names
from balagg.grid.resources import Resources
from balagg.layout import CAMPAIGN_DIRS, NAME_PATTERN, TINYWORLD_SOURCE
from balagg.plan import Rates
from balagg.prompts import ANSWER_FORMATS, DEFAULT_ANSWER_FORMAT, DEFAULT_CHAT_TEMPLATE
from balagg.settings import AnalysisDefaults, DataDefaults, EvalDefaults, TinyWorldDefaults
from balagg.tinyworld.model import SIZES
from balagg.tinyworld.regimes import REGIMES
from balagg.train.config import CellConfig

TRAIN = Overrides(CellConfig, "train")
"""The ``train`` section and a model's own ``train``: some of :class:`CellConfig`'s settings each."""

SOURCE_HELP = ('where it comes from: a hub id or a local path (file or folder) with the real schema, or '
               f'"{TINYWORLD_SOURCE}" for the synthetic copy the workflow builds itself')


@dataclass(kw_only=True)
class ModelSettings(Checked):
    """How a model is prompted and evaluated: the settings a grid model (``models.<name>``) and an external
    checkpoint (``checkpoints.<name>``) share. Training and evaluation read them alike."""

    chat_template: bool = setting(DEFAULT_CHAT_TEMPLATE,
                                  "wrap prompts (training and evaluation) in the tokenizer's chat template")
    math_template: str | None = setting(None, "prompt of math problems ({problem}); training uses it too",
                                        optional=True)
    code_template: str | None = setting(None, "prompt of code problems ({problem}, {code_instructions})",
                                        optional=True)
    answer_format: str | None = setting(
        None, "what math_template asks for; the reward and the scoring extract that (default "
        f"{DEFAULT_ANSWER_FORMAT}; boxed-strict: no box, no answer)", choices=ANSWER_FORMATS, optional=True)
    enable_thinking: bool | None = setting(
        None, "chat template's enable_thinking (Qwen3), passed identically in training and evaluation; unset: "
        "the template's default", optional=True)
    max_position_embeddings: int | None = setting(
        None, "context override applied identically in training, vLLM rollouts and evaluation (balagg.context); "
        "unset: the model's own", minimum=1, optional=True)
    generate_resources: Resources | None = setting(None, "each evaluation (generate) job's resources",
                                                   optional=True)


@dataclass(kw_only=True)
class Model(ModelSettings):
    """A model of the grid: its initial policy, and what its jobs ask for."""

    config_name = "models"

    path: str = setting(help=f'hub id or local folder of the initial policy; "{TINYWORLD_SOURCE}" builds a tiny '
                             "model", min_length=1)
    tinyworld_size: str | None = setting(None, "size name of the tiny model (path = tinyworld; default: the "
                                         "model's name)", choices=tuple(SIZES), optional=True)
    tinyworld_regime: str | None = setting(
        None, "laboratory length regime of the tiny model's warm start (docs/laboratory.md); it sets the task "
        "family of the model's training sets and benchmarks", choices=tuple(REGIMES), optional=True)
    train_resources: Resources | None = setting(None, "the train job's resources", optional=True)
    train: Annotated[dict, TRAIN] | None = setting(
        None, "this model's overrides of the train section, typed as it is", optional=True)


@dataclass(kw_only=True)
class Checkpoint(ModelSettings):
    """An external checkpoint evaluated without training (docs/evaluation.md, Evaluate a checkpoint):
    results/{campaign}/{name}/external/."""

    config_name = "checkpoints"

    path: str = setting(help="hub id (with revision), Hugging Face model folder, folder of one run's checkpoints "
                             "(step-N, checkpoint-N, global_step_N: a curve) or verl checkpoint (FSDP shards and "
                             "huggingface/)", min_length=1)
    revision: str | None = setting(None, "commit hash, branch or tag of a hub id; fetch.json records the commit it "
                                         "resolved to", min_length=1, optional=True)


@dataclass(kw_only=True)
class Dataset(Checked):
    """A training set of the grid."""

    config_name = "datasets"

    loader: str = setting(help="which real dataset (and schema) the source holds", choices=names("train"))
    source: str = setting(help=SOURCE_HELP, min_length=1)


def _plan_section() -> type:
    """The ``plan`` section: :class:`balagg.plan.Rates`' settings with their defaults, the benchmark sizes
    to plan with, and each model's own rates over them."""
    hints = typing.get_type_hints(Rates)
    fields = [(field.name, hints[field.name], dataclasses.field(
        default=field.default, default_factory=field.default_factory, metadata=field.metadata))
        for field in dataclasses.fields(Rates)]
    fields += [
        ("bench_problems", dict[str, int], setting(
            default_factory=dict, help="problems per benchmark where the data registry has no size (livecodebench) "
            "or to plan a subset", minimum=1, choices=names("benchmark"))),
        ("models", dict[str, Annotated[dict, Overrides(Rates, "rates")]], setting(
            default_factory=dict, help="a model's own rates, over the section's")),
    ]
    section = dataclasses.make_dataclass("PlanSection", fields, bases=(Checked,), kw_only=True,
                                         namespace={"config_name": "plan", "__module__": __name__})
    section.__doc__ = (
        "Stated assumptions of `python -m balagg plan` (balagg.plan states the arithmetic): expected completion "
        "length as a fraction of the maximum, the expected prompt width of a micro-batch, tokens per second per "
        "GPU (forward + backward over padded micro-batches, as bench/gpu_smoke.sh's probe-7b tokens_per_s; "
        "rollout sampling in train jobs; sampling in evaluation jobs) and the model's parameter count "
        "(checkpoint disk, train host memory); per-model values under models.<name>.")
    return section


PlanSection = _plan_section()


@dataclass(kw_only=True)
class Campaign(Checked):
    """balagg campaign configuration. The grid is models x datasets x aggregators x seeds; each cell lives in
    results/{campaign}/{model}/{dataset}/{aggregator}/seed{seed}/."""

    config_name = "config"

    campaign: str = setting(help="name of the results folder, results/{campaign}/, and of the MLflow experiment",
                            pattern=NAME_PATTERN)
    tracking_uri: str | None = setting(
        None, "MLflow tracking URI. null = sqlite:///results/{campaign}/mlflow.db (created by the mlflow_setup "
        "rule); set http://host:5000 to log to a tracking server on a cluster.")
    hf_home: str | None = setting(
        None, "Shared Hugging Face cache (HF_HOME) that the fetch rule fills on the submit host and every job reads "
        "with HF_HUB_OFFLINE=1, for configs with hub ids; null = the submit host's HF_HOME, else "
        "~/.cache/huggingface. Put it on a file system the compute nodes see.")
    train_retries: int = setting(
        1, "Attempts after the first for a train job; each resumes from the newest checkpoint, so a cell longer "
        "than its Slurm runtime (train_resources.runtime) continues over several jobs.", minimum=0)
    seeds: list[int] = setting(default_factory=lambda: [0], help="the grid's seeds", minimum=0, min_items=1,
                               unique=True)
    aggregators: list[str] = setting(
        default_factory=list, help="the grid's aggregation rules (a verl alias names its rule); empty in a campaign "
        "that only evaluates checkpoints", choices=tuple(dict.fromkeys((*RULES, *ALIASES))), unique=True)
    models: dict[str, Model] = setting(
        default_factory=dict, help="the grid's models (trained); may be empty in a campaign that only evaluates "
        "checkpoints", pattern=NAME_PATTERN)
    checkpoints: dict[str, Checkpoint] = setting(
        default_factory=dict, help="external checkpoints to evaluate without training, each with the same "
        "evaluation settings as a model of the grid; names differ from the models' names", pattern=NAME_PATTERN)
    datasets: dict[str, Dataset] = setting(default_factory=dict, help="the grid's training sets",
                                           pattern=NAME_PATTERN)
    benchmarks: dict[str, str] = setting(
        help=f"the benchmarks every model and checkpoint is evaluated on, each with {SOURCE_HELP}",
        choices=names("benchmark"), min_items=1, min_length=1)
    data: DataDefaults = setting(default_factory=DataDefaults, help="data preparation")
    tinyworld: TinyWorldDefaults = setting(
        default_factory=TinyWorldDefaults,
        help=f'the synthetic world (datasets, benchmarks, tiny models) used where a source is "{TINYWORLD_SOURCE}"')
    train: Annotated[dict, TRAIN] | None = setting(
        None, "GRPO recipe of every cell; every key is a setting of balagg.train.config.CellConfig (its defaults "
        "apply to keys left out); per-model overrides go under models.<name>.train", optional=True)
    eval: EvalDefaults = setting(default_factory=EvalDefaults, help="evaluation: sampling and scoring")
    plan: PlanSection = setting(default_factory=PlanSection, help="stated assumptions of `balagg plan`")
    analysis: AnalysisDefaults = setting(default_factory=AnalysisDefaults, help="Table 1, the figures, the diagnosis")

    config: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False,
                                     metadata={"in_schema": False})
    """The validated mapping with every default filled in: what the workflow's rules read as ``config``."""
    layers: tuple = dataclasses.field(default=(), init=False, repr=False, compare=False,
                                      metadata={"in_schema": False})
    """``(file, mapping)`` of each config file as read, in merge order (``--config`` last): who set a key."""

    def __post_init__(self) -> None:
        super().__post_init__()
        canonical = [aggregator(name).name for name in self.aggregators]
        if len(set(canonical)) < len(canonical):
            raise ConfigError(("aggregators",), f"{self.aggregators} name one rule twice (a verl alias names its "
                                                f"rule: {', '.join(f'{a} = {r}' for a, r in ALIASES.items())})")
        self.aggregators = canonical
        if self.aggregators:
            for key in ("models", "datasets"):
                if not getattr(self, key):
                    raise ConfigError((key,), "a grid (aggregators) needs at least one entry")
            for name, model in self.models.items():
                train = {**(self.train or {}), **(model.train or {})}
                for key in ("total_steps", "eval_every"):
                    if key not in train:
                        raise ConfigError(("train", key), "a grid (aggregators) is trained for total_steps and "
                                          "evaluated every eval_every steps: set both")
                if train["eval_every"] < 1:
                    where = ("models", name, "train", "eval_every") if "eval_every" in (model.train or {}) else (
                        "train", "eval_every")
                    raise ConfigError(where, f"a grid evaluates its trained checkpoints: must be >= 1, got "
                                      f"{train['eval_every']}")
        elif not self.checkpoints:
            raise ConfigError((), "nothing to run: give aggregators (a grid to train, with models and datasets) or "
                                  "checkpoints (to evaluate without training)")
        for name in self.checkpoints:
            if name in self.models or name in CAMPAIGN_DIRS:
                raise ConfigError(("checkpoints", name), "the name is taken by " + (
                    "a model of the grid" if name in self.models else "a campaign folder"))
        for name, model in self.models.items():
            if model.path == TINYWORLD_SOURCE and model.tinyworld_size is None and name not in SIZES:
                raise ConfigError(("models", name, "tinyworld_size"), "a tiny-world model whose name is not a size "
                                  f"needs one: {', '.join(SIZES)}")
        unknown = [name for name in self.plan.models if name not in self.models]
        if unknown:
            raise ConfigError(("plan", "models", unknown[0]), "not a model of the config")

    def file_of(self, *keys: str) -> str:
        """The config file(s) that set ``keys`` (the last one that does), else all of them (:func:`where`)."""
        return where(keys, self.layers)


class ConfigError(ValueError):
    """A relation between settings a campaign breaks: the keys it concerns, and why."""

    def __init__(self, keys: Sequence[str], reason: str):
        super().__init__(f"{'.'.join(keys)}: {reason}" if keys else reason)
        self.keys, self.reason = tuple(keys), reason


@cache
def campaign_schema() -> dict[str, Any]:
    """The JSON schema of a campaign config, generated from :class:`Campaign` (``workflow/schemas/`` holds
    its copy: ``python -m balagg.config_schema``). Relations between settings are not in it:
    :class:`Campaign` checks them."""
    return document(Campaign)


# ---- reading and merging files -------------------------------------------------------------------------


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """The mapping in one YAML file ({} for an empty file); ValueError in one line otherwise."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ValueError(f"{path}{at}: not valid YAML ({problem})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a config file must hold a mapping, not a {type(data).__name__}")
    return data


def merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` merged into ``base`` (in place, returned): mappings recursively, anything else replaced
    (Snakemake's ``update_config``)."""
    for key, value in extra.items():
        base[key] = merge(base[key], value) if isinstance(value, Mapping) and isinstance(base.get(key), dict) else (
            merge({}, value) if isinstance(value, Mapping) else copy.deepcopy(value))
    return base


def load(paths: Sequence[str | os.PathLike], overrides: Mapping[str, Any] | None = None) -> Campaign:
    """The campaign of ``snakemake --configfile PATHS... [--config OVERRIDES]``: the files merged in order,
    then validated, completed and typed (:func:`resolve`)."""
    layers = [(str(path), read_yaml(path)) for path in paths]
    if overrides:
        layers.append(("--config", dict(overrides)))
    merged: dict[str, Any] = {}
    for _, data in layers:
        merge(merged, data)
    return resolve(merged, layers)


def resolve(config: Mapping[str, Any], layers: Sequence[tuple[str, Mapping]] = ()) -> Campaign:
    """The campaign of a merged config mapping (as Snakemake merged the files ``layers`` name, or one built in
    code): validated against :func:`campaign_schema`, every default filled in, the relations checked, the
    rule names canonical. ``config`` itself is left as it is; :attr:`Campaign.config` is the completed copy."""
    filled = merge({}, config)
    layers = tuple(layers) or (("(config)", config),)
    _validate(filled, layers)
    try:
        campaign = from_mapping(Campaign, filled, "config")
    except ConfigError as error:
        raise ValueError(f"config {where(error.keys, layers)}: {error}") from None
    except ValueError as error:  # a bound the schema does not express
        raise ValueError(f"config {where((), layers)}: {str(error).removeprefix('config.')}") from None
    filled["aggregators"] = list(campaign.aggregators)
    campaign.config, campaign.layers = filled, layers
    return campaign


def where(keys: Sequence[str], layers: Sequence[tuple[str, Mapping]]) -> str:
    """The file of ``layers`` that sets ``keys`` -- the last that does, as it wins -- else every file."""
    for name, data in reversed(layers):
        node: Any = data
        for key in keys:
            if not isinstance(node, Mapping) or key not in node:
                break
            node = node[key]
        else:
            if keys:
                return name
    return ", ".join(name for name, _ in layers) or "(none)"


def _model_key(train_key: str) -> str | None:
    """The model setting (:class:`ModelSettings`) that gives a cell config's ``train_key``, which the train
    section therefore does not take: the same name, or ``math_template`` for ``prompt_template``."""
    key = "math_template" if train_key == "prompt_template" else train_key
    return key if key in {field.name for field in dataclasses.fields(ModelSettings)} else None


def _validator():
    """A draft 2020-12 validator of :func:`campaign_schema` that fills in each default it meets (as
    Snakemake's ``validate(..., set_default=True)``: a section's default, then the defaults inside it)."""
    from jsonschema import Draft202012Validator, validators

    properties = Draft202012Validator.VALIDATORS["properties"]

    def set_defaults(validator, props, instance, schema):
        if isinstance(instance, dict):
            for name, spec in props.items():
                if "default" in spec and name not in instance:
                    instance[name] = copy.deepcopy(spec["default"])
        yield from properties(validator, props, instance, schema)

    # an integer is an int: 2.0 is refused here, naming its file and key (JSON Schema's own rule accepts it)
    integers = Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda checker, instance: isinstance(instance, int) and not isinstance(instance, bool))
    filling = validators.extend(Draft202012Validator, {"properties": set_defaults}, type_checker=integers)
    return filling(campaign_schema())


def _validate(config: dict, layers: Sequence[tuple[str, Mapping]]) -> None:
    """Fill in ``config``'s defaults and raise the first problem as one line (:func:`where`)."""
    from jsonschema.exceptions import best_match

    error = best_match(_validator().iter_errors(config))
    if error is None:
        return
    keys = [str(key) for key in error.absolute_path]
    reason = error.message
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = [key for key in error.instance if key not in allowed]
        if extra:
            from balagg.config_schema import _did_you_mean

            keys, reason = [*keys, str(extra[0])], "unknown key" + _did_you_mean(extra[0], allowed)
            if keys[-2:-1] == ["train"] and _model_key(extra[0]):
                reason = (f"not a train setting: the model's models.<name>.{_model_key(extra[0])} sets it, for "
                          "training and evaluation alike")
    elif error.validator == "required":
        missing = next((key for key in error.validator_value if key not in error.instance), None)
        if missing is not None:
            keys, reason = [*keys, missing], "required"
    elif "propertyNames" in error.schema_path:  # a name that cannot be a folder
        keys, reason = [*keys, str(error.instance)], f"the name must match {error.schema.get('pattern')}"
    lookup = keys
    while lookup and lookup[-1].isdigit():  # an item of a list: the file that sets the list
        lookup = lookup[:-1]
    raise ValueError(f"config {where(lookup, layers)}: {'.'.join(keys) or 'config'}: {reason}")
