"""The command that trains a cell on its hardware: plain ``python -m balagg train`` for one process without
an accelerate config (CPU, one GPU), else ``accelerate launch`` with the cell's ``accelerate_config``
(configs/accelerate/*.yaml) and ``num_processes``, run through :mod:`balagg.train.agent` so that a stop
signal reaches every rank."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from balagg.errors import exit_status
from balagg.processes import die_with_parent
from balagg.train.config import CellConfig
from balagg.train.files import LOCKED_ENV, CellDir, exclusive

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


def launch_command(cell: CellConfig, cell_path: str | Path, workdir: str | Path, manifest: str | Path,
                   python: str = sys.executable) -> list[str]:
    train = ["-m", "balagg", "train", "--cell", str(cell_path), "--workdir", str(workdir), "--out", str(manifest)]
    if cell.num_processes == 1 and cell.accelerate_config is None:
        return [python, *train]
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
    return [*launch, *train]


# --------------------------------------------------------------------------------------------------
# The launcher owns its children: they die with it, it forwards stop signals, it holds the lock.
# --------------------------------------------------------------------------------------------------

OWNED_ENV = "BALAGG_LAUNCHED"
"""Set for the children of :func:`run_launched`; each trainer process then dies with its parent."""


def die_with_launcher() -> None:
    """In a trainer process started under :func:`run_launched` (``$BALAGG_LAUNCHED`` set, directly or
    through ``accelerate launch``): :func:`die_with_parent`, so that the launcher's death reaches every
    process of the tree. Elsewhere (a trainer run by hand) nothing."""
    if os.environ.get(OWNED_ENV):
        die_with_parent()


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
    - SIGTERM / SIGUSR1 are forwarded to the child, a trainer that stops at its next resumable checkpoint
      (balagg.train.deadline) or the agent of several (balagg.train.agent), which hands them to every
      rank; SIGINT too, which ends the training at once (KeyboardInterrupt in a trainer; the agent ends
      its ranks); the launcher waits for the child;
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
        return exit_status(code)


def distributed_report(accelerator, accelerate_config: str | None) -> dict:
    """What the launched job really runs, next to what its accelerate config asked for.

    accelerate turns a config's FSDP into FSDP only on accelerator backends: on CPU (gloo) the same
    ``accelerate launch`` runs plain DDP (MULTI_CPU) without saying so. The manifest records both and
    ``fell_back`` says when they differ, so a rehearsal on CPU never passes for an FSDP run."""
    import yaml

    requested = None
    if accelerate_config:
        requested = str((yaml.safe_load(Path(accelerate_config).read_text()) or {}).get("distributed_type"))
    actual = getattr(accelerator.distributed_type, "value", str(accelerator.distributed_type))
    fsdp_plugin = getattr(accelerator.state, "fsdp_plugin", None)
    return {
        "requested": requested,
        "distributed_type": actual,
        "fsdp_version": getattr(fsdp_plugin, "fsdp_version", None) if actual == "FSDP" else None,
        "num_processes": accelerator.num_processes,
        "device": accelerator.device.type,
        "mixed_precision": accelerator.mixed_precision,
        "fell_back": requested is not None and requested != actual,
    }
