"""What the pipeline's stages share, spelled once: file layout, benchmarks, metric names, prompts, defaults.

Every stage (data, train, generation, scoring, analysis, tracking), the workflow's rules and the CLI
import these names instead of writing their own copy, so a value changed here changes everywhere.
Only the standard library is imported at module level (the workflow and ``--help`` import it);
:func:`load_tokenizer` imports transformers when called.

Campaign layout (all paths relative to the working directory)::

    results/{campaign}/                                   campaign_dir(campaign)
      data/train/{dataset}.jsonl, data/bench/{benchmark}.jsonl
      data/{family}/train/..., data/{family}/bench/...    a tiny-world family other than chains (data_file)
      tinyworld/raw/, tinyworld/{family}/raw/             the tiny world's raw files (tinyworld_raw_dir)
      {model}/initial/eval/step-000000/                   the untrained model, shared by its cells
      {checkpoint}/external/                              an external checkpoint (balagg.checkpoints)
        checkpoint.json  eval/step-{N:06d}/...  eval/curve.csv  eval/mlflow.json  [merged/step-{N:06d}/]
      {model}/{dataset}/{aggregator}/seed{seed}/          one cell (cell_relpath)
        cell.json  manifest.json  logs/  benchmarks/
        train/metrics.jsonl  train/checkpoints/step-{N:06d}/  train/state/checkpoint-{N}/
        train/train.log  train/mlflow_run_id
        eval/step-{N:06d}/{generations.jsonl, generation.json, scores.jsonl, summary.json}
        eval/curve.csv  eval/mlflow.json
      analysis/                                           Table 1, Figures 1-3, diagnosis

Metric names carry the number of samples they are computed from: ``acc@{n}``, ``best@{n}``,
``best@{n}_bootstrap``, ``pass@{k}`` (:func:`acc_metric`, :func:`best_metric`,
:func:`best_bootstrap_metric`, :func:`pass_metric`); the paper reports n = 8 (:data:`PAPER_SAMPLES`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

# ---- campaign layout --------------------------------------------------------------------------------

RESULTS_DIR = "results"
INITIAL_RUN = "initial"
"""The evaluation run of a model's untrained weights: ``{model}/initial/``, step 0 of every cell's curve."""

EXTERNAL_RUN = "external"
"""The evaluation run of an external checkpoint (``checkpoints:`` of the config): ``{checkpoint}/external/``."""
EXTERNAL_RECORD_FILE = "checkpoint.json"
"""What an external checkpoint is (source, revision, the fetched commit, its steps): Table 1 and MLflow read it."""
MERGED_DIR = "merged"
"""``{checkpoint}/external/merged/step-N/``: a verl checkpoint merged into a Hugging Face folder."""

CELL_PATTERN = "{model}/{dataset}/{aggregator}/seed{seed}"
"""A cell folder relative to the campaign folder (``str.format`` or Snakemake wildcards)."""

SEED_DIR = re.compile(r"^seed(\d+)$")
STEP_DIR_PREFIX = "step-"
STEP_DIR = re.compile(r"^step-(\d+)$")
STEP_DIGITS = 6

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
RAW_MANIFEST_FILE = "manifest.json"
MODEL_CARD_FILE = "card.json"

# files of a cell folder
CELL_CONFIG_FILE = "cell.json"
MANIFEST_FILE = "manifest.json"
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


# ---- benchmarks --------------------------------------------------------------------------------------

BENCHMARKS: tuple[str, ...] = ("math500", "aime24", "aime25", "olympiadbench", "minerva", "livecodebench")
"""The six benchmarks in the paper's order; files, summaries and tables list them in this order."""

BENCHMARK_KINDS: dict[str, str] = {name: "code" if name == "livecodebench" else "math" for name in BENCHMARKS}
"""``math`` (a gold answer, checked by the math verifier) or ``code`` (tests run in the sandbox)."""

TRAINING_SETS: tuple[str, ...] = ("dapo-math-17k", "polaris-53k")

MEAN = "mean"
"""The pseudo-benchmark holding the unweighted mean over a step's benchmarks (summary.json, curve.csv)."""


