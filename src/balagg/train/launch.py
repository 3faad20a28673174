"""The command that trains a cell on its hardware: plain ``python -m balagg train`` for one process without
an accelerate config (CPU, one GPU), else ``accelerate launch`` with the cell's ``accelerate_config``
(configs/accelerate/*.yaml) and ``num_processes``."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from balagg.train.config import CellConfig
from balagg.train.files import LOCKED_ENV, CellDir, exclusive


def launch_command(cell: CellConfig, cell_path: str | Path, workdir: str | Path, manifest: str | Path,
                   python: str = sys.executable) -> list[str]:
    train = ["-m", "balagg", "train", "--cell", str(cell_path), "--workdir", str(workdir), "--out", str(manifest)]
    if cell.num_processes == 1 and cell.accelerate_config is None:
        return [python, *train]
    launch = [python, "-m", "accelerate.commands.launch", "--num_processes", str(cell.num_processes)]
    if cell.accelerate_config is not None:
        if not Path(cell.accelerate_config).is_file():
            raise ValueError(f"cell config: accelerate_config {cell.accelerate_config} does not exist")
        launch += ["--config_file", cell.accelerate_config]
    else:
        launch += ["--multi_gpu"]
    return [*launch, *train]


# --------------------------------------------------------------------------------------------------
# The launcher owns its children: they die with it, it forwards stop signals, it holds the lock.
# --------------------------------------------------------------------------------------------------

PR_SET_PDEATHSIG = 1
OWNED_ENV = "BALAGG_LAUNCHED"
"""Set for the children of :func:`run_launched`; each trainer process then dies with its parent."""


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` to this process when its parent ends (PR_SET_PDEATHSIG); exit at once if
    the parent is already gone. A no-op where prctl is unavailable (not Linux)."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != parent or parent == 1:
        os._exit(1)


def remove_paths(paths: list[str]) -> None:
    """Remove each file or folder (missing ones are fine)."""
    for path in map(Path, paths):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def run_launched(command: list[str], workdir: str | Path, invalidate: list[str] = ()) -> int:
    """Run ``command`` (a trainer, or accelerate launching several) as this process's child, holding the
    work directory's lock for it:

    - the child gets PR_SET_PDEATHSIG=SIGKILL and marks its own trainer processes likewise
      (``$BALAGG_LAUNCHED``), so ``kill -9`` of this launcher ends the whole tree;
    - SIGTERM / SIGUSR1 / SIGINT are forwarded to the child, which stops at a resumable checkpoint
      (balagg.train.deadline), and the launcher waits for it;
    - the lock (an flock on ``train.lock``) is held by the launcher and inherited by the child, so a
      second trainer on the folder is refused while either lives;
    - ``invalidate`` paths are removed once the lock is held, before the child starts;
    - the child's exit status is returned; a child that stopped early (``stopped.json`` written by this
      attempt) returns :data:`~balagg.train.deadline.EXIT_RESUMABLE` even through accelerate.
    """
    from balagg.train.deadline import EXIT_RESUMABLE, START_ENV

    cell_dir = CellDir(workdir)
    with exclusive(cell_dir.root) as lock_fd:
        cell_dir.stopped.unlink(missing_ok=True)
        remove_paths(list(invalidate))
        env = {**os.environ, LOCKED_ENV: str(cell_dir.root.resolve()), OWNED_ENV: "1"}
        env.setdefault(START_ENV, repr(time.time()))
        child = subprocess.Popen(command, env=env, pass_fds=(lock_fd,), preexec_fn=die_with_parent)
        previous = {number: signal.signal(number, lambda n, f: child.send_signal(n))
                    for number in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)}
        try:
            code = child.wait()
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
        if code != 0 and cell_dir.stopped.exists():
            return EXIT_RESUMABLE
        return code if code >= 0 else 128 - code
