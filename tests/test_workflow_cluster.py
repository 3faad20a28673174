"""What the paper grid needs on a cluster, checked without one: the accelerate config is
refused at DAG build when its backend is not importable, jobs run the checkout's code and read hub ids
offline from the cache that fetch filled, train jobs fit a partition's time limit on one node."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from checkout import REPO, copy_workflow
from test_workflow import job_counts, snakemake



@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the checkout, code included (jobs must import *its* src/, not the installed balagg)."""
    return copy_workflow(tmp_path)


def write_config(folder: Path, name: str, data: dict) -> str:
    (folder / name).write_text(yaml.safe_dump(data))
    return name


def test_paper_grid_uses_fsdp2_and_checkpoints_every_few_rollout_batches():
    """Resumable state every few rollout batches: what its save time allows (tests/test_plan.py,
    test_paper_save_every_keeps_the_saves_a_small_part_of_training)."""
    paper = yaml.safe_load((REPO / "configs" / "paper.yaml").read_text())
    train = paper["train"]
    assert yaml.safe_load((REPO / train["accelerate_config"]).read_text())["distributed_type"] == "FSDP"
    assert train["save_every"] <= 5 * train["mini_batches"] * train["num_iterations"]
    for spec in paper["models"].values():  # within a 24-48 h partition MaxTime; retries cover the rest
        assert spec["train_resources"]["runtime"] <= 2880


def test_a_deepspeed_config_is_refused_at_dag_build(checkout):
    """zero3.yaml needs deepspeed, which nothing installs; every train job died at launch."""
    (checkout / "zero3.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 8\n")
    override = write_config(checkout, "ds.yaml", {"train": {"accelerate_config": "zero3.yaml"}})
    result = snakemake("-n", "--configfile", "configs/paper.yaml", override, cwd=checkout, check=False)
    assert result.returncode != 0
    assert "accelerate config zero3.yaml needs deepspeed, which is not importable" in result.stdout + result.stderr


def test_conda_envs_are_read_for_the_check(tmp_path):
    from balagg.train.launch import check_accelerate_config, conda_env_packages

    gpu = conda_env_packages(REPO / "envs" / "gpu.yaml")
    assert {"torch", "trl", "vllm", "accelerate", "math-verify"} <= gpu and "deepspeed" not in gpu
    (tmp_path / "z.yaml").write_text("distributed_type: DEEPSPEED\n")
    with pytest.raises(ValueError, match="z.yaml needs deepspeed.*envs/gpu.yaml"):
        check_accelerate_config(tmp_path / "z.yaml", lambda p: p in gpu, "envs/gpu.yaml")
    check_accelerate_config(REPO / "configs/accelerate/fsdp2.yaml", lambda p: False, "none")  # torch only


def test_train_jobs_ask_for_one_node_and_retry_to_resume(checkout):
    result = snakemake("-n", "-p", "--configfile", "configs/paper.yaml", "--forceall", cwd=checkout)
    log = result.stdout + result.stderr
    train_jobs = [block for block in log.split("\n[") if "\nrule train:" in block]
    assert len(train_jobs) == 12 and all("nodes=1" in block for block in train_jobs), train_jobs[:1]
    assert job_counts(log)["fetch"] == 1


def test_fetch_runs_the_checkouts_code_and_records_revisions(checkout, tmp_path_factory):
    """The fetch rule (local, offline here) snapshots every hub id of the config into
    hf_home and records the commits; the job imports the checkout's src/ (not the installed balagg, not
    the caller's PYTHONPATH), as a job under --sdm conda must, since conda envs hold dependencies only."""
    from balagg.tinyworld.hubcache import fill_hub_cache, repo_folder

    hf_home = tmp_path_factory.mktemp("hf")
    datasets = {"dapo-math-17k": "BytedTsinghua-SIA/DAPO-Math-17k", "math500": "HuggingFaceH4/MATH-500"}
    fill_hub_cache(hf_home, ["Qwen/Qwen2.5-Math-7B"], datasets, train_problems=4, bench_problems=2)
    config = write_config(checkout, "hub.yaml", {
        "campaign": "hub", "hf_home": str(hf_home), "aggregators": ["balanced-agg"],
        "models": {"m": {"path": "Qwen/Qwen2.5-Math-7B"}},
        "datasets": {"d": {"loader": "dapo-math-17k", "source": datasets["dapo-math-17k"]}},
        "benchmarks": {"math500": datasets["math500"]},
        "train": {"total_steps": 2, "eval_every": 2, "save_every": 1, "mini_batches": 1, "prompts_per_step": 2,
                  "num_generations": 2, "micro_batch_size": 4},
    })
    env_before = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"  # the submit host has no hub here: fetch must resolve from the cache
    try:
        snakemake("--cores", "1", "results/hub/fetch.json", "results/hub/data/bench/math500.jsonl",
                  "--configfile", config, cwd=checkout)
    finally:
        if env_before is None:
            os.environ.pop("HF_HUB_OFFLINE")
        else:
            os.environ["HF_HUB_OFFLINE"] = env_before
    record = json.loads((checkout / "results/hub/fetch.json").read_text())
    assert record["code"]["path"] == str(checkout / "src" / "balagg")
    assert record["hf_home"] == str(hf_home)
    commits = {r["repo_id"]: r["commit"] for r in record["repos"]}
    assert commits["Qwen/Qwen2.5-Math-7B"] == (repo_folder(hf_home, "Qwen/Qwen2.5-Math-7B", "model") / "refs/main").read_text()
    assert set(commits) == {"Qwen/Qwen2.5-Math-7B", *datasets.values()}
    # a compute job (prepare_data) read the hub id offline from that cache
    assert len((checkout / "results/hub/data/bench/math500.jsonl").read_text().splitlines()) == 2
    # a later fetch (e.g. for a model added to the grid) does not redo what depends on the earlier one
    later = (checkout / "results/hub/fetch.json").stat().st_mtime + 60
    os.utime(checkout / "results/hub/fetch.json", (later, later))
    again = snakemake("-n", "results/hub/data/bench/math500.jsonl", "--configfile", config, cwd=checkout)
    assert "Nothing to be done" in again.stdout + again.stderr
