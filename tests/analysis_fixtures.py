"""Hand-made campaign result folders with known values, in the layout of docs/files.md."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

from balagg.benchmarks import BENCHMARKS

REPO = Path(__file__).resolve().parents[1]
OFFSETS = (-0.05, -0.03, -0.01, 0.01, 0.03, 0.05)
"""Per-benchmark offsets around the six-benchmark mean; they sum to zero, so the mean is exact."""

BOOTSTRAP_GAP = 0.05
"""best@8 - best@8_bootstrap in the fixture cells."""


def write_cell(campaign: Path, model: str, dataset: str, aggregator: str, seed: int,
               means: dict[int, tuple[float, float]], metrics: list[dict] | None = None, *,
               layout: str = "curve", manifest: bool = True, checkpoints: tuple[int, ...] = (),
               drop_benchmark: dict[int, str] | None = None, bootstrap: bool = True,
               unparsable_golds: dict[str, int] | None = None) -> Path:
    """Write one cell: per step the six-benchmark mean (acc@8, best@8), spread over benchmarks by OFFSETS.

    ``layout``: ``curve`` writes eval/curve.csv, ``summary`` writes eval/step-*/summary.json.
    ``checkpoints``: extra train/checkpoints/step-* folders (a checkpoint with no evaluation).
    ``drop_benchmark``: {step: benchmark} left out of that step's evaluation.
    ``bootstrap``: also write best@8_bootstrap = best@8 - BOOTSTRAP_GAP (False: a summary scored before
    the bootstrap column existed).
    ``unparsable_golds``: {benchmark: problems whose gold the verifier could not parse} (summed in the mean).
    """
    unparsable = {"unparsable_golds": 0} if unparsable_golds is not None else {}
    cell = campaign / model / dataset / aggregator / f"seed{seed}"
    (cell / "train").mkdir(parents=True, exist_ok=True)
    rows = []
    for step, (acc, best) in sorted(means.items()):
        for bench, offset in zip(BENCHMARKS, OFFSETS):
            if (drop_benchmark or {}).get(step) == bench:
                continue
            rows.append({"step": step, "benchmark": bench, "acc@8": acc + offset, "best@8": best + offset,
                         **({"best@8_bootstrap": best + offset - BOOTSTRAP_GAP} if bootstrap else {}),
                         "n_problems": 10, "n_samples": 80, "truncation_rate": 0.0,
                         **({"unparsable_golds": unparsable_golds.get(bench, 0)} if unparsable else {})})
        rows.append({"step": step, "benchmark": "mean", "acc@8": acc, "best@8": best,
                     **({"best@8_bootstrap": best - BOOTSTRAP_GAP} if bootstrap else {}),
                     "n_problems": 60, "n_samples": 480, "truncation_rate": 0.0,
                     **({"unparsable_golds": sum(unparsable_golds.values())} if unparsable else {})})
    eval_dir = cell / "eval"
    eval_dir.mkdir(exist_ok=True)
    if layout == "curve":
        with (eval_dir / "curve.csv").open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        for step in means:
            (eval_dir / f"step-{step:06d}").mkdir(exist_ok=True)
    else:
        for step, (acc, best) in means.items():
            folder = eval_dir / f"step-{step:06d}"
            folder.mkdir(exist_ok=True)
            summary = {"checkpoint": str(cell / f"train/checkpoints/step-{step:06d}"), "step": step, "n": 8,
                       "benchmarks": {r["benchmark"]: {k: r[k] for k in ("acc@8", "best@8", "best@8_bootstrap") if k in r}
                                      for r in rows if r["step"] == step and r["benchmark"] != "mean"},
                       "mean": {k: r[k] for r in rows if r["step"] == step and r["benchmark"] == "mean"
                                for k in ("acc@8", "best@8", "best@8_bootstrap") if k in r}}
            (folder / "summary.json").write_text(json.dumps(summary))
    for step in checkpoints:
        (cell / "train" / "checkpoints" / f"step-{step:06d}").mkdir(parents=True, exist_ok=True)
    if metrics is not None:
        (cell / "train" / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    if manifest:
        steps = sorted({s for s in means if s > 0} | set(checkpoints))
        (cell / "manifest.json").write_text(json.dumps({"checkpoints": [{"step": s} for s in steps]}))
    return cell


def train_metrics(steps: range, pg_loss: Callable[[int], float], len_cv: float, len_gap: float,
                  len_mean: float = 200.0) -> list[dict]:
    return [{"step": s, "pg_loss": pg_loss(s), "len_cv": len_cv, "len_gap": len_gap, "len_mean": len_mean,
             "reward_mean": 0.5} for s in steps]


# The paper-like test campaign: known six-benchmark means and training metrics.
AGGREGATORS = ("seq-agg", "token-agg", "balanced-agg")
STEPS = (0, 10, 20, 30)
# (dataset "dapo", model "qwen-a"): per aggregator and seed, the six-benchmark mean (acc@8, best@8) per step.
DAPO = {
    "seq-agg": {0: ([.20, .30, .34, .32], [.30, .40, .45, .47]),
                1: ([.20, .32, .38, .30], [.30, .42, .45, .45])},
    "token-agg": {0: ([.20, .36, .33, .28], [.30, .49, .43, .40]),
                  1: ([.20, .34, .33, .28], [.30, .47, .43, .40])},
    "balanced-agg": {0: ([.20, .33, .37, .36], [.30, .43, .48, .47]),
                     1: ([.20, .35, .39, .34], [.30, .43, .46, .47])},
}
# Seed means: seq acc [.20 .31 .36 .31] best [.30 .41 .45 .46]; token acc [.20 .35 .33 .28] best [.30 .48 .43 .40];
# balanced acc [.20 .34 .38 .35] best [.30 .43 .47 .47] (tie: the first step, 20, is the peak's step).


def polaris_means(aggregator: str, seed: int) -> dict[int, tuple[float, float]]:
    rank = AGGREGATORS.index(aggregator)
    return {s: (0.1 + 0.001 * s + 0.01 * rank + 0.001 * seed, 0.2 + 0.001 * s + 0.01 * rank) for s in STEPS}


def default_metrics(dataset: str, aggregator: str, seed: int) -> list[dict]:
    """30 logged steps. pg_loss: token-agg drifts to -0.02 * step on average over its seeds
    (-0.01 * step in seed 0, -0.03 * step in seed 1), the others stay at 0. Lengths: dapo has a large
    relative pos-neg gap (100 / 200) and low CV (0.3); polaris a small gap (10 / 200) and high CV (0.8)."""
    slope = -0.01 * (1 + 2 * seed) if aggregator == "token-agg" else 0.0
    cv, gap = (0.3, 100.0) if dataset == "dapo" else (0.8, 10.0)
    return train_metrics(range(1, 31), lambda s: slope * s, cv, gap)


def make_campaign(root, skip=(), summary_seeds=(1,), metrics=default_metrics):
    """The grid qwen-a x {dapo, polaris} x 3 aggregators x seeds {0, 1}; ``skip``: (dataset, aggregator,
    seed) cells left out; seeds in ``summary_seeds`` have eval/step-*/summary.json instead of curve.csv."""
    for aggregator in AGGREGATORS:
        for seed in (0, 1):
            for dataset in ("dapo", "polaris"):
                if (dataset, aggregator, seed) in skip:
                    continue
                if dataset == "dapo":
                    acc, best = DAPO[aggregator][seed]
                    means = {s: (a, b) for s, a, b in zip(STEPS, acc, best)}
                else:
                    means = polaris_means(aggregator, seed)
                write_cell(root, "qwen-a", dataset, aggregator, seed, means,
                           metrics(dataset, aggregator, seed),
                           layout="summary" if seed in summary_seeds else "curve")
    return root
