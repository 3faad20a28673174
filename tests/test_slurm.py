"""`snakemake --profile slurm` on a real Slurm cluster: the smoke grid's jobs go through sbatch, land in
the partitions the environment names (GPU rules with their GPUs), and produce the analysis.

Needs the throw-away cluster of `.ci/slurm-up` (root; Debian's slurm-wlm + munge): partitions `cpu`
(default) and `gpu` with fake GPUs of type `fake`. `.ci/run-slurm` brings it up, runs these tests and
tears it down. Skipped, with the reason, when no such cluster answers."""

from __future__ import annotations

import csv
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from slurm_helpers import LOCAL_PROFILE, copy_workflow, snakemake

# how a real cluster would be configured (slurm/config.v8+.yaml reads these)
CLUSTER_ENV = {
    "BALAGG_SLURM_PARTITION": "cpu",
    "BALAGG_SLURM_GPU_PARTITION": "gpu",
    "BALAGG_SLURM_ACCOUNT": "balaggci",
    "BALAGG_SLURM_GPU_MODEL": "fake",
}
SUBMITTED = re.compile(r"Job \d+ has been submitted with SLURM jobid (\d+) \(log: (\S+)\)")


def why_no_cluster() -> str | None:
    if shutil.which("sinfo") is None:
        return "no Slurm client (sinfo) on PATH: start a local cluster with .ci/slurm-up (as root)"
    try:
        # ping answers at once either way; sinfo waits ~10 s for a controller that is down
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=30)
        result = subprocess.run(["sinfo", "-h", "-o", "%P %a"], capture_output=True, text=True, timeout=30) \
            if ping.returncode == 0 else ping
    except subprocess.TimeoutExpired:
        return "the Slurm controller did not answer within 30 s: is slurmctld running? (.ci/slurm-up)"
    if result.returncode != 0:
        reason = (result.stderr or result.stdout).strip().splitlines()[0][:200]
        return f"no Slurm cluster answers ({reason}): start one with .ci/slurm-up"
    up = {line.split()[0].rstrip("*") for line in result.stdout.splitlines() if line.split()[1:] == ["up"]}
    if not {"cpu", "gpu"} <= up:
        return f"the cluster lacks the up partitions cpu and gpu of .ci/slurm-up (has {sorted(up)})"
    return None


NO_CLUSTER = why_no_cluster()
if NO_CLUSTER and os.environ.get("BALAGG_REQUIRE_SLURM") == "1":  # set by .ci/run-slurm: a skip would hide it
    raise RuntimeError(f"BALAGG_REQUIRE_SLURM=1 but {NO_CLUSTER}")
pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.skipif(NO_CLUSTER is not None, reason=NO_CLUSTER or "")]


def job_record(job_id: str) -> dict[str, str]:
    """`scontrol show job` as a dict (finished jobs stay listed for MinJobAge = 1800 s on .ci/slurm-up's cluster)."""
    out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, check=True).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


# The smoke grid, with one (fake) GPU per training and generation job, as a GPU model would ask.
GPU_SMOKE = """\
models:
  tiny-s:
    path: tinyworld
    tinyworld_size: tiny-s
    math_template: "{problem}"
    code_template: "{problem}"
    train_resources: {gpus: 1}
    generate_resources: {gpus: 1}
"""


def run_smoke(work: Path) -> tuple[subprocess.CompletedProcess, list[tuple[str, Path]]]:
    (work / "gpu-smoke.yaml").write_text(GPU_SMOKE)
    result = snakemake("--profile", "slurm", "--profile", str(LOCAL_PROFILE),
                       "--configfile", "configs/smoke.yaml", "gpu-smoke.yaml", cwd=work, env=CLUSTER_ENV, timeout=1800)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return result, [(job_id, Path(log)) for job_id, log in SUBMITTED.findall(result.stderr)]


