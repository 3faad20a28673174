"""`snakemake --profile slurm` on a real Slurm cluster: the default target's jobs go through sbatch,
land in the partitions the environment names, and write what a local run writes.

Needs the throw-away cluster of `.ci/slurm-up` (root; Debian's slurm-wlm + munge): partitions `cpu`
(default) and `gpu` with fake GPUs of type `fake`. `.ci/run-slurm` brings it up, runs these tests and
tears it down. Skipped, with the reason, when no such cluster answers."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurm_helpers import LOCAL_PROFILE, REPO, copy_workflow, parse_profile, resources_of, snakemake

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
    """`scontrol show job` as a dict (finished jobs stay listed for MinJobAge = 300 s)."""
    out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, check=True).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def expected_weights_report() -> str:
    """What `python -m balagg weights` prints for the default config's example group, run here directly."""
    example = yaml.safe_load((REPO / "configs" / "default.yaml").read_text())["weights_example"]
    args = ["--rewards", ",".join(map(str, example["rewards"])), "--lengths", ",".join(map(str, example["lengths"]))]
    return subprocess.run([sys.executable, "-m", "balagg", "weights", *args], capture_output=True, text=True,
                          check=True).stdout


def run_default_target(work: Path, *extra: str) -> tuple[subprocess.CompletedProcess, list[tuple[str, Path]]]:
    result = snakemake("--profile", "slurm", "--profile", str(LOCAL_PROFILE), *extra, cwd=work, env=CLUSTER_ENV,
                       timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return result, [(job_id, Path(log)) for job_id, log in SUBMITTED.findall(result.stderr)]


def test_default_target_runs_as_slurm_jobs_and_writes_the_report(tmp_path):
    work = copy_workflow(tmp_path)
    result, jobs = run_default_target(work)

    assert len(jobs) == 1, f"expected one sbatch submission (weights_example), got {jobs}\n{result.stderr[-3000:]}"
    job_id, slurm_log = jobs[0]
    record = job_record(job_id)
    assert record["JobState"] == "COMPLETED"
    assert record["Partition"] == "cpu" and record["Account"] == "balaggci"
    assert record["Comment"].startswith("rule_weights_example")
    assert record["WorkDir"] == str(work)
    # kept by the local profile (slurm-keep-successful-logs); it shows the inner job ran our rule
    assert slurm_log.is_file() and "rule weights_example:" in slurm_log.read_text()

    report = (work / "results/default/aggregation/weights_example.txt").read_text()
    assert report == expected_weights_report()
    assert (work / "results/default/logs/weights_example.log").exists()

    again = snakemake("--profile", "slurm", "--profile", str(LOCAL_PROFILE), cwd=work, env=CLUSTER_ENV, timeout=120)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    assert not SUBMITTED.search(again.stderr)


def test_gpu_request_of_the_profile_is_granted_by_slurm(tmp_path, monkeypatch):
    """The profile's GPU-rule settings (GPU partition and type), plus one GPU as the workflow's train
    rule declares it, applied to the default target's rule: Slurm must allocate a `fake` GPU on `gpu`."""
    for name, value in CLUSTER_ENV.items():
        monkeypatch.setenv(name, value)
    train = resources_of(parse_profile(), "train")
    assert train == {"slurm_partition": "'gpu'", "gpu_model": "'fake'"}
    overrides = [f"weights_example:{key}={value}" for key, value in {**train, "gpu": "1"}.items()]

    work = copy_workflow(tmp_path)
    _, jobs = run_default_target(work, "--set-resources", *overrides)

    assert len(jobs) == 1
    record = job_record(jobs[0][0])
    assert record["JobState"] == "COMPLETED" and record["Partition"] == "gpu"
    assert record["TresPerJob"] == "gres:gpu:fake:1"
    assert (work / "results/default/aggregation/weights_example.txt").read_text() == expected_weights_report()
