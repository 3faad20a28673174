"""The Snakemake entry point: the default target runs and produces what it names."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def snakemake(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run the venv's snakemake with the venv first on PATH, as `make demo` does (rules call `python`)."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([str(bin_dir / "snakemake"), "--snakefile", str(REPO / "Snakefile"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=env)


def copy_workflow(tmp_path: Path) -> Path:
    for name in ("Snakefile", "workflow", "configs"):
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    return tmp_path


def test_default_target_writes_the_weights_report(tmp_path):
    work = copy_workflow(tmp_path)
    result = snakemake("--cores", "1", cwd=work)
    assert result.returncode == 0, result.stderr[-3000:]
    report = (work / "results/default/aggregation/weights_example.txt").read_text()
    assert "balanced-agg" in report and "token-agg" in report
    assert (work / "results/default/logs/weights_example.log").exists()


def test_bad_config_stops_before_any_job_naming_the_key(tmp_path):
    work = copy_workflow(tmp_path)
    result = snakemake("--cores", "1", "--config", "campaign=bad name!", cwd=work)
    assert result.returncode != 0
    assert "campaign" in result.stderr
    assert not (work / "results").exists()
