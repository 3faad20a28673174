"""balagg.grid: a campaign's cells, cell configs, checkpoint steps, data jobs, resources and targets, derived
from the validated config in Python (the workflow's rules look them up; test_workflow checks that wiring)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from balagg.campaign import load
from balagg.grid import RESOURCE_DEFAULTS, Cell, DataFile, Grid
from balagg.grid.arguments import generate_args, score_args
from balagg.grid.environment import fetch_args, hub_models, job_environment
from balagg.grid.targets import analysis_targets, campaign_targets, external_paths
from balagg.layout import CELL_CONFIG_FILE
from balagg.train.config import CellConfig

REPO = Path(__file__).resolve().parents[1]


def grid_of(tmp_path: Path, *configs: str, **overrides) -> Grid:
    """The grid of the repository's config files, then ``overrides`` as one more file, loaded as the workflow
    loads them."""
    paths = [str(REPO / "configs" / f"{name}.yaml") for name in configs]
    if overrides:
        extra = tmp_path / "override.yaml"
        extra.write_text(yaml.safe_dump(overrides))
        paths.append(str(extra))
    return Grid(load(paths))


# ---- cells


def test_cells_are_every_combination_in_the_configs_order(tmp_path):
    grid = grid_of(tmp_path, "paper")
    assert len(grid.cells) == 2 * 2 * 3
    assert grid.cells[0] == Cell("qwen2.5-math-7b", "dapo17k", "seq-agg", 0)
    assert grid.cells[1].aggregator == "token-agg" and grid.cells[3].dataset == "polaris"
    assert grid.cells[-1] == Cell("qwen3-1.7b", "polaris", "balanced-agg", 0)
    assert grid.cell_paths(CELL_CONFIG_FILE)[0] == \
        "results/paper/qwen2.5-math-7b/dapo17k/seq-agg/seed0/cell.json"


def test_a_cell_is_named_by_its_wildcards_and_its_folder():
    cell = Cell.of({"model": "m", "dataset": "d", "aggregator": "token-agg", "seed": "3"})
    assert cell == Cell("m", "d", "token-agg", 3) and cell.seed == 3
    assert cell.relpath == str(cell) == "m/d/token-agg/seed3"
    assert Cell.of(cell.wildcards) == cell and Cell.parse(cell.relpath) == cell  # a folder reads back as its cell
    for near_miss in ("m/d/token-agg/seed3/eval", "m/d/bogus-rule/seed3", "m/d/token-agg/seed-3", "m/d/token-agg"):
        assert Cell.parse(near_miss) is None, near_miss
    assert sorted([Cell("m", "d", "z", 1), Cell("m", "d", "a", 2), Cell("a", "d", "z", 0)])[0].model == "a"


def test_a_campaign_without_models_has_no_cells(tmp_path):
    grid = grid_of(tmp_path, "evaluate")
    assert grid.cells == () and grid.checkpoints
    assert analysis_targets(grid) == [f"results/{grid.name}/analysis/table1.{ext}" for ext in ("csv", "md", "tex")]


# ---- training


def test_every_cell_config_is_its_own_cell_resolved(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    grid = grid_of(tmp_path, "paper")
    paper = yaml.safe_load((REPO / "configs/paper.yaml").read_text())
    for cell in grid.cells:
        resolved = grid.cell_config(cell)
        # the trainer names the same cell (its MLflow run, logs and manifest by the cell's folder)
        trained = CellConfig.from_dict(resolved)
        assert trained.cell == cell and trained.output_name == cell.relpath
        spec = paper["models"][cell.model]
        assert resolved["model"] == spec["path"]
        assert resolved["train_files"] == [f"results/paper/data/train/{cell.dataset}.jsonl"]
        # the trainer stops before the job's own time limit; it launches one process per GPU
        assert resolved["time_limit_minutes"] == spec["train_resources"]["runtime"]
        assert resolved["num_processes"] == spec["train_resources"]["gpus"]
        assert resolved["accelerate_config"] == "configs/accelerate/fsdp2.yaml"
        assert resolved["mlflow_tracking_uri"] == f"sqlite:///{tmp_path}/results/paper/mlflow.db"
        assert resolved["mlflow_experiment"] == "paper"
        # the model's own train settings win over the section's
        assert resolved["vllm_gpu_memory_utilization"] == spec["train"]["vllm_gpu_memory_utilization"]


def test_a_tiny_model_is_built_in_the_campaign_and_reads_its_familys_data(tmp_path):
    grid = grid_of(tmp_path, "smoke", models={"walker": {"path": "tinyworld", "tinyworld_size": "tiny-xs",
                                                         "tinyworld_regime": "wrong-long-walk"}})
    cell = Cell("walker", "arith-long", "seq-agg", 0)
    resolved = grid.cell_config(cell)
    assert resolved["model"] == "results/smoke/models/walker"
    assert resolved["train_files"] == ["results/smoke/data/walks/train/arith-long.jsonl"]
    # unset resources: the defaults (one process, the default time limit)
    assert resolved["num_processes"] == 1 and resolved["time_limit_minutes"] == RESOURCE_DEFAULTS["runtime"]
    assert grid.cell_config(Cell("tiny-s", "arith-long", "seq-agg", 0))["train_files"] == \
        ["results/smoke/data/train/arith-long.jsonl"]


def test_a_setting_changes_exactly_the_cell_configs_whose_training_it_changes(tmp_path):
    """Resolved configs: `scope: group` changes what token-agg trains (its default scope is the batch) and
    no other rule's; a key set to its default value changes no cell.json (so no cell reruns)."""
    base = grid_of(tmp_path, "smoke")
    group = grid_of(tmp_path, "smoke", train={"scope": "group"})
    defaults = grid_of(tmp_path, "smoke", train={"clip_ratio_low": 0.2, "clip_ratio_high": 0.28})
    changed = [cell.aggregator for cell in base.cells if base.cell_config(cell) != group.cell_config(cell)]
    assert changed == ["token-agg"]
    assert all(base.cell_config(cell) == defaults.cell_config(cell) for cell in base.cells)


