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
