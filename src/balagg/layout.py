"""The results layout: the folder and file names every stage reads and writes, spelled once.

Data preparation, training, generation, scoring, analysis, tracking, the workflow's rules and the CLI
build their paths from these names and functions instead of writing their own copy, so a name changed
here changes everywhere (docs/files.md describes each file). Only the standard library (and the rule registry, for
the names a cell folder may have) is imported: the workflow and ``--help`` import this module.

Campaign layout (all paths relative to the working directory)::

    results/{campaign}/                                   campaign_dir(campaign)
      data/train/{dataset}.jsonl, data/bench/{benchmark}.jsonl
      data/{family}/train/..., data/{family}/bench/...    a tiny-world family other than chains (data_file)
      tinyworld/raw/, tinyworld/{family}/raw/             the tiny world's raw files (tinyworld_raw_dir)
      {model}/initial/eval/step-000000/                   the untrained model, shared by its cells
      {checkpoint}/external/                              an external checkpoint (balagg.external_checkpoints)
        checkpoint.json  eval/step-{N:06d}/...  eval/curve.csv  eval/mlflow.json  [merged/step-{N:06d}/]
      {model}/{dataset}/{aggregator}/seed{seed}/          one cell (cell_relpath)
        cell.json  manifest.json  logs/  benchmarks/
        train/metrics.jsonl  train/checkpoints/step-{N:06d}/  train/state/checkpoint-{N}/
        train/train.log  train/mlflow_run_id
        eval/step-{N:06d}/{generations.jsonl, generation.json, scores.jsonl, summary.json}
        eval/curve.csv  eval/mlflow.json
      analysis/                                           Table 1, Figures 1-3, diagnosis
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from balagg.aggregation.rules import RULES

RESULTS_DIR = "results"
INITIAL_RUN = "initial"
"""The evaluation run of a model's untrained weights: ``{model}/initial/``, step 0 of every cell's curve."""

EXTERNAL_RUN = "external"
"""The evaluation run of an external checkpoint (``checkpoints:`` of the config): ``{checkpoint}/external/``."""
EXTERNAL_RECORD_FILE = "checkpoint.json"
"""What an external checkpoint is (source, revision, the fetched commit, its steps): Table 1 and MLflow read it."""
MERGED_DIR = "merged"
"""``{checkpoint}/external/merged/step-N/``: a verl checkpoint merged into a Hugging Face folder."""

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
"""A name that becomes a folder: a campaign's, a model's, a dataset's, an external checkpoint's (and each half
of a hub id, ``org/name``)."""

SEED_PREFIX = "seed"
CELL_PATTERN = "{model}/{dataset}/{aggregator}/" + SEED_PREFIX + "{seed}"
"""A cell folder relative to the campaign folder (``str.format`` or Snakemake wildcards)."""

SEED_DIR = re.compile(rf"^{SEED_PREFIX}(\d+)$")
STEP_DIR_PREFIX = "step-"
STEP_DIGITS = 6
"""The digits of a step in folder names (:func:`step_tag`)."""
STEP_DIR = re.compile(rf"^{STEP_DIR_PREFIX}(\d+)$")

WILDCARDS: dict[str, str] = {
    "model": NAME_PATTERN,
    "dataset": NAME_PATTERN,
    "aggregator": "|".join(re.escape(name) for name in RULES),  # the registry's canonical names, each a
    # balagg.aggregation.rules.NAME_PATTERN (a record is checked against it); a campaign's names enter canonical
    "seed": r"\d+",
    "step": rf"\d{{{STEP_DIGITS}}}",
}
"""What each wildcard of the layout's patterns matches (the workflow's wildcard constraints)."""


def pattern_regex(pattern: str, named: bool = True) -> str:
    """``pattern`` (wildcards in braces, e.g. :data:`CELL_PATTERN`) as a regular expression: each wildcard a
    group (``named``: a named one) of what :data:`WILDCARDS` says it matches, the rest literal."""
    parts = re.split(r"\{(\w+)\}", pattern)
    return "".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>{WILDCARDS[part]})" if named
                   else f"(?:{WILDCARDS[part]})" for i, part in enumerate(parts))


CELL_REGEX = re.compile(pattern_regex(CELL_PATTERN))
"""A cell folder (relative to its campaign folder), whole: :meth:`Cell.parse`."""

# campaign-level folders (under results/{campaign}/)
DATA_DIR = "data"
MODELS_DIR = "models"
ANALYSIS_DIR = "analysis"
CAMPAIGN_DIRS = frozenset({"analysis", "data", "logs", "aggregation", "mlflow", "benchmarks", "models", "tinyworld"})
"""Top-level folders of a campaign that are not models (and so hold no cells)."""

TINYWORLD_SOURCE = "tinyworld"
"""The config value of a model path, dataset source or benchmark source that the workflow builds itself."""
TINYWORLD_FAMILIES = ("chains", "walks", "walks4")
"""The tiny world's task families (balagg.tinyworld.raw): arithmetic chains or walks (on the even lattice
mod 40, or the lattice of 4 mod 80: balagg.tinyworld.walks.WORLDS) in the training sets and the math
benchmarks. A tiny model's family is its warm start's (balagg.tinyworld.regimes.warm_start_family);
each family in use has its own raw files and prepared data (:func:`data_file`, :func:`tinyworld_raw_dir`)."""
TINYWORLD_DEFAULT_FAMILY = TINYWORLD_FAMILIES[0]
"""The family of the default warm start and of every model not built here; its files have no family folder."""

# files of the tiny world (raw datasets under tinyworld/raw/, one folder per model under models/)
TINYWORLD_MANIFEST_FILE = "manifest.json"
"""The tiny world's raw-data manifest in :func:`tinyworld_raw_dir`: the seed, the sizes, the tasks and each
dataset's file, rows and sha256 (the same file name as a cell's :data:`CELL_MANIFEST_FILE`, another file)."""
MODEL_CARD_FILE = "card.json"

# files of a cell folder
CELL_CONFIG_FILE = "cell.json"
CELL_MANIFEST_FILE = "manifest.json"
"""A cell's manifest, written last by ``balagg train``: checkpoint steps, final metrics, versions (docs/files.md)."""
TRAIN_DIR = "train"
EVAL_DIR = "eval"
CURVE_FILE = "curve.csv"
EVAL_TRACKING_FILE = "mlflow.json"

