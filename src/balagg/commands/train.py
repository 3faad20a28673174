"""``python -m balagg train``: GRPO-train one grid cell (resumes from the work directory's newest complete
checkpoint; writes metrics.jsonl, evaluation checkpoints and, last, the manifest).

With ``--launch`` it starts the right command for the cell's hardware instead (balagg.train.launch):
``accelerate launch --config_file <accelerate_config> --num_processes <num_processes> -m balagg train ...``
for several GPUs, or this command itself for one process.
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
    parser.add_argument("--launch", action="store_true",
                        help="run through accelerate launch with the cell's num_processes and accelerate_config")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from balagg.train.config import CellConfig

    cell = CellConfig.load(args.cell)
    if args.launch:
        import subprocess

        from balagg.train.launch import launch_command

        return subprocess.run(launch_command(cell, args.cell, args.workdir, args.out)).returncode

    from balagg.train.run import run_cell

    run_cell(cell, args.workdir, args.out)
    return 0
