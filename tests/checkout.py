"""A scratch copy of the workflow as a clone has it: what every workflow test (and tests/chaos.py) runs in.

One list of what a run needs, so a new top-level folder of the workflow (say `profiles/`) reaches every
test at once: jobs import the copy's own `src/` (the Snakefile's shell prefix), `--profile slurm` is
looked up in the cwd, and Snakemake reads the workflow profile `profiles/default/` beside the Snakefile.
"""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_FILES = ("Snakefile", "profiles", "workflow", "configs", "slurm", "envs", "analysis", "src")


def copy_workflow(dest: Path) -> Path:
    """Copy :data:`WORKFLOW_FILES` of the repository into ``dest`` (an existing folder); returns it."""
    dest = Path(dest)
    for name in WORKFLOW_FILES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, dest / name)  # with src/'s .pyc: still valid (copytree keeps mtimes)
        else:
            shutil.copy(source, dest / name)
    return dest
