"""Work-directory layout of one training cell and the atomic file operations on it (docs/files.md); the
names come from :mod:`balagg.layout`.

    DIR/metrics.jsonl                  one line per optimiser step
    DIR/checkpoints/step-{N:06d}/      weights-only HF model + tokenizer (evaluation; steps after 0, in the
                                       training's compute dtype: balagg.train.eval_checkpoints)
    DIR/state/checkpoint-{N}/          TRL/Trainer resumable state (model, optimiser, scheduler, RNG; under
                                       FSDP2 each rank writes its own shards, torch.distributed.checkpoint)
    DIR/train.log                      plain log lines
    DIR/mlflow_run_id                  the cell's MLflow run, resumed after a restart
    DIR/train.lock                     held (flock) by the one trainer working on DIR; names its pid
    DIR/verifier.json                  the training verifier's counts so far, with each resumable checkpoint
    DIR/stopped.json                   why the last attempt stopped early at a resumable checkpoint
    DIR/trained.json                   the step a finished training reached (written before state/ is removed)
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from balagg.errors import with_filename
from balagg.io import atomic_write_text, json_line, read_jsonl
from balagg.layout import (
    CHECKPOINTS_DIR,
    METRICS_FILE,
    MLFLOW_RUN_ID_FILE,
    RESUMABLE_PREFIX,
    STATE_DIR,
    STEP_DIR_PREFIX,
    STOPPED_FILE,
    TRAIN_LOCK_FILE,
    TRAIN_LOG_FILE,
    TRAINED_FILE,
    TRAINER_STATE_FILE,
    VERIFIER_COUNTS_FILE,
    parse_step_dirname,
    step_dirname,
)
from balagg.processes import die_with_parent


class CellDir:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @property
    def metrics(self) -> Path:
        return self.root / METRICS_FILE

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS_DIR

    @property
    def state(self) -> Path:
        return self.root / STATE_DIR

    @property
    def log(self) -> Path:
        return self.root / TRAIN_LOG_FILE

    @property
    def mlflow_run_id(self) -> Path:
        return self.root / MLFLOW_RUN_ID_FILE

    @property
    def lock(self) -> Path:
        return self.root / TRAIN_LOCK_FILE

    @property
    def verifier(self) -> Path:
        return self.root / VERIFIER_COUNTS_FILE

    @property
    def stopped(self) -> Path:
        return self.root / STOPPED_FILE

    @property
    def trained(self) -> Path:
        return self.root / TRAINED_FILE

    def trained_step(self) -> int | None:
        """The step ``trained.json`` records a finished training at (None: absent or unreadable)."""
        try:
            step = json.loads(self.trained.read_text())["step"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return step if isinstance(step, int) else None

    def remove_state(self) -> None:
        """Remove the resumable state: ``state/`` is first renamed to a hidden folder (one atomic step, after
        which no resume can find a part of it), then deleted; a kill meanwhile leaves the hidden folder, which
        the next call deletes."""
        trash = self.root / f".{STATE_DIR}.removing"
        if trash.exists():
            shutil.rmtree(trash)
        if self.state.exists():
            self.state.rename(trash)
            shutil.rmtree(trash)

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / step_dirname(step)

    def eval_checkpoints(self) -> list[tuple[int, Path]]:
        """Complete weights-only checkpoints (they appear only by atomic rename), by step."""
        if not self.checkpoints.is_dir():
            return []
        found = []
        for path in self.checkpoints.glob(STEP_DIR_PREFIX + "*"):
            step = parse_step_dirname(path.name, strict=True)
            if path.is_dir() and step is not None:
                found.append((step, path))
        return sorted(found)

    def latest_resumable(self) -> Path | None:
        """The newest *complete* resumable checkpoint: Trainer writes trainer_state.json last, so a
        checkpoint counts only if that file exists and parses (kill -9 can leave partial ones)."""
        best: tuple[int, Path] | None = None
        if not self.state.is_dir():
            return None
        for path in self.state.glob(RESUMABLE_PREFIX + "*"):
            suffix = path.name.removeprefix(RESUMABLE_PREFIX)
            if not suffix.isdigit():
                continue
            try:
                json.loads((path / TRAINER_STATE_FILE).read_text())
            except (OSError, ValueError):
                continue
            if best is None or int(suffix) > best[0]:
                best = (int(suffix), path)
        return best[1] if best else None


class WorkdirBusy(ValueError):
    """Another trainer holds the work directory's lock."""


LOCKED_ENV = "BALAGG_TRAIN_LOCKED"
"""Set by the launcher to the work directory whose lock it holds for its children."""

OWNED_ENV = "BALAGG_LAUNCHED"
"""Set by the launcher (balagg.train.launch.run_launched) for its children: each trainer process then dies
with its parent."""


def die_with_launcher() -> None:
    """In a trainer process under the launcher (``$BALAGG_LAUNCHED`` set, directly or through ``accelerate
    launch``): :func:`balagg.processes.die_with_parent`, so that the launcher's death reaches every process
    of the tree. Elsewhere (a trainer run by hand) nothing."""
    if os.environ.get(OWNED_ENV):
        die_with_parent()


@contextmanager
def exclusive(root: str | Path) -> Iterator[int]:
    """Hold ``root/train.lock`` (an flock, released by the kernel when the holder dies, even by kill -9)
    for the block (it yields the locked descriptor, which a child can inherit to keep the lock); a
    second trainer on the same folder gets :class:`WorkdirBusy` naming the holder.
    The lock file stays (removing it would let two holders lock two different inodes)."""
    cell = CellDir(root)
    cell.root.mkdir(parents=True, exist_ok=True)
    fd = os.open(cell.lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown process"
        os.close(fd)
        raise WorkdirBusy(f"{cell.root} is in use by another trainer ({holder}); a second one would corrupt "
                          "the cell: wait for it to end or stop it") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since "
                      f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n".encode(), 0)
        yield fd
    finally:
        os.close(fd)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """metrics.jsonl lines; a torn last line (kill -9 mid-append) is dropped, a bad line elsewhere is
    an error naming the file and line (balagg.io.read_jsonl, ``torn-tail``)."""
    path = Path(path)
    if not path.exists():
        return []
    return list(read_jsonl(path, bad_lines="torn-tail"))


def truncate_metrics(path: str | Path, last_step: int) -> list[dict[str, Any]]:
    """Keep only the lines with step <= last_step (the resumed checkpoint), atomically."""
    rows = [row for row in read_metrics(path) if row.get("step", math.inf) <= last_step]
    atomic_write_text(path, "".join(json_line(row) for row in rows))
    return rows


def append_metrics(path: str | Path, row: dict[str, Any]) -> None:
    """Append one line and fsync. A crash can at worst leave a torn last line, which read_metrics drops
    and the resume truncates away."""
    try:
        with open(path, "a") as handle:
            handle.write(json_line(row))
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as error:
        raise with_filename(error, path) from error


def sync_tree(root: str | Path) -> None:
    """fsync every file under ``root`` and every folder, ``root`` included: what was written there is on the
    disk before anything that depends on it is removed."""
    root = Path(root)
    for path in sorted(root.rglob("*"), reverse=True):
        _fsync(path)
    _fsync(root)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as error:
        if not (error.errno == errno.EINVAL and path.is_dir()):  # a file system that cannot sync folders
            raise with_filename(error, path) from error
    finally:
        os.close(fd)


def remove_paths(paths: list[str]) -> None:
    """Remove each file or folder (missing ones are fine)."""
    for path in map(Path, paths):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