def test_a_bad_training_combination_is_one_line(tmp_path):
    grid = grid_of(tmp_path, "smoke", train={"mini_batches": 3})  # 2 prompts x 4 responses into 3 steps
    with pytest.raises(ValueError, match="mini_batches=3"):
        grid.cell_config(grid.cells[0])


def test_checkpoint_steps_follow_each_models_own_settings(tmp_path):
    paper = grid_of(tmp_path, "paper")
    assert paper.checkpoint_steps("qwen3-1.7b") == list(range(0, 3200 + 1, 160))
    assert paper.evaluated_checkpoints("qwen3-1.7b") == 20
    grid = grid_of(tmp_path, "default", train={"total_steps": 7, "eval_every": 3},
                   models={"tiny-s": {"train": {"total_steps": 4, "eval_every": 2}}})
    assert grid.checkpoint_steps("tiny-s") == [0, 2, 4]
    assert grid.checkpoint_steps("tiny-xs") == [0, 3, 6, 7]  # every eval_every, and the last


def test_a_model_the_workflow_builds_is_checked_against_its_shape_before_it_exists(tmp_path, monkeypatch, capsys):
    from balagg.grid import checks

    monkeypatch.chdir(tmp_path)
    grid = grid_of(tmp_path, "default")
    assert not Path(grid.model_source("tiny-s")).exists()
    assert checks.check_context(grid, "tiny-s") == 1024  # tiny-s's max_position_embeddings
    assert "no config.json" not in capsys.readouterr().err  # nothing deferred, nothing to say
    grid = grid_of(tmp_path, "default", train={"max_completion_length": 1000})
    with pytest.raises(ValueError, match=r"model tiny-s: training needs prompt 64 .* = 1064 tokens, more than its "
                                         r"context of 1024 tokens \(its max_position_embeddings 1024\)"):
        checks.check_context(grid, "tiny-s")


# ---- resources


def test_resources_are_the_models_own_else_the_defaults(tmp_path):
    paper = grid_of(tmp_path, "paper")
    assert paper.resource("qwen2.5-math-7b", "train_resources", "gpus") == 8
    assert paper.resource("qwen3-1.7b", "train_resources", "gpus") == 4
    assert paper.resource("qwen3-1.7b", "generate_resources", "runtime") == 180
    grid = grid_of(tmp_path, "smoke", models={"tiny-s": {"generate_resources": {"gpus": 1}}})
    assert grid.resource("tiny-s", "generate_resources", "gpus") == 1
    assert grid.resource("tiny-s", "generate_resources", "mem_mb") == RESOURCE_DEFAULTS["mem_mb"]
    assert {key: grid.resource("tiny-s", "train_resources", key) for key in RESOURCE_DEFAULTS} == RESOURCE_DEFAULTS
    with pytest.raises(KeyError):
        grid.resource("tiny-s", "train_resources", "gpu")


# ---- data jobs


def test_data_files_are_one_per_source_and_tiny_world_family_in_use(tmp_path):
    paper = grid_of(tmp_path, "paper")
    assert paper.data_files() == [DataFile("train", "dapo17k"), DataFile("train", "polaris"),
                                  *(DataFile("bench", name) for name in paper.benchmarks)]
    assert len(paper.data_files()) == 2 + 6
    walks = {"path": "tinyworld", "tinyworld_size": "tiny-xs", "tinyworld_regime": "wrong-long-walk"}
    grid = grid_of(tmp_path, "smoke", models={"walker": walks})
    families = {data.family for data in grid.data_files()}
    assert families == {"chains", "walks"} and len(grid.data_files()) == 2 * (1 + 6)
    assert "results/smoke/data/walks/train/arith-long.report.json" in grid.data_reports()
    assert grid.tinyworld_cards() == ["results/smoke/models/tiny-s/card.json", "results/smoke/models/walker/card.json"]
    assert paper.tinyworld_cards() == []


