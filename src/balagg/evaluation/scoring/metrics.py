"""Sample-based metrics from per-problem correctness counts.

For a problem with ``n`` samples of which ``c`` are correct:

- Acc@n  = c / n                       (mean over problems; the expected accuracy of one sample)
- Best@n = 1[c > 0]                    (mean over problems; solved by at least one of the n samples)
- Best@n (bootstrap) = verl's ``best@n/mean`` (``process_validation_metrics`` and ``bootstrap_metric``
           in verl/trainer/ppo/metric_utils.py): per problem, the mean over 1000 resamples of n of its
           n samples *with replacement* (numpy's legacy RNG, seeded 42 for every problem) of "any
           resampled sample correct"; then the mean over problems. Its expectation given c is
           1 - (1 - c/n)^n <= 1[c > 0], so it reads lower than Best@n (c = 1 of 8: about 0.66, not 1).
- pass@k = 1 - C(n-c, k) / C(n, k)     (Chen et al. 2021, unbiased for k <= n), computed stably as
           1 - prod_{i=n-c+1}^{n} (1 - k / i); it is 1 when n - c < k.

pass@1 equals Acc@n and pass@n equals Best@n. k > n has no unbiased estimate and is refused.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from balagg.benchmarks import MEAN, pass_metric, samples_of_columns, summary_columns

VERL_BOOTSTRAP_RESAMPLES = 1000
"""``n_bootstrap`` of verl's ``bootstrap_metric``."""
VERL_BOOTSTRAP_SEED = 42
"""The seed verl's ``process_validation_metrics`` passes to ``bootstrap_metric`` (reset per problem)."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with ``c`` correct out of ``n`` samples."""
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"need n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n samples per problem; got n={n}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def bootstrap_best_at_n(correct: np.ndarray, n_bootstrap: int = VERL_BOOTSTRAP_RESAMPLES,
                        seed: int = VERL_BOOTSTRAP_SEED) -> np.ndarray:
    """verl's bootstrap ``best@n/mean`` of each problem: [problems, n] 0/1 flags -> [problems].

    verl calls ``np.random.seed(seed)`` and then, ``n_bootstrap`` times, ``np.random.choice(n, size=n,
    replace=True)`` for every problem; that stream is ``RandomState(seed).randint(0, n, (n_bootstrap, n))``
    (the same resample indices for every problem with n samples), so the resamples are drawn once here
    and the result equals verl's bit for bit. The order of a problem's samples matters (sample index)."""
    flags = np.asarray(correct, dtype=float)
    if flags.ndim != 2 or flags.shape[1] < 1:
        raise ValueError(f"need [problems, n >= 1] flags, got shape {flags.shape}")
    n = flags.shape[1]
    indices = np.random.RandomState(seed).randint(0, n, size=(n_bootstrap, n))
    return flags[:, indices].max(axis=2).mean(axis=1)


def benchmark_metrics(correct: Sequence[Sequence[int | bool]], ks: Sequence[int] = ()) -> dict[str, float]:
    """``acc``, ``best``, ``best_bootstrap`` (verl's) and ``pass@k`` (for each k in ``ks``) averaged
    over problems.

    ``correct[p]`` holds the 0/1 flags of problem p's samples; every problem needs the same n."""
    if not correct:
        raise ValueError("no problems to score")
    sizes = {len(flags) for flags in correct}
    if len(sizes) != 1 or 0 in sizes:
        raise ValueError(f"every problem needs the same number (>= 1) of samples, got {sorted(sizes)}")
    (n,) = sizes
    counts = [sum(1 for flag in flags if flag) for flags in correct]
    result = {
        "acc": sum(c / n for c in counts) / len(counts),
        "best": sum(1 for c in counts if c > 0) / len(counts),
        "best_bootstrap": float(np.mean(bootstrap_best_at_n(np.array(correct, dtype=float)))),
    }
    for k in ks:
        result[pass_metric(k)] = sum(pass_at_k(n, c, k) for c in counts) / len(counts)
    return result


def summary_samples(summary: dict) -> int:
    """The n (samples per problem) of a ``summary.json``: its ``n``, else the n of its ``acc@n`` keys;
    KeyError when it has neither."""
    if "n" in summary:
        return int(summary["n"])
    for values in summary["benchmarks"].values():
        n = samples_of_columns(values)
        if n is not None:
            return n
    raise KeyError("n")


def summary_rows(summary: dict) -> list[dict]:
    """``summary.json`` of one checkpoint as rows of ``balagg.benchmarks.summary_columns(n)`` (eval/curve.csv,
    docs/files.md): one per benchmark (sorted), then a ``benchmark = "mean"`` row when the summary has its
    mean. Values it lacks are None; a summary without ``step`` or ``benchmarks`` raises KeyError."""
    step = int(summary["step"])
    columns = summary_columns(summary_samples(summary))[2:]
    rows = [{"step": step, "benchmark": name, **{key: values.get(key) for key in columns}}
            for name, values in sorted(summary["benchmarks"].items())]
    if MEAN in summary:
        rows.append({"step": step, "benchmark": MEAN, **{key: summary[MEAN].get(key) for key in columns}})
    return rows