def benchmark_rank(name: str) -> tuple[int, str]:
    """Sort key: the paper's order, then other names alphabetically."""
    return (BENCHMARKS.index(name), "") if name in BENCHMARKS else (len(BENCHMARKS), name)


def benchmark_order(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` (without :data:`MEAN`) in the paper's order, unknown names last and sorted."""
    return tuple(sorted(set(names) - {MEAN}, key=benchmark_rank))


# ---- metric names -----------------------------------------------------------------------------------

PAPER_SAMPLES = 8
"""Samples per problem of the paper's evaluation: Table 1 and Figure 1 report Acc@8 and Best@8."""


def acc_metric(n: int) -> str:
    """Mean over problems of the share of n samples that are correct."""
    return f"acc@{n}"


def best_metric(n: int) -> str:
    """Share of problems solved by at least one of n samples."""
    return f"best@{n}"


def pass_metric(k: int) -> str:
    """Unbiased pass@k (k <= n)."""
    return f"pass@{k}"


def best_bootstrap_metric(n: int) -> str:
    """verl's bootstrap Best@n (``best@n/mean``; balagg.evaluation.scoring.metrics.bootstrap_best_at_n)."""
    return f"{best_metric(n)}_bootstrap"


def eval_metrics(n: int) -> tuple[str, str, str]:
    """The metrics of every evaluation summary that the curve, MLflow and Table 1 carry:
    ``(acc@n, best@n, best@n_bootstrap)``."""
    return acc_metric(n), best_metric(n), best_bootstrap_metric(n)


UNPARSABLE_GOLDS = "unparsable_golds"
"""summary.json, per math benchmark (and summed in ``mean``): problems whose gold answer the math verifier
cannot parse; each is scored incorrect in every sample, as lighteval scores it."""

UNPARSABLE_GOLD_IDS = "unparsable_gold_ids"
"""summary.json, per math benchmark: the ids of those problems."""


def summary_columns(n: int) -> tuple[str, ...]:
    """Columns of a step's summary as table rows (one cell's eval/curve.csv)."""
    return ("step", "benchmark", *eval_metrics(n), "n_problems", "n_samples", "truncation_rate", UNPARSABLE_GOLDS)


_ACC = re.compile(r"^acc@(\d+)$")


def samples_of_columns(columns: Iterable[str]) -> int | None:
    """The n of the ``acc@n`` column among ``columns`` (None if there is none or several)."""
    found = {int(m.group(1)) for c in columns if (m := _ACC.match(c))}
    return found.pop() if len(found) == 1 else None


def tracking_metric(benchmark: str, metric: str) -> str:
    """MLflow name of an eval metric: ``eval/<benchmark>/acc_at_8`` (MLflow refuses '@' in names)."""
    return f"eval/{benchmark}/{metric.replace('@', '_at_')}"


# ---- prompts ----------------------------------------------------------------------------------------

MATH_TEMPLATE = "{problem}\nPlease reason step by step, and put your final answer within \\boxed{}."
"""The math prompt (Qwen2.5-Math "boxed" style) of training and evaluation."""

DAPO_TEMPLATE = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{problem}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)
"""DAPO-Math-17k's own user turn (its ``prompt`` column, verbatim around the problem): answer_format
``answer-line``."""

ANSWER_FORMATS = ("boxed", "boxed-strict", "answer-line")
"""How a math answer is read (balagg.prompts.answer_for_verifier): ``boxed`` (MATH_TEMPLATE asks for
``\\boxed{}``), ``boxed-strict`` (the same, and an answer without a box is no answer) or
``answer-line`` (DAPO_TEMPLATE asks for a last ``Answer: ...`` line)."""

DEFAULT_ANSWER_FORMAT = "boxed"
"""The answer format of a model whose config names none (training, generation, scoring, the tiny-world card)."""

CODE_TEMPLATE = (
    "You will be given a question (problem specification) and will generate a correct Python program "
    "that matches the specification and passes all tests.\n\nQuestion: {problem}\n\n{code_instructions}"
)
"""The code prompt (LiveCodeBench's generic prompt); ``{code_instructions}`` is one of the two below."""

CODE_WITH_STARTER = (
    "You will use the following starter code to write the solution to the problem and enclose your code "
    "within delimiters.\n```python\n{starter_code}\n```\n"
)
CODE_STDIN = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on "
    "the sample inputs). Enclose your code within delimiters as follows. Ensure that when the python "
    "program runs, it reads the inputs, runs the algorithm and writes output to STDOUT.\n"
    "```python\n# YOUR CODE HERE\n```\n"
)

