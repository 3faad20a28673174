"""Work-directory layout of one training cell and the atomic file operations on it (docs/files.md); the
names come from :mod:`balagg.contract`.

    DIR/metrics.jsonl                  one line per optimiser step
    DIR/checkpoints/step-{N:06d}/      weights-only HF model + tokenizer (evaluation)
    DIR/state/checkpoint-{N}/          TRL/Trainer resumable state (model, optimiser, scheduler, RNG)
    DIR/train.log                      plain log lines
    DIR/mlflow_run_id                  the cell's MLflow run, resumed after a restart
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from balagg import contract
from balagg.io import atomic_write_text, json_line


class CellDir:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @property
    def metrics(self) -> Path:
        return self.root / contract.METRICS_FILE

    @property
    def checkpoints(self) -> Path:
        return self.root / contract.CHECKPOINTS_DIR

    @property
    def state(self) -> Path:
        return self.root / contract.STATE_DIR

    @property
    def log(self) -> Path:
        return self.root / contract.TRAIN_LOG_FILE

    @property
    def mlflow_run_id(self) -> Path:
        return self.root / contract.MLFLOW_RUN_ID_FILE

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / contract.step_dirname(step)

    def eval_checkpoints(self) -> list[tuple[int, Path]]:
        """Complete weights-only checkpoints (they appear only by atomic rename), by step."""
        if not self.checkpoints.is_dir():
            return []
        found = []
        for path in self.checkpoints.glob(contract.STEP_DIR_PREFIX + "*"):
            step = contract.parse_step_dirname(path.name, strict=True)
            if path.is_dir() and step is not None:
                found.append((step, path))
        return sorted(found)

    def latest_resumable(self) -> Path | None:
        """The newest *complete* resumable checkpoint: Trainer writes trainer_state.json last, so a
        checkpoint counts only if that file exists and parses (kill -9 can leave partial ones)."""
        best: tuple[int, Path] | None = None
        if not self.state.is_dir():
            return None
        for path in self.state.glob(contract.RESUMABLE_PREFIX + "*"):
            suffix = path.name.removeprefix(contract.RESUMABLE_PREFIX)
            if not suffix.isdigit():
                continue
            try:
                json.loads((path / contract.TRAINER_STATE_FILE).read_text())
            except (OSError, ValueError):
                continue
            if best is None or int(suffix) > best[0]:
                best = (int(suffix), path)
        return best[1] if best else None


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """metrics.jsonl lines; a torn last line (kill -9 mid-append) is dropped."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            break
    return rows


def truncate_metrics(path: str | Path, last_step: int) -> list[dict[str, Any]]:
    """Keep only the lines with step <= last_step (the resumed checkpoint), atomically."""
    rows = [row for row in read_metrics(path) if row.get("step", math.inf) <= last_step]
    atomic_write_text(path, "".join(json_line(row) for row in rows))
    return rows


def append_metrics(path: str | Path, row: dict[str, Any]) -> None:
    """Append one line and fsync. A crash can at worst leave a torn last line, which read_metrics drops
    and the resume truncates away."""
    with open(path, "a") as handle:
        handle.write(json_line(row))
        handle.flush()
        os.fsync(handle.fileno())
