"""``python -m balagg train`` and ``python -m balagg train-worker``: GRPO-train one grid cell, in two roles.

``train`` is the launcher, what the workflow's train rule runs. It reads the cell config and trains the
cell on its hardware (balagg.train.launch): a cell of one process without an accelerate config trains in
this process; any other starts ``accelerate launch --config_file <accelerate_config> --num_processes
<num_processes> -m balagg train-worker ...`` as its child, holds the work directory's lock for it,
passes stop signals on, and its children die with it.

``train-worker`` is one training process (one rank of an accelerate launch): it resumes from the work
directory's newest complete checkpoint and writes metrics.jsonl, evaluation checkpoints and, last, the
manifest. Run by hand, it takes the work directory's lock itself, and on several processes only rank 0
does.

``--invalidate PATH`` (repeatable) removes PATH (a file or folder) once the lock is held, before any
training: the workflow names the cell's evaluation and the campaign's analysis, so an interrupted
retrain leaves them missing (Snakemake then sees the cell incomplete) instead of standing stale.

Exit status (both): 0 trained (or already finished: only the manifest is written); 2 bad input or the
work directory is in use by another trainer; 75 stopped early at a resumable checkpoint (time limit or
a stop signal: SIGTERM, SIGUSR1, SIGURG): run again to resume.
"""

from __future__ import annotations

import argparse

WORKER_COMMAND = "train-worker"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    launcher = subparsers.add_parser(
        "train", help="GRPO-train one grid cell with its aggregation rule, on the cell's processes",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    worker = subparsers.add_parser(
        WORKER_COMMAND, help="one training process of a cell (what `train` starts on each of several)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for parser, run in ((launcher, run_launcher), (worker, run_worker)):
        parser.add_argument("--cell", required=True, help="resolved per-cell config (cell.json)")
        parser.add_argument("--workdir", required=True, help="work directory (metrics.jsonl, checkpoints, state)")
        parser.add_argument("--out", required=True, help="manifest.json, written last")
        parser.add_argument("--invalidate", action="append", default=[], metavar="PATH",
                            help="remove PATH (outputs derived from this training) before training")
        parser.set_defaults(func=run)


def run_launcher(args: argparse.Namespace) -> int:
    from balagg.train.config import CellConfig
    from balagg.train.launch import launch

    worker = ["-m", "balagg", WORKER_COMMAND, "--cell", args.cell, "--workdir", args.workdir, "--out", args.out]
    return launch(CellConfig.load(args.cell), args.workdir, args.out, worker, invalidate=args.invalidate)


def run_worker(args: argparse.Namespace) -> int:
    from balagg.train.files import die_with_launcher

    die_with_launcher()
    from balagg.train.config import CellConfig
    from balagg.train.run import train

    return train(CellConfig.load(args.cell), args.workdir, args.out, invalidate=args.invalidate)
