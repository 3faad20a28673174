"""``python -m balagg train``: GRPO-train one grid cell (resumes from the work directory's newest complete
checkpoint; writes metrics.jsonl, evaluation checkpoints and, last, the manifest).

With ``--launch`` it starts the right command for the cell's hardware instead (balagg.train.launch):
``accelerate launch --config_file <accelerate_config> --num_processes <num_processes> -m balagg train ...``
for several GPUs, or this command itself for one process; the launcher holds the work directory's lock
and its children die with it.

``--invalidate PATH`` (repeatable) removes PATH (a file or folder) once the lock is held, before any
training: the workflow names the cell's evaluation and the campaign's analysis, so an interrupted
retrain leaves them missing (Snakemake then sees the cell incomplete) instead of standing stale.

Exit status: 0 trained (or already finished: only the manifest is written); 2 bad input or the work
directory is in use by another trainer; 75 stopped early at a resumable checkpoint (time limit or
SIGTERM/SIGUSR1): run again to resume.
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
    parser.add_argument("--invalidate", action="append", default=[], metavar="PATH",
                        help="remove PATH (outputs derived from this training) before training")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from balagg.train.config import CellConfig

    cell = CellConfig.load(args.cell)
    if args.launch:
        from balagg.train.launch import launch_command, run_launched

        command = launch_command(cell, args.cell, args.workdir, args.out)
        return run_launched(command, args.workdir, invalidate=args.invalidate)

    import sys

    from balagg.train.deadline import EXIT_RESUMABLE, TrainingStopped
    from balagg.train.launch import die_with_launcher
    from balagg.train.run import run_cell

    die_with_launcher()
    try:
        run_cell(cell, args.workdir, args.out, invalidate=args.invalidate)
    except TrainingStopped as stopped:
        print(f"{args.workdir}: {stopped}", file=sys.stderr)
        return EXIT_RESUMABLE
    return 0
