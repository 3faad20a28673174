"""GPU memory settings of the paper grid's train jobs: PyTorch's expandable segments for GPU train jobs (not for
CPU ones), an engine share per model, and a collective timeout that outlasts an evaluation checkpoint's write.
The measurement itself is bench/gpu_smoke.sh's microbatch-fsdp2 step (tests/test_gpu_smoke.py runs its CPU form)."""

from __future__ import annotations

import pytest
import yaml

from checkout import REPO
from test_workflow import snakemake, workdir  # noqa: F401  (workdir: a fixture)


def train_jobs(printed: str) -> list[str]:
    return [job for job in printed.split("\n\n") if "rule train:" in job]


@pytest.mark.slow
def test_gpu_train_jobs_use_expandable_segments_and_cpu_jobs_do_not(workdir):  # noqa: F811
    jobs = train_jobs(snakemake("-n", "-p", "--configfile", "configs/paper.yaml", cwd=workdir).stdout)
    assert len(jobs) == 12
    assert all("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python -m balagg train --cell" in job
               for job in jobs)
    cpu_jobs = train_jobs(snakemake("-n", "-p", cwd=workdir).stdout)  # the tiny world's CPU grid
    assert cpu_jobs and not any("PYTORCH_CUDA_ALLOC_CONF" in job for job in cpu_jobs)


def paper_train_settings() -> dict[str, dict]:
    """Each paper model's train settings as the workflow resolves them (train section, then the model's own)."""
    from balagg.campaign import load
    from balagg.grid import Grid

    grid = Grid(load([REPO / "configs" / "paper.yaml"]))
    return {name: grid.train_settings(name) for name in grid.models}


def test_each_paper_model_sizes_its_own_engine_share():
    """The engine's share is held for the whole run (sleep mode off), beside a training footprint that
    differs per model (a 7B on 8 GPUs, a 1.7B on 4): each model states its own."""
    paper = yaml.safe_load((REPO / "configs" / "paper.yaml").read_text())
    assert "vllm_gpu_memory_utilization" not in paper["train"]
    shares = {name: spec["train"]["vllm_gpu_memory_utilization"] for name, spec in paper["models"].items()}
    assert len(set(shares.values())) == len(shares) and all(0 < share < 1 for share in shares.values())


def test_paper_collective_timeout_outlasts_a_slow_evaluation_checkpoint_write():
    """Ranks wait in a collective while rank 0 writes a bf16 evaluation checkpoint: 2 bytes per parameter of
    Qwen2.5-Math-7B at 50 MB/s (a loaded shared file system) must fit in the timeout."""
    paper = yaml.safe_load((REPO / "configs" / "paper.yaml").read_text())
    for name, settings in paper_train_settings().items():
        parameters = paper["plan"]["models"][name]["parameters"]
        write_minutes = 2 * parameters / 50e6 / 60
        assert settings["collective_timeout_minutes"] > 2 * write_minutes, name
