"""``python -m balagg``: one subcommand per pipeline step, so every workflow rule can be run by hand.

Each subcommand lives in ``balagg.commands.<name>`` and exposes ``add_parser(subparsers)``, which
registers its arguments and sets ``func``. Command modules import their heavy dependencies (torch,
transformers, TRL) inside ``func`` so that ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import logging
import os
import sys
import threading
import time
from typing import NoReturn

from balagg import __version__
from balagg.errors import DISK_FULL, os_error_line

COMMAND_MODULES: tuple[str, ...] = ("weights", "conformance", "tinyworld", "fetch", "prepare_data", "train", "generate", "score", "curve",
                                     "track", "plan", "results", "jobserver")
"""Modules under ``balagg.commands``, in the order ``--help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m balagg",
        description="Balanced Aggregation for GRPO: aggregation rules, training, evaluation, analysis.",
    )
    parser.add_argument("--version", action="version", version=f"balagg {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"balagg.commands.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except ValueError as error:  # bad input: one clear line, no traceback
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a full disk, a missing or unreadable file: the file and the cause
        if error.filename is None and error.errno not in DISK_FULL:
            raise
        print(f"error: {os_error_line(error)}", file=sys.stderr)
        return 1


THREAD_GRACE_S = 30.0
"""How long :func:`exit_without_teardown` waits for non-daemon threads before leaving them behind."""


def exit_without_teardown(code: int, thread_grace_s: float = THREAD_GRACE_S) -> NoReturn:
    """End the process with ``code`` as the interpreter's own exit would, minus its module teardown.

    What a normal exit does that matters is done here, in the interpreter's order
    (``threading._shutdown``, then ``atexit``): run the threading module's exit hooks, which wake and
    join the idle workers of every live ``concurrent.futures`` thread pool (vLLM and transformers keep
    some, never shut down); wait for the non-daemon threads; run the ``atexit`` handlers (logging's
    shutdown, multiprocessing's worker clean-up, MLflow's flush of queued points); flush stdout and
    stderr. What is skipped is the garbage collection of every imported module, which after torch,
    transformers and MLflow is a large share of a short job's CPU time, paid by every Python job of a
    workflow (bench/startup.py's whole-run table measures it; docs/performance.md). Files are written
    atomically and closed by the code that writes them, so none is left to finalisation. Only
    ``python -m balagg`` exits this way; :func:`main` returns normally.

    One difference from the interpreter: threads still running ``thread_grace_s`` after the hooks
    started (a pool worker stuck in a task, a library thread that never ends) are named in one line on
    stderr and left behind, where Python would wait for them forever; the command's work is done by
    then, and a job that hangs after it holds its GPUs until the scheduler's time limit.
    Under a profiler or tracer (``python -m cProfile -m balagg ...``), which writes its results after
    the program, the exit is the ordinary one.
    """
    if sys.getprofile() is not None or sys.gettrace() is not None:
        raise SystemExit(code)
    left = _wait_for_threads(time.monotonic() + thread_grace_s)
    if left:
        print(f"warning: exiting with status {code} although {len(left)} thread(s) still run after "
              f"{thread_grace_s:g} s: {', '.join(left)}", file=sys.stderr)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing left to deliver
            pass
    os._exit(code)


def _wait_for_threads(deadline: float) -> list[str]:
    """Run the threading module's exit hooks, then join the non-daemon threads, until ``deadline``
    (``time.monotonic()``); the names of the threads still alive then."""
    hooks = threading.Thread(target=_run_thread_exit_hooks, name="balagg-exit-hooks", daemon=True)
    hooks.start()
    hooks.join(max(0.0, deadline - time.monotonic()))
    main_thread, current = threading.main_thread(), threading.current_thread()
    left = []
    for thread in threading.enumerate():
        if thread in (main_thread, current, hooks) or thread.daemon:
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            left.append(thread.name)
    return left


def _run_thread_exit_hooks() -> None:
    """What ``threading._shutdown`` runs before it joins threads (``threading._register_atexit``:
    ``concurrent.futures`` wakes its idle workers with a stop marker and joins them), last registered
    first. Run in a daemon thread, so a hook blocked on a busy worker cannot hold the exit past the grace."""
    for hook in reversed(list(getattr(threading, "_threading_atexits", ()))):
        hook()