_PLACEHOLDER = re.compile(r"\{([A-Za-z_]\w*)\}")


def render_prompt(template: str, **fields: str) -> str:
    """``template`` with each placeholder ``{name}`` of ``fields`` replaced by its value, in one pass.

    Every other character is literal, braces included (``\\boxed{}`` stays as written, ``{x}`` without a
    value stays ``{x}``), and text substituted in is never scanned again. Training and evaluation
    both render prompts with this function, so one template means the same prompt in both."""
    return _PLACEHOLDER.sub(lambda m: fields[m.group(1)] if m.group(1) in fields else m.group(0), template)


def check_template(template: str, placeholders: Iterable[str], what: str) -> None:
    """ValueError naming ``what`` unless ``template`` holds every ``{placeholder}``."""
    missing = [name for name in placeholders if "{" + name + "}" not in template]
    if missing:
        raise ValueError(f"{what} must contain the placeholder(s) " + ", ".join("{" + m + "}" for m in missing))


def problem_prompt(record: dict, math_template: str = MATH_TEMPLATE, code_template: str = CODE_TEMPLATE) -> str:
    """The user turn of one problem record (``kind`` math, the default, or code; docs/files.md)."""
    kind = record.get("kind", "math")
    if kind == "math":
        return render_prompt(math_template, problem=record["problem"])
    if kind == "code":
        starter = record.get("starter_code") or ""
        instructions = render_prompt(CODE_WITH_STARTER, starter_code=starter) if starter.strip() else CODE_STDIN
        return render_prompt(code_template, problem=record["problem"], code_instructions=instructions)
    raise ValueError(f"problem {record.get('id')}: unknown kind {kind!r}")


def chat_messages(text: str, system_prompt: str | None = None) -> list[dict[str, str]]:
    """The conversation a chat template renders: an optional system turn, then ``text`` as the user turn."""
    return ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
        {"role": "user", "content": text}]


# ---- tokenizer ----------------------------------------------------------------------------------------

_AS_SAVED = ("PreTrainedTokenizerFast", "TokenizersBackend")


def load_tokenizer(path: str | os.PathLike):
    """A checkpoint's tokenizer, used alike by training, evaluation and the tiny world; ``path`` is a
    folder or a hub id resolved offline to its cached snapshot.

    When ``tokenizer_config.json`` names ``PreTrainedTokenizerFast`` or ``TokenizersBackend`` (what the
    tiny world's character-level tokenizer saves) the saved ``tokenizer.json`` is loaded as it is: for a
    ``qwen2`` model ``AutoTokenizer`` would return Qwen2's byte-level tokenizer instead and change the
    ids. Any other class (a real model's) loads through ``AutoTokenizer``. Padding is on the left (batched
    generation) and a tokenizer without a pad token pads with its EOS token."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    path = Path(path)
    if not path.is_dir():  # a hub id: its snapshot in the local hub cache (never downloads)
        from balagg.hub import is_hub_id, resolve_snapshot

        if is_hub_id(path):
            path = resolve_snapshot(str(path))
    config_path = path / "tokenizer_config.json"
    if not config_path.is_file() and not (path / "tokenizer.json").is_file():
        raise ValueError(f"{path} has no tokenizer (tokenizer_config.json / tokenizer.json)")
    tokenizer_class = json.loads(config_path.read_text()).get("tokenizer_class") if config_path.is_file() else None
    if tokenizer_class in _AS_SAVED:
        tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
    else:
        tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
