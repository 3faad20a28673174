"""The launcher's role (``balagg train``): train a cell on its hardware. A cell of one process without an
accelerate config (CPU, one GPU) trains in the launcher's own process; any other runs ``accelerate
launch`` with the cell's ``accelerate_config`` (configs/accelerate/*.yaml) and ``num_processes``, through
:mod:`balagg.train.agent` so that a stop signal reaches every rank, each rank running the worker's
command (``balagg train-worker``) as the launcher's child (:func:`run_launched`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from balagg.errors import exit_status
from balagg.processes import STOP_SIGNALS, die_with_parent
from balagg.train.config import CellConfig
from balagg.train.files import LOCKED_ENV, OWNED_ENV, CellDir, exclusive, remove_paths

BACKEND_PACKAGES: dict[str, str] = {"DEEPSPEED": "deepspeed", "MEGATRON_LM": "megatron", "XLA": "torch_xla"}
"""accelerate ``distributed_type`` -> the package ``accelerate launch`` imports for it (FSDP, DDP and
MULTI_CPU need torch alone)."""


def accelerate_packages(config_file: str | Path) -> list[str]:
    """Packages the accelerate config ``config_file`` needs beyond torch and accelerate."""
    import yaml

    path = Path(config_file)
    if not path.is_file():
        raise ValueError(f"accelerate config {path} does not exist")
    try:
        settings = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ValueError(f"accelerate config {path} is not valid YAML: {error}") from None
    if not isinstance(settings, dict) or not isinstance(settings.get("distributed_type"), str):
        raise ValueError(f"accelerate config {path} has no distributed_type")
    package = BACKEND_PACKAGES.get(settings["distributed_type"].upper())
    return [package] if package else []


def check_accelerate_config(config_file: str | Path, importable, environment: str) -> None:
    """Refuse (ValueError, one line) an accelerate config that needs a package the train jobs' environment
    lacks; ``importable(package) -> bool`` answers for that environment (named ``environment``)."""
    missing = [package for package in accelerate_packages(config_file) if not importable(package)]
    if missing:
        raise ValueError(f"accelerate config {config_file} needs {', '.join(missing)}, which is not importable "
                         f"in the train jobs' environment ({environment}); install it there or choose "
                         "configs/accelerate/fsdp2.yaml")


def conda_env_packages(env_file: str | Path) -> set[str]:
    """Lower-case package names an ``envs/*.yaml`` conda environment installs (conda and pip sections)."""
    import re

    import yaml

    spec = yaml.safe_load(Path(env_file).read_text()) or {}
    names = set()
    for dep in spec.get("dependencies", []):
        for line in dep.get("pip", []) if isinstance(dep, dict) else [dep]:
            if isinstance(line, str) and not line.startswith("-"):
                names.add(re.split(r"[\s=<>!~\[;]", line.strip(), maxsplit=1)[0].lower().replace("_", "-"))
    return names


def in_process(cell: CellConfig) -> bool:
    """Whether the launcher trains ``cell`` in its own process: one process and no accelerate config."""
    return cell.num_processes == 1 and cell.accelerate_config is None


def launch_command(cell: CellConfig, worker: list[str], python: str = sys.executable) -> list[str]:
    """``accelerate launch`` of ``cell``'s processes, each running ``python *worker``."""
    # port 0: the rendezvous store binds a free port itself. accelerate checks its default 29500 before
    # torchrun binds it, so two multi-process jobs starting together on one node (a shared GPU node, the
    # rehearsal's single-node cluster) can both take it and one fails with EADDRINUSE
    launch = [python, "-m", "balagg.train.agent", "--num_processes", str(cell.num_processes),
              "--main_process_port", "0"]
    if cell.accelerate_config is not None:
        if not Path(cell.accelerate_config).is_file():
            raise ValueError(f"cell config: accelerate_config {cell.accelerate_config} does not exist")
        launch += ["--config_file", cell.accelerate_config]
    else:
        launch += ["--multi_gpu"]
    return [*launch, *worker]


def launch(cell: CellConfig, workdir: str | Path, manifest: str | Path, worker: list[str],
           invalidate: list[str] = ()) -> int:
    """Train ``cell`` (module docstring) and return the exit status. In this process: :func:`train
    <balagg.train.run.train>`, which holds the work directory's lock; else :func:`launch_command` with
    ``worker`` under :func:`run_launched`. The job's deadline (balagg.train.deadline.job_deadline: Slurm's
    end of the job, or its start plus the cell's time limit, the start being this call's unless the
    environment names an earlier one) is worked out once here and handed to every process; when it leaves
    no room for the cycle the previous attempt stopped before (balagg.train.deadline.too_late_to_start),
    nothing starts and the status is 75."""
    from balagg.train.deadline import DEADLINE_ENV, EXIT_RESUMABLE, START_ENV, job_deadline, too_late_to_start

    os.environ.setdefault(START_ENV, repr(time.time()))
    if cell.time_limit_minutes is not None:
        limit_s = 60.0 * cell.time_limit_minutes
        deadline = job_deadline(limit_s)
        if deadline is not None:
            os.environ[DEADLINE_ENV] = repr(deadline)
        reason = too_late_to_start(_read_stopped(CellDir(workdir)), deadline, limit_s)
        if reason is not None:  # its stopped.json stays for the next attempt
            print(f"{workdir}: {reason}", file=sys.stderr)
            return EXIT_RESUMABLE
    if in_process(cell):
        from balagg.train.run import train

        return train(cell, workdir, manifest, invalidate=invalidate)
    return run_launched(launch_command(cell, worker), workdir, invalidate=invalidate)


def _read_stopped(cell_dir: CellDir) -> dict | None:
    """The previous attempt's ``stopped.json`` (None: absent or unreadable)."""
    import json

    try:
        return json.loads(cell_dir.stopped.read_text())
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------------------------------
# The launcher owns its children: they die with it, it forwards stop signals, it holds the lock.
# --------------------------------------------------------------------------------------------------

def run_launched(command: list[str], workdir: str | Path, invalidate: list[str] = ()) -> int:
    """Run ``command`` (accelerate launching a cell's ranks; a single trainer where a test calls it) as this
    process's child, holding the
    work directory's lock for it:

    - the child gets PR_SET_PDEATHSIG=SIGKILL and marks its own trainer processes likewise
      (``$BALAGG_LAUNCHED``), so ``kill -9`` of this launcher ends the whole tree;
    - the stop signals (SIGTERM, SIGUSR1, SIGURG: balagg.processes.STOP_SIGNALS) are forwarded to the child,
      a trainer that stops at its next resumable checkpoint (balagg.train.deadline) or the agent of several
      (balagg.train.agent), which hands them to every rank; SIGINT too, which ends the training at once
      (KeyboardInterrupt in a trainer; the agent ends its ranks); the launcher waits for the child;
    - the lock (an flock on ``train.lock``) is held by the launcher and inherited by the child, so a
      second trainer on the folder is refused while either lives;
    - ``invalidate`` paths are removed once the lock is held, before the child starts;
    - the child's exit status is returned; a child that stopped early (``stopped.json`` written by this
      attempt) returns :data:`~balagg.train.deadline.EXIT_RESUMABLE` even through accelerate.
    """
    from balagg.train.deadline import EXIT_RESUMABLE

    cell_dir = CellDir(workdir)
    with exclusive(cell_dir.root) as lock_fd:
        cell_dir.stopped.unlink(missing_ok=True)
        remove_paths(list(invalidate))
        env = {**os.environ, LOCKED_ENV: str(cell_dir.root.resolve()), OWNED_ENV: "1"}
        child = subprocess.Popen(command, env=env, pass_fds=(lock_fd,), preexec_fn=die_with_parent)
        previous = {number: signal.signal(number, lambda n, f: child.send_signal(n))
                    for number in (*STOP_SIGNALS, signal.SIGINT)}
        try:
            code = child.wait()
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
        if code != 0 and cell_dir.stopped.exists():
            return EXIT_RESUMABLE
        return exit_status(code)
