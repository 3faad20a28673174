"""Hand-made campaign result folders with known values, in the layout of docs/files.md."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = ("math500", "aime24", "aime25", "olympiadbench", "minerva", "livecodebench")
OFFSETS = (-0.05, -0.03, -0.01, 0.01, 0.03, 0.05)
"""Per-benchmark offsets around the six-benchmark mean; they sum to zero, so the mean is exact."""


def load_script(name: str):
    """Import ``analysis/<name>.py`` as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(f"analysis_{name}", REPO / "analysis" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def write_cell(campaign: Path, model: str, dataset: str, aggregator: str, seed: int,
               means: dict[int, tuple[float, float]], metrics: list[dict] | None = None, *,
               layout: str = "curve", manifest: bool = True, checkpoints: tuple[int, ...] = (),
               drop_benchmark: dict[int, str] | None = None) -> Path:
    """Write one cell: per step the six-benchmark mean (acc@8, best@8), spread over benchmarks by OFFSETS.

    ``layout``: ``curve`` writes eval/curve.csv, ``summary`` writes eval/step-*/summary.json.
    ``checkpoints``: extra train/checkpoints/step-* folders (a checkpoint with no evaluation).
    ``drop_benchmark``: {step: benchmark} left out of that step's evaluation.
    """
    cell = campaign / model / dataset / aggregator / f"seed{seed}"
    (cell / "train").mkdir(parents=True, exist_ok=True)
    rows = []
    for step, (acc, best) in sorted(means.items()):
        for bench, offset in zip(BENCHMARKS, OFFSETS):
            if (drop_benchmark or {}).get(step) == bench:
                continue
            rows.append({"step": step, "benchmark": bench, "acc@8": acc + offset, "best@8": best + offset,
                         "n_problems": 10, "n_samples": 80, "truncation_rate": 0.0})
        rows.append({"step": step, "benchmark": "mean", "acc@8": acc, "best@8": best,
                     "n_problems": 60, "n_samples": 480, "truncation_rate": 0.0})
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
                       "benchmarks": {r["benchmark"]: {"acc@8": r["acc@8"], "best@8": r["best@8"]}
                                      for r in rows if r["step"] == step and r["benchmark"] != "mean"},
                       "mean": {"acc@8": acc, "best@8": best}}
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
