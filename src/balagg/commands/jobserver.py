"""``python -m balagg jobserver -- COMMAND``: run COMMAND with a fork server for its balagg jobs.

Every ``python -m balagg ...`` that COMMAND starts (Snakemake's jobs, for example) runs in a child
forked from this process, which has imported torch, transformers, TRL and MLflow once, instead of
importing them itself; the job, its files, logs and exit status are what they would be without it
(balagg.jobserver states the contract; docs/jobserver.md). ``make demo`` runs Snakemake this way.
"""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("jobserver", help="run a command with a fork server for its balagg jobs",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", default=None,
                        help="append one line per job (pid, status, wall and CPU seconds, arguments) to this file")
    parser.add_argument("--preload", default=None,
                        help="comma-separated modules to import before the first job (default: balagg.jobserver.server.PRELOAD)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from balagg.jobserver.server import PRELOAD, serve

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise ValueError("jobserver: no command given (python -m balagg jobserver -- COMMAND ...)")
    modules = PRELOAD if args.preload is None else tuple(name for name in args.preload.split(",") if name)
    return serve(command, log=args.log, modules=modules)
