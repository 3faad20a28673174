"""The command that trains a cell on its hardware: plain ``python -m balagg train`` for one process without
an accelerate config (CPU, one GPU), else ``accelerate launch`` with the cell's ``accelerate_config``
(configs/accelerate/*.yaml) and ``num_processes``."""

from __future__ import annotations

import sys
from pathlib import Path

from balagg.train.config import CellConfig


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
