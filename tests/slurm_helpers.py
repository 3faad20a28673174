"""Shared by the Slurm tests: read the profile as Snakemake does, and run the workflow in a scratch copy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from checkout import REPO, copy_workflow  # noqa: F401 - copy_workflow is re-exported to the Slurm tests

PROFILE = REPO / "slurm" / "config.v8+.yaml"
LOCAL_PROFILE = REPO / "tests" / "slurm-local"


def parse_profile(path: Path = PROFILE) -> dict:
    """The profile as Snakemake's own parser hands it to the CLI: {flag: value or ["k=v", ...]}.

    Environment variables are read now, so set them before calling."""
    from snakemake.profiles import ProfileConfigFileParser

    with open(path) as stream:
        return dict(ProfileConfigFileParser().parse(stream))


def resources_of(parsed: dict, rule: str) -> dict[str, str]:
    """`set-resources` entries of one rule as {resource: expression}."""
    out = {}
    for entry in parsed.get("set-resources", []):
        name, _, assignment = entry.partition(":")
        if name == rule:
            key, _, value = assignment.partition("=")
            out[key] = value
    return out


def snakemake(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the venv's snakemake with the venv first on PATH (rules call `python -m balagg`; sbatch
    --export=ALL carries PATH and PYTHONPATH into the jobs). On timeout it gets SIGINT, which makes
    Snakemake cancel its Slurm jobs (it ignores SIGTERM while it waits on them)."""
    bin_dir = Path(sys.executable).parent
    full_env = {**os.environ, **(env or {}), "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = [str(bin_dir / "snakemake"), *args]
    with subprocess.Popen(cmd, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                out, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            err += f"\n[test] snakemake timed out after {timeout} s and was interrupted"
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
