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
            stuck = what_is_running(cwd)  # before the interrupt cancels the jobs
            proc.send_signal(signal.SIGINT)
            try:
                out, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            err += f"\n[test] snakemake timed out after {timeout} s and was interrupted\n{stuck}"
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def what_is_running(cwd: Path, lines: int = 15) -> str:
    """What a workflow that stopped progressing is waiting on: the Slurm queue, the last ``lines`` lines
    of each queued job's Snakemake Slurm log and of the rule logs that job names, and the Python
    processes with their states (so a hung job can be told from a pending one)."""
    def run(*command: str) -> str:
        try:
            return subprocess.run(command, capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"{command[0]}: {error}\n"

    def tail(path: Path) -> str:
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as error:
            return str(error)

    report = ["[test] the Slurm queue:", run("squeue", "-h", "-o", "%i %T %M %R %j")]
    for job_id in (line.split()[0] for line in report[1].splitlines() if line.strip()):
        for log in Path(cwd, ".snakemake", "slurm_logs").rglob(f"{job_id}.log"):
            text = tail(log)
            report.append(f"[test] {log.relative_to(cwd)}:\n{text}")
            for rule_log in sorted({word for word in text.split() if word.endswith(".log") and "/logs/" in word}):
                report.append(f"[test] {rule_log}:\n{tail(Path(cwd, rule_log))}")
    processes = [line[:220] for line in run("ps", "-eo", "pid,ppid,stat,etime,args").splitlines()
                 if "python" in line and "ps -eo" not in line]
    report.append("[test] Python processes (pid ppid state elapsed command):\n" + "\n".join(processes))
    return "\n".join(report)
