"""The benchmarks and training sets of the registry (:mod:`balagg.data.sources`), their order, and the names of
the metrics reported on them.

Metric names carry the number of samples they are computed from: ``acc@{n}``, ``best@{n}``,
``best@{n}_bootstrap``, ``pass@{k}`` (:func:`acc_metric`, :func:`best_metric`,
:func:`best_bootstrap_metric`, :func:`pass_metric`); the paper reports n = 8 (:data:`PAPER_SAMPLES`).
Scoring's summary.json, a cell's curve.csv, MLflow and the analysis name them through these functions.
Nothing heavy is imported: the workflow and ``--help`` import this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from balagg.data.sources import SOURCES, names

BENCHMARKS: tuple[str, ...] = names("benchmark")
"""The registry's benchmarks in the paper's order; files, summaries and tables list them in this order."""

BENCHMARK_KINDS: dict[str, str] = {name: SOURCES[name].kind for name in BENCHMARKS}
"""``math`` (a gold answer, checked by the math verifier) or ``code`` (tests run in the sandbox)."""

TRAINING_SETS: tuple[str, ...] = names("train")

MEAN = "mean"
"""The pseudo-benchmark holding the unweighted mean over a step's benchmarks (summary.json, curve.csv)."""


_COUNTS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")


def mean_label(benchmarks: Iterable[str]) -> str:
    """How tables name the mean over ``benchmarks`` (without :data:`MEAN`): ``six-benchmark`` for the paper's six,
    ``five-benchmark`` for a campaign of five."""
    count = len(set(benchmarks) - {MEAN})
    return f"{_COUNTS[count] if count < len(_COUNTS) else count}-benchmark"


def benchmark_rank(name: str) -> tuple[int, str]:
    """Sort key: the paper's order, then other names alphabetically."""
    return (BENCHMARKS.index(name), "") if name in BENCHMARKS else (len(BENCHMARKS), name)


def benchmark_order(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` (without :data:`MEAN`) in the paper's order, unknown names last and sorted."""
    return tuple(sorted(set(names) - {MEAN}, key=benchmark_rank))


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
