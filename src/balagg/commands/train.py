"""``python -m balagg train``: GRPO-train one grid cell (resumes from the work directory's newest complete
checkpoint; writes metrics.jsonl, evaluation checkpoints and, last, the manifest).

Several GPUs: ``accelerate launch --config_file configs/accelerate/<cfg>.yaml --num_processes N
-m balagg train ...`` with N = the cell's num_processes.
"""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train", help="GRPO-train one grid cell with its aggregation rule", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--cell", required=True, help="resolved per-cell config (cell.json)")
    parser.add_argument("--workdir", required=True, help="work directory (metrics.jsonl, checkpoints, state)")
    parser.add_argument("--out", required=True, help="manifest.json, written last")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from balagg.train.config import CellConfig
    from balagg.train.run import run_cell

    run_cell(CellConfig.load(args.cell), args.workdir, args.out)
    return 0