def test_a_family_model_cannot_mix_tiny_world_and_real_benchmarks(tmp_path):
    walks = {"path": "tinyworld", "tinyworld_size": "tiny-xs", "tinyworld_regime": "wrong-long-walk"}
    assert grid_of(tmp_path, "smoke", models={"walker": walks}).benchmark_folder_error() is None
    error = grid_of(tmp_path, "smoke", models={"walker": walks},
                    benchmarks={"math500": "HuggingFaceH4/MATH-500"}).benchmark_folder_error()
    assert error.startswith("config: models.walker: its walks benchmarks must all come from the tiny world")
    assert "math500: HuggingFaceH4/MATH-500" in error


def test_an_external_checkpoint_reads_benchmarks_only(tmp_path):
    grid = grid_of(tmp_path, "evaluate")
    assert {data.kind for data in grid.data_files()} == {"bench"}
    assert len(grid.data_files()) == len(grid.benchmarks)


# ---- targets and job arguments


def test_campaign_targets_cover_every_cell_every_external_checkpoint_and_the_analysis(tmp_path):
    grid = grid_of(tmp_path, "smoke", checkpoints={"ext": {"path": str(tmp_path)}})
    wanted = campaign_targets(grid)
    for cell in grid.cells:
        assert f"results/smoke/{cell.relpath}/eval/curve.csv" in wanted
        assert f"results/smoke/{cell.relpath}/eval/mlflow.json" in wanted
    assert external_paths(grid, "eval/curve.csv") == ["results/smoke/ext/external/eval/curve.csv"]
    assert "results/smoke/ext/external/eval/mlflow.json" in wanted
    assert {"results/smoke/analysis/figure3.pdf", "results/smoke/analysis/mechanism.csv",
            "results/smoke/analysis/mlflow.json", "results/smoke/data/card.json"} <= set(wanted)
    assert "results/paper/data/card.json" not in campaign_targets(grid_of(tmp_path, "paper"))


def test_jobs_take_the_models_prompt_settings_and_the_eval_settings(tmp_path):
    """The workflow writes a generate (score) job's settings from GenerationConfig (ScoreConfig), and the
    command reads them back into the same dataclass: what the job runs with is the eval section's and the
    model's settings, nothing lost or renamed on the way."""
    import shlex

    from balagg.cli import build_parser
    from balagg.config_flags import config_from_args
    from balagg.evaluation.generation.requests import GenerationConfig
    from balagg.evaluation.scoring.config import ScoreConfig

    grid = grid_of(tmp_path, "paper", eval={"temperature": 0.6, "strict_golds": True})
    for model in grid.models:
        settings = grid.generation_settings(model)
        spec = grid.models[model]
        assert settings["chat_template"] is True and settings["temperature"] == 0.6
        assert (settings["math_template"], settings["answer_format"]) == (spec["math_template"], "answer-line")
        args = build_parser().parse_args(["generate", "--checkpoint", "c", "--benchmarks-dir", "b", "--benchmarks",
                                          "math500", "--out", "o", *shlex.split(generate_args(grid, model))])
        parsed = config_from_args(GenerationConfig, args)
        assert {key: getattr(parsed, key) for key in settings} == settings
    assert grid.generation_settings("qwen3-1.7b")["enable_thinking"] is True
    assert "enable_thinking" not in grid.generation_settings("qwen2.5-math-7b")  # unset: the template's default
    args = build_parser().parse_args(["score", "--generations", "g", "--benchmarks-dir", "b", "--out", "o",
                                      *shlex.split(score_args(grid))])
    assert config_from_args(ScoreConfig, args) == ScoreConfig(code_timeout_s=6, strict_golds=True)
    smoke = grid_of(tmp_path, "smoke")
    assert generate_args(smoke, "tiny-s").startswith("--n 8 --temperature 1.0 --top-p 0.7 --max-tokens 48 --seed 0 "
                                                     "--chat-template false --math-template '{problem}'")


def test_hub_sources_are_fetched_and_read_offline(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HOME", raising=False)
    paper = grid_of(tmp_path, "paper", hf_home=str(tmp_path / "hf"))
    assert hub_models(paper.config) == ["Qwen/Qwen2.5-Math-7B", "Qwen/Qwen3-1.7B"]
    assert "--model Qwen/Qwen2.5-Math-7B" in fetch_args(paper.config)
    prefix = job_environment(paper.config, "/code/src")
    assert prefix.startswith("set -euo pipefail; export PYTHONPATH=/code/src")
    assert f"export HF_HOME={tmp_path / 'hf'}" in prefix and "export HF_HUB_OFFLINE=1" in prefix
    assert "HF_HUB_OFFLINE" not in job_environment(grid_of(tmp_path, "smoke").config, "/code/src")
