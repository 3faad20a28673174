"""What a campaign produces: the paths that ``rule all`` and the analysis rules ask for."""

from __future__ import annotations

import os

from balagg.grid.grid import Grid
from balagg.layout import (
    ANALYSIS_DIR,
    CURVE_FILE,
    DATA_DIR,
    EVAL_DIR,
    EVAL_TRACKING_FILE,
    EXTERNAL_RUN,
    MODEL_CARD_FILE,
)

CURVE = f"{EVAL_DIR}/{CURVE_FILE}"
"""A run's evaluation curve, relative to its folder (a cell's, or an external checkpoint's)."""
EVAL_TRACKING = f"{EVAL_DIR}/{EVAL_TRACKING_FILE}"
"""What marks a run's evaluation logged to MLflow, relative to its folder."""

ANALYSIS_ARTIFACTS = {
    "table1": ("csv", "md", "tex"),
    "figure1": ("png", "pdf"),
    "figure2": ("png", "pdf"),
    "figure3": ("png", "pdf"),
    "diagnosis": ("md", "csv"),
    "comparison": ("md", "csv"),
    "mechanism": ("png", "pdf", "csv"),
}
"""The analysis rules' artifacts (file stem: formats) in the campaign's analysis folder; Table 1 also for a
campaign without a grid (external checkpoints only), the rest only with one."""
GRID_ONLY = ("figure1", "figure2", "figure3", "diagnosis", "comparison", "mechanism")


def external_run(grid: Grid, name: str) -> str:
    """The folder of an external checkpoint's evaluation: results/{campaign}/{name}/external/."""
    return os.path.join(grid.results, name, EXTERNAL_RUN)


def external_paths(grid: Grid, name: str) -> list[str]:
    """``name`` (relative to an external checkpoint's run folder) for every external checkpoint."""
    return [os.path.join(external_run(grid, checkpoint), name) for checkpoint in grid.checkpoints]


def analysis_path(grid: Grid, stem: str, fmt: str) -> str:
    """An artifact's file in the campaign's analysis folder; KeyError for one not in ``ANALYSIS_ARTIFACTS``
    (what the analysis rules make is what ``rule all`` asks for)."""
    if fmt not in ANALYSIS_ARTIFACTS[stem]:
        raise KeyError(f"{stem}.{fmt} is not an analysis artifact")
    return f"{os.path.join(grid.results, ANALYSIS_DIR)}/{stem}.{fmt}"


def analysis_targets(grid: Grid) -> list[str]:
    """Table 1 (the grid's cells and the external checkpoints), and, for a campaign with a grid, the figures,
    the diagnosis and the comparison of its cells."""
    stems = [stem for stem in ANALYSIS_ARTIFACTS if grid.cells or stem not in GRID_ONLY]
    return [analysis_path(grid, stem, fmt) for stem in stems for fmt in ANALYSIS_ARTIFACTS[stem]]


def campaign_targets(grid: Grid) -> list[str]:
    """Everything ``rule all`` asks for except the HTML report, which is built last from all of it.

    The report rule runs a nested ``snakemake --report`` over the same DAG, and that refuses to start
    while any file of it is still being written (Snakemake's incomplete marker), so the report must
    wait for every one of these, not only the analysis artifacts it embeds.
    """
    return [
        *grid.cell_paths(CURVE),
        *grid.cell_paths(EVAL_TRACKING),
        *external_paths(grid, CURVE),
        *external_paths(grid, EVAL_TRACKING),
        *analysis_targets(grid),
        f"{grid.results}/{ANALYSIS_DIR}/{EVAL_TRACKING_FILE}",
        *([f"{grid.results}/{DATA_DIR}/{MODEL_CARD_FILE}"] if grid.tinyworld_cards() else []),
    ]
