"""Benchmark: time to load a paper-sized campaign and build Table 1 and Figures 1-3 from it.

A synthetic campaign the size of the paper's grid (2 models x 2 datasets x 3 aggregators x 3 seeds,
50 evaluated checkpoints of 6 benchmarks, 1000 logged training steps per cell), written to a temporary
folder in the docs/files.md layout; prints the seconds each stage takes.

    python bench/analysis.py [--seeds 3] [--checkpoints 50] [--steps 1000] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from analysis_fixtures import train_metrics, write_cell  # noqa: E402

from balagg.analysis import figure1, figure2, figure3, load_results, table1  # noqa: E402


def build(root: Path, seeds: int, checkpoints: int, steps: int) -> int:
    every = max(1, steps // checkpoints)
    cells = 0
    for model in ("Qwen2.5-Math-7B", "Qwen3-1.7B"):
        for dataset in ("DAPO-17k", "Polaris"):
            for rank, aggregator in enumerate(("seq-agg", "token-agg", "balanced-agg")):
                for seed in range(seeds):
                    means = {s: (0.2 + 0.1 * s / steps + 0.01 * rank, 0.3 + 0.1 * s / steps)
                             for s in range(0, steps + 1, every)}
                    write_cell(root, model, dataset, aggregator, seed, means,
                               train_metrics(range(1, steps + 1), lambda s: -1e-5 * s * rank, 0.6, 40.0))
                    cells += 1
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--checkpoints", type=int, default=50)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="tiny shapes, few repeats: checks that the bench runs (seconds); its figures measure nothing")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.checkpoints, args.steps = 1, 2, 4
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "bench"
        start = time.perf_counter()
        cells = build(root, args.seeds, args.checkpoints, args.steps)
        print(f"wrote {cells} cells in {time.perf_counter() - start:.1f} s")
        timings = {}
        start = time.perf_counter()
        results = load_results(root)
        timings["load_results"] = time.perf_counter() - start
        assert not results.problems, results.problem_report()
        start = time.perf_counter()
        table1.build_table(results)
        timings["table1.build_table"] = time.perf_counter() - start
        for name, module in (("figure1", figure1), ("figure2", figure2), ("figure3", figure3)):
            start = time.perf_counter()
            module.make_figure(results).savefig(Path(folder) / f"{name}.png")
            timings[f"{name} (make + png)"] = time.perf_counter() - start
        for stage, seconds in timings.items():
            print(f"{stage:<24} {seconds:7.2f} s")
        print(f"{len(results.evals)} evaluation rows, {len(results.train)} training rows")


if __name__ == "__main__":
    main()
