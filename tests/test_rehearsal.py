"""The rehearsal: configs/paper.yaml's code path at CI sizes (configs/rehearsal.yaml layered on it).

- `test_rehearsal_changes_only_sizes` (fast, no cluster): the overlay may set size keys only, so the
  models, datasets, benchmarks, launcher, accelerate config, templates and rewards stay the paper's.
- `test_rehearsal_through_the_slurm_profile` (local Slurm cluster of .ci/slurm-up; skipped without it,
  a failure under BALAGG_REQUIRE_SLURM=1): a hub cache holding tiny stand-ins under the paper's hub ids,
  then `snakemake --profile slurm --configfile configs/paper.yaml configs/rehearsal.yaml`: fetch (offline),
  data from the hub ids' snapshots, training through `accelerate launch` with fsdp2.yaml on 2 processes,
  step-0 evaluation of the hub models and of the last checkpoints, scoring, Table 1, figures, MLflow.
  It prints and asserts the distributed type each training really ran (accelerate runs FSDP configs
  as plain DDP on CPU), so the rehearsal never passes for an FSDP run.
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import pytest
import yaml

from slurm_helpers import LOCAL_PROFILE, REPO, copy_workflow, snakemake

SIZE_KEYS = {
    "campaign", "aggregators", "train_retries",
    "models.*.train_resources", "models.*.generate_resources",
    "train.num_generations", "train.prompts_per_step", "train.mini_batches", "train.micro_batch_size",
    "train.max_completion_length", "train.overlong_buffer_len", "train.total_steps", "train.eval_every",
    "train.save_every", "train.use_vllm", "train.verifier_workers",
    "eval.max_tokens", "eval.batch_size",
}
"""What the rehearsal may change: sizes (and use_vllm, which CI's CPUs cannot run; docs/cluster.md)."""


def leaf_keys(data: dict, prefix: tuple = ()) -> list[tuple]:
    """Key paths of `data`'s leaves (a model's resources count as one leaf)."""
    keys = []
    for key, value in data.items():
        path = (*prefix, key)
        if isinstance(value, dict) and not key.endswith("_resources"):
            keys += leaf_keys(value, path)
        else:
            keys.append(path)
    return keys


def test_rehearsal_changes_only_sizes():
    paper = yaml.safe_load((REPO / "configs" / "paper.yaml").read_text())
    overlay = yaml.safe_load((REPO / "configs" / "rehearsal.yaml").read_text())
    changed = {".".join(("models", "*", *path[2:]) if path[0] == "models" else path) for path in leaf_keys(overlay)}
    assert changed <= SIZE_KEYS, sorted(changed - SIZE_KEYS)
    assert set(overlay["models"]) <= set(paper["models"]), "the overlay must not add models"
    assert set(overlay["aggregators"]) <= set(paper["aggregators"])


def test_rehearsal_dag_builds_with_the_papers_settings(tmp_path):
    """Every cell's config is built and checked while the DAG is built (batch shape, group-preserving
    mini-batches, context): the rehearsal's sizes must pass the paper's own checks, no cluster needed."""
    checkout = copy_workflow(tmp_path)
    done = snakemake("-n", "--quiet", "rules", "--configfile", "configs/paper.yaml", "configs/rehearsal.yaml",
                     cwd=checkout)
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    assert "train" in done.stdout


# ---- on the local Slurm cluster

from test_slurm import CLUSTER_ENV, NO_CLUSTER, SUBMITTED, job_record  # noqa: E402



@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.skipif(NO_CLUSTER is not None, reason=NO_CLUSTER or "")
def test_rehearsal_through_the_slurm_profile(tmp_path, capsys):
    from balagg.campaign import load
    from balagg.tinyworld.hubcache import campaign_repos, fill_hub_cache, repo_folder

    (tmp_path / "work").mkdir()
    work = copy_workflow(tmp_path / "work")
    configs = [str(work / "configs" / "paper.yaml"), str(work / "configs" / "rehearsal.yaml")]
    config = load(configs).config
    hf_home = tmp_path / "hf"
    models, datasets = campaign_repos(config)
    fill_hub_cache(hf_home, models, datasets, train_problems=16, bench_problems=2)

    env = CLUSTER_ENV | {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    result = snakemake("--profile", "slurm", "--profile", str(LOCAL_PROFILE),
                       "--configfile", "configs/paper.yaml", "configs/rehearsal.yaml", cwd=work, env=env, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-12000:]
    results = work / "results" / config["campaign"]

    # every compute job went through sbatch and completed; train jobs asked for their GPUs on one node
    jobs = {job_id: job_record(job_id) for job_id, _ in SUBMITTED.findall(result.stderr)}
    by_rule: dict[str, list[dict]] = {}
    for record in jobs.values():
        by_rule.setdefault(record["Comment"].removeprefix("rule_").split("_wildcards")[0], []).append(record)
    assert all(r["JobState"] == "COMPLETED" for r in jobs.values()), jobs
    cells = len(config["models"]) * len(config["datasets"]) * len(config["aggregators"])
    assert len(by_rule["train"]) == cells and "fetch" not in by_rule  # fetch is local, on the submit host
    for record in by_rule["train"]:
        assert record["Partition"] == "gpu" and record["TresPerJob"] == "gres:gpu:fake:2" and record["NumNodes"] == "1"

    # fetch recorded the cache's revisions of every hub id
    fetched = {r["repo_id"]: r["commit"] for r in json.loads((results / "fetch.json").read_text())["repos"]}
    assert set(fetched) == set(models) | set(datasets.values())
    model_id = config["models"]["qwen3-1.7b"]["path"]
    assert fetched[model_id] == (repo_folder(hf_home, model_id, "model") / "refs" / "main").read_text()

    # training: the paper's launcher and accelerate config, and what accelerate really ran
    ran = {}
    for manifest_path in sorted(results.glob("*/*/*/seed*/manifest.json")):
        manifest = json.loads(manifest_path.read_text())
        assert manifest["config"]["model"] in models
        assert manifest["config"]["accelerate_config"] == config["train"]["accelerate_config"]
        assert manifest["config"]["time_limit_minutes"] == config["models"][manifest["model"]]["train_resources"]["runtime"]
        distributed = manifest["distributed"]
        assert distributed["num_processes"] == 2 and distributed["requested"] == "FSDP"
        # CPU: accelerate's FSDP needs an accelerator, so this is DDP over gloo, and says so
        assert distributed["distributed_type"] == ("FSDP" if distributed["device"] == "cuda" else "MULTI_CPU")
        assert distributed["fell_back"] == (distributed["device"] != "cuda")
        ran[manifest["cell"]] = distributed
    assert len(ran) == cells
    with capsys.disabled():
        print("\nrehearsal: what each training really ran (accelerate config asks for FSDP):")
        for cell, d in ran.items():
            print(f"  {cell}: {d['distributed_type']} on {d['num_processes']} {d['device']} processes, "
                  f"mixed precision {d['mixed_precision']}{' (FELL BACK from FSDP)' if d['fell_back'] else ''}")

    # step 0 of each hub model was evaluated from its cached snapshot
    for name, spec in config["models"].items():
        step0 = results / name / "initial" / "eval" / "step-000000"
        generation = json.loads((step0 / "generation.json").read_text())
        assert generation["source"] == spec["path"] and "/snapshots/" in generation["checkpoint"]
        assert (step0 / "summary.json").is_file()

    with (results / "analysis" / "table1.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["model"], r["dataset"]) for r in rows} == {(m, d) for m in config["models"] for d in config["datasets"]}
    assert all(math.isfinite(float(r["last_acc@8"])) for r in rows)
    for n in (1, 2, 3):
        assert (results / "analysis" / f"figure{n}.png").stat().st_size > 0
    assert json.loads((results / "analysis" / "mlflow.json").read_text())["status"] == "ok"