# files of a training work folder (the cell's train/)
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS_DIR = "checkpoints"
STATE_DIR = "state"
RESUMABLE_PREFIX = "checkpoint-"  # TRL's resumable checkpoint folders under state/
TRAIN_LOG_FILE = "train.log"
MLFLOW_RUN_ID_FILE = "mlflow_run_id"
TRAIN_LOCK_FILE = "train.lock"
VERIFIER_COUNTS_FILE = "verifier.json"
STOPPED_FILE = "stopped.json"
TRAINED_FILE = "trained.json"  # the step a finished training reached, written before its resumable state is removed
DISTRIBUTED_FILE = "distributed.json"
CONTEXT_FILE = "context.json"
TRAINER_STATE_FILE = "trainer_state.json"

# files of one evaluated step (eval/step-NNNNNN/)
GENERATIONS_FILE = "generations.jsonl"
GENERATION_META_FILE = "generation.json"
SCORES_FILE = "scores.jsonl"
SUMMARY_FILE = "summary.json"


def campaign_dir(campaign: str) -> str:
    """``results/{campaign}``."""
    return f"{RESULTS_DIR}/{campaign}"


def cell_relpath(model: str, dataset: str, aggregator: str, seed: int | str) -> str:
    """A cell folder relative to its campaign folder."""
    return CELL_PATTERN.format(model=model, dataset=dataset, aggregator=aggregator, seed=seed)


@dataclass(frozen=True, order=True)
class Cell:
    """A model trained on a dataset with one aggregation rule and one seed.

    Its folder, relative to the campaign's, is :attr:`relpath` (:data:`CELL_PATTERN`); its fields are the
    workflow's wildcards of that pattern. Ordered field by field (model, dataset, aggregator, seed)."""

    model: str
    dataset: str
    aggregator: str
    seed: int

    @classmethod
    def parse(cls, relpath: str) -> Cell | None:
        """The cell whose folder is ``relpath`` (relative to its campaign folder; the inverse of
        :attr:`relpath`), or None for a path that is not a cell's folder."""
        match = CELL_REGEX.fullmatch(relpath)
        return None if match is None else cls.of(match.groupdict())

    @classmethod
    def of(cls, wildcards: Mapping) -> Cell:
        """The cell that a mapping of the pattern's wildcards (Snakemake's, or :attr:`wildcards`) names."""
        return cls(wildcards["model"], wildcards["dataset"], wildcards["aggregator"], int(wildcards["seed"]))

    @property
    def wildcards(self) -> dict:
        """The values of :data:`CELL_PATTERN`'s wildcards."""
        return asdict(self)

    @property
    def relpath(self) -> str:
        """The cell's folder relative to its campaign folder."""
        return cell_relpath(self.model, self.dataset, self.aggregator, self.seed)

    def __str__(self) -> str:
        return self.relpath


