"""Sample-based metrics from per-problem correctness counts.

For a problem with ``n`` samples of which ``c`` are correct:

- Acc@n  = c / n                       (mean over problems; the expected accuracy of one sample)
- Best@n = 1[c > 0]                    (mean over problems; solved by at least one of the n samples)
- pass@k = 1 - C(n-c, k) / C(n, k)     (Chen et al. 2021, unbiased for k <= n), computed stably as
           1 - prod_{i=n-c+1}^{n} (1 - k / i); it is 1 when n - c < k.

pass@1 equals Acc@n and pass@n equals Best@n. k > n has no unbiased estimate and is refused.
"""

from __future__ import annotations

from collections.abc import Sequence

from balagg import contract


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


def benchmark_metrics(correct: Sequence[Sequence[int | bool]], ks: Sequence[int] = ()) -> dict[str, float]:
    """``acc``, ``best`` and ``pass@k`` (for each k in ``ks``) averaged over problems.

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
    }
    for k in ks:
        result[contract.pass_metric(k)] = sum(pass_at_k(n, c, k) for c in counts) / len(counts)
    return result


def summary_samples(summary: dict) -> int:
    """The n (samples per problem) of a ``summary.json``: its ``n``, else the n of its ``acc@n`` keys;
    KeyError when it has neither."""
    if "n" in summary:
        return int(summary["n"])
    for values in summary["benchmarks"].values():
        n = contract.samples_of_columns(values)
        if n is not None:
            return n
    raise KeyError("n")


def summary_rows(summary: dict) -> list[dict]:
    """``summary.json`` of one checkpoint as rows of ``contract.summary_columns(n)`` (eval/curve.csv,
    docs/files.md): one per benchmark (sorted), then a ``benchmark = "mean"`` row when the summary has its
    mean. Values it lacks are None; a summary without ``step`` or ``benchmarks`` raises KeyError."""
    step = int(summary["step"])
    columns = contract.summary_columns(summary_samples(summary))[2:]
    rows = [{"step": step, "benchmark": name, **{key: values.get(key) for key in columns}}
            for name, values in sorted(summary["benchmarks"].items())]
    if contract.MEAN in summary:
        rows.append({"step": step, "benchmark": contract.MEAN, **{key: summary[contract.MEAN].get(key) for key in columns}})
    return rows