def test_smoke_grid_runs_as_slurm_jobs(tmp_path):
    work = copy_workflow(tmp_path)
    result, jobs = run_smoke(work)

    records = {job_id: job_record(job_id) for job_id, _ in jobs}
    by_rule: dict[str, list[dict]] = {}
    for record in records.values():
        by_rule.setdefault(record["Comment"].removeprefix("rule_").split("_wildcards")[0], []).append(record)
    assert all(r["JobState"] == "COMPLETED" for r in records.values()), records
    assert all(r["Account"] == "balaggci" and r["WorkDir"] == str(work) for r in records.values())
    # every cell trained in its own job on the GPU partition with its fake GPU; scoring stayed on CPU
    assert len(by_rule["train"]) == 3 and len(by_rule["generate"]) == 3 * 2 + 1
    for record in by_rule["train"] + by_rule["generate"]:
        assert record["Partition"] == "gpu" and record["TresPerJob"] == "gres:gpu:fake:1", record
    assert all(r["Partition"] == "cpu" for r in by_rule["score"])

    # the jobs' outputs: a Table 1 with one finite row per aggregator
    with (work / "results/smoke/analysis/table1.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(row["aggregator"] for row in rows) == ["balanced-agg", "seq-agg", "token-agg"]
    assert all(math.isfinite(float(row["last_acc@8"])) for row in rows)

    again = snakemake("--profile", "slurm", "--profile", str(LOCAL_PROFILE), "--configfile", "configs/smoke.yaml",
                      "gpu-smoke.yaml", cwd=work, env=CLUSTER_ENV, timeout=120)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    assert not SUBMITTED.search(again.stderr)


# One cell trained long enough to be signalled.
LONG_CELL = """\
train:
  total_steps: 24
"""
CELL = Path("results/smoke/tiny-s/arith-long/balanced-agg/seed0")


def test_the_profiles_warning_signal_reaches_the_trainer_and_ends_nothing(tmp_path):
    """Slurm sends --signal's signal (the profile asks for SIGURG an hour before a train job's limit) to every
    process of the job's steps, as `scancel --signal` without --batch does: under Snakemake's Slurm plugin
    that is Snakemake in the job, the rule's shell, the launcher and the trainer. They all live on (SIGUSR1
    sent so ends Snakemake in the job and fails it); the trainer takes the warning, and with its seconds-long
    cycles goes on within the hour and finishes in the same job, each step once, keeping no resumable state.
    (What the trainer does with the warning: tests/test_exactly_once.py.)"""
    import json
    import sys
    import time

    work = copy_workflow(tmp_path)
    (work / "long.yaml").write_text(LONG_CELL)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, **CLUSTER_ENV, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = [str(bin_dir / "snakemake"), str(CELL / "manifest.json"), "--profile", "slurm", "--profile",
               str(LOCAL_PROFILE), "--configfile", "configs/smoke.yaml", "long.yaml"]
    metrics = work / CELL / "train" / "metrics.jsonl"
    with subprocess.Popen(command, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as run:
        deadline = time.monotonic() + 900
        signalled = None
        while signalled is None:
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()[1][-3000:]
            lines = metrics.read_text().splitlines() if metrics.exists() else []
            if len(lines) >= 2:
                queue = subprocess.run(["squeue", "-h", "-o", "%i %k"], capture_output=True, text=True).stdout
                signalled = next(line.split()[0] for line in queue.splitlines() if "rule_train" in line)
                subprocess.run(["scancel", "--signal=URG", signalled], check=True)
            time.sleep(0.5)
        out, err = run.communicate(timeout=900)
    assert run.returncode == 0, (out + err)[-4000:]
    assert job_record(signalled)["JobState"] == "COMPLETED"
    slurm_log = next((work / ".snakemake" / "slurm_logs" / "rule_train").rglob(f"{signalled}.log")).read_text()
    assert "Trying to restart job" not in slurm_log  # one attempt: nothing stopped it
    log = (work / CELL / "train" / "train.log").read_text()
    assert log.count("SIGURG received") >= 1 and "stopping at step" not in log
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert steps == list(range(1, 25))
    assert not (work / CELL / "train" / "state").exists()
    assert json.loads((work / CELL / "manifest.json").read_text())["steps"] == 24
