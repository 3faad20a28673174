"""The paper grid's context lengths and prompt settings, through Snakemake dry runs: lengths past a model's
context stop the DAG build, an unfetched model defers the check to the train job (and says so), and the
evaluation jobs get the training's override, answer format and thinking switch."""

from __future__ import annotations

import re

from test_context import fake_hub_cache
from test_workflow import snakemake, workdir  # noqa: F401  (workdir is a fixture)

QWEN_MATH = {"model_type": "qwen2", "max_position_embeddings": 4096}
QWEN3 = {"model_type": "qwen3", "max_position_embeddings": 40960}


def test_paper_grid_checks_contexts_at_dag_build(workdir, tmp_path, monkeypatch):  # noqa: F811
    cache = tmp_path / "hub"
    fake_hub_cache(cache, "Qwen/Qwen2.5-Math-7B", QWEN_MATH)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    # Qwen3-1.7B is not in the cache: its check waits for the train job; Qwen2.5-Math-7B has the override
    result = snakemake("-n", "-p", "--configfile", "configs/paper.yaml", cwd=workdir)
    assert ("model qwen3-1.7b: no config.json of Qwen/Qwen3-1.7B yet (not fetched); the context check "
            "runs in the train job at start") in result.stderr
    assert "qwen2.5-math-7b: no config.json" not in result.stderr
    jobs = re.split(r"^\[[^\n]*\]$", result.stdout, flags=re.MULTILINE)  # the templates hold blank lines
    generate = [job for job in jobs if "rule generate:" in job]
    math7b = [job for job in generate if "model=qwen2.5-math-7b" in job]
    qwen3 = [job for job in generate if "model=qwen3-1.7b" in job]
    assert math7b and qwen3
    assert all("--max-position-embeddings 32768" in job and "--answer-format answer-line" in job
               and "--enable-thinking" not in job for job in math7b)
    assert all("--enable-thinking true" in job and "--max-position-embeddings" not in job for job in qwen3)

    # without the override the model's own 4096 tokens cannot hold 2048 + 8192: refused before any job
    fake_hub_cache(cache, "Qwen/Qwen3-1.7B", QWEN3)
    paper = (workdir / "configs/paper.yaml").read_text()
    no_override = re.sub(r"^    max_position_embeddings: 32768\n", "", paper, flags=re.MULTILINE)
    assert no_override != paper
    (workdir / "no-override.yaml").write_text(no_override)
    result = snakemake("--cores", "1", "--configfile", "no-override.yaml", cwd=workdir, check=False)
    assert result.returncode != 0
    assert ("model qwen2.5-math-7b: training needs prompt 2048 (train.max_prompt_length) + completion 8192 "
            "(train.max_completion_length) = 10240 tokens, more than its context of 4096 tokens") in result.stderr
    assert "no config.json" not in result.stderr  # both configs were found
    assert not (workdir / "results").exists()