def step_tag(step: int | str) -> str:
    """The zero-padded step of folder names: 40 -> ``000040``."""
    return f"{int(step):0{STEP_DIGITS}d}"


def step_dirname(step: int | str) -> str:
    """``step-000040``: the folder of a weights-only checkpoint and of its evaluation."""
    return STEP_DIR_PREFIX + step_tag(step)


def parse_step_dirname(name: str, strict: bool = False) -> int | None:
    """The step of a ``step-N`` folder name, else None; ``strict`` accepts only :data:`STEP_DIGITS` digits
    (what :func:`step_dirname` writes)."""
    match = STEP_DIR.match(name)
    if match is None or (strict and len(match.group(1)) != STEP_DIGITS):
        return None
    return int(match.group(1))


def step_of_path(*paths: str | os.PathLike) -> int | None:
    """The step of the innermost ``step-N`` folder of the first path that has one."""
    for path in paths:
        for part in reversed(Path(path).resolve().parts):
            step = parse_step_dirname(part)
            if step is not None:
                return step
    return None


def eval_step_relpath(step: int | str, name: str = "") -> str:
    """``eval/step-NNNNNN[/name]`` relative to a cell or initial-run folder; a non-numeric ``step`` (a
    Snakemake wildcard such as ``{step}``) is kept as given."""
    folder = step_dirname(step) if str(step).isdigit() else STEP_DIR_PREFIX + str(step)
    return f"{EVAL_DIR}/{folder}" + (f"/{name}" if name else "")


def checkpoint_relpath(step: int | str) -> str:
    """``train/checkpoints/step-NNNNNN`` relative to a cell folder (wildcards kept as in :func:`eval_step_relpath`)."""
    folder = step_dirname(step) if str(step).isdigit() else STEP_DIR_PREFIX + str(step)
    return f"{TRAIN_DIR}/{CHECKPOINTS_DIR}/{folder}"


def dataset_filename(name: str) -> str:
    """``{name}.jsonl``: a normalised training set or benchmark (docs/files.md) in its folder."""
    return f"{name}.jsonl"


def _family_dir(root: str, family: str | None) -> str:
    """``root``, or ``root/{family}`` for a tiny-world family other than the default (chains), so that the
    default family's files keep the paths they had before families existed. A Snakemake wildcard
    (``{family}``) is kept as given."""
    if family is not None and family not in TINYWORLD_FAMILIES and not re.fullmatch(r"\{\w+\}", family):
        raise ValueError(f"unknown tiny-world family {family!r}; use one of {', '.join(TINYWORLD_FAMILIES)}")
    return root if family in (None, TINYWORLD_DEFAULT_FAMILY) else f"{root}/{family}"


def data_file(kind: str, name: str, family: str | None = None) -> str:
    """``data/train/{name}.jsonl`` or ``data/bench/{name}.jsonl`` (``kind`` ``train`` or ``bench``) relative to
    the campaign folder; a tiny-world dataset of a family other than chains under ``data/{family}/``.
    ``family`` is None for a dataset that does not come from the tiny world (the same file for every model)."""
    return f"{_family_dir(DATA_DIR, family)}/{kind}/{dataset_filename(name)}"


def data_report_file(kind: str, name: str, family: str | None = None) -> str:
    """``data/[{family}/]{kind}/{name}.report.json``: what ``prepare-data`` read, wrote and skipped (and why)."""
    return f"{_family_dir(DATA_DIR, family)}/{kind}/{name}.report.json"


def tinyworld_raw_dir(family: str | None = None) -> str:
    """``tinyworld/raw`` (chains) or ``tinyworld/{family}/raw``: one family's raw files, in the real
    datasets' schemas, one folder per registry name, and their manifest."""
    return f"{_family_dir('tinyworld', family)}/raw"
