"""The per-cell config: unknown keys are errors, scopes default per rule, batch shapes are checked."""

from __future__ import annotations

import json

import pytest

from balagg.train.config import CellConfig, grpo_config_kwargs

BASE = {"model": "m", "train_files": ["data/train/dapo.jsonl"], "aggregator": "token-agg", "seed": 1,
        "num_generations": 4, "prompts_per_step": 8, "mini_batches": 2, "micro_batch_size": 2,
        "num_iterations": 1, "save_every": 4}


def cell(**changes):
    return CellConfig.from_dict(BASE | changes)


def test_unknown_and_missing_keys_are_errors():
    with pytest.raises(ValueError, match=r"unknown keys \['learnig_rate'\]"):
        cell(learnig_rate=1e-6)
    for beta in (0.0, 0.01):  # no KL term (balagg.train.trainer refuses it): no key to set it
        with pytest.raises(ValueError, match=r"unknown keys \['beta'\]"):
            cell(beta=beta)
    with pytest.raises(ValueError, match="missing required keys"):
        CellConfig.from_dict({k: v for k, v in BASE.items() if k != "seed"})
    with pytest.raises(ValueError, match="wrong type"):
        cell(seed="1")


@pytest.mark.parametrize(("rule", "scope"), [("token-agg", "batch"), ("seq-agg", "group"),
                                             ("balanced-agg", "group"), ("token-mean", "batch"),
                                             ("prompt-mean", "group"), ("delta-l-norm", "batch"),
                                             ("bnpo", "batch")])
def test_scope_defaults_follow_the_rule(rule, scope):
    config = cell(aggregator=rule)
    assert config.scope == scope
    assert cell(aggregator=rule, scope="group").scope == "group"


def test_delta_l_alpha_is_a_cell_setting_with_the_registrys_default():
    from balagg.aggregation.rules import ALPHA

    assert cell(aggregator="delta-l-norm").delta_l_alpha == ALPHA.default == 1.0
    assert cell(aggregator="delta-l-norm", delta_l_alpha=0.75).delta_l_alpha == 0.75
    assert cell(aggregator="bnpo").aggregator == "token-agg-microbatch"


def test_batch_shape_maps_to_trl():
    config = cell(num_processes=2)
    # 8 prompts x 4 = 32 responses, 2 mini-batches of 16, micro 2 x 2 processes -> GA 4, S 8
    assert (config.generation_batch, config.responses_per_step) == (32, 16)
    assert (config.gradient_accumulation_steps, config.steps_per_generation) == (4, 8)
    kwargs = grpo_config_kwargs(config, "out")
    assert kwargs["loss_type"] == "dr_grpo" and kwargs["beta"] == 0.0
    assert kwargs["steps_per_generation"] == 8 and kwargs["gradient_accumulation_steps"] == 4


def test_inconsistent_shapes_and_settings_are_errors():
    with pytest.raises(ValueError, match="mini_batches"):
        cell(mini_batches=3)
    with pytest.raises(ValueError, match="micro_batch_size"):
        cell(micro_batch_size=3)
    with pytest.raises(ValueError, match="generation cycle"):
        cell(num_iterations=2, save_every=6)  # cycle = 2 mini-batches x 2 iterations = 4
    with pytest.raises(ValueError, match="unknown aggregation rule"):
        cell(aggregator="mean")
    with pytest.raises(ValueError, match="prompt_template"):
        cell(prompt_template="no placeholder")


def test_the_overlong_buffer_lies_inside_the_completion_budget():
    """DAPO's overlong shaping penalises the last overlong_buffer_len tokens of max_completion_length: a
    buffer longer than the budget would penalise every response from its first token."""
    assert cell(max_completion_length=64, overlong_buffer_len=64).overlong_buffer_len == 64
    with pytest.raises(ValueError, match="overlong_buffer_len=65 must be at most max_completion_length=64"):
        cell(max_completion_length=64, overlong_buffer_len=65)
    assert not cell(max_completion_length=64, overlong_buffer_len=65, overlong_buffer_enabled=False).overlong_buffer_enabled


def test_checkpoint_steps_always_include_zero_and_the_end():
    assert cell(total_steps=10, eval_every=4, eval_steps=[3]).checkpoint_steps() == [0, 3, 4, 8, 10]
    assert cell(total_steps=10).checkpoint_steps() == [0]


def test_config_hash_depends_on_content_only(tmp_path):
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(BASE))
    assert CellConfig.load(path).config_hash() == cell().config_hash() != cell(seed=2).config_hash()
    # where a cell is logged and how long its job may run change nothing it trains (the chaos test's two
    # checkouts log into two stores)
    assert cell(mlflow_tracking_uri="sqlite:////elsewhere/mlflow.db", mlflow_experiment="other",
                time_limit_minutes=30).config_hash() == cell().config_hash()
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        CellConfig.load(path)


def test_launch_command_uses_accelerate_for_several_processes(tmp_path):
    import sys

    from balagg.train.launch import launch_command

    from balagg.train.launch import in_process

    assert in_process(cell()) and not in_process(cell(num_processes=2))
    config = tmp_path / "fsdp2.yaml"
    config.write_text("distributed_type: FSDP\n")
    assert not in_process(cell(accelerate_config=str(config)))
    worker = ["-m", "balagg", "train-worker", "--cell", "cell.json"]
    multi = launch_command(cell(num_processes=2, accelerate_config=str(config)), worker)
    assert multi == [sys.executable, "-m", "balagg.train.agent", "--num_processes", "2",
                     "--main_process_port", "0", "--config_file", str(config), *worker]
    with pytest.raises(ValueError, match="does not exist"):
        launch_command(cell(num_processes=2, accelerate_config=str(tmp_path / "nope.yaml")), worker)


def test_shipped_accelerate_configs_parse():
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1] / "configs" / "accelerate"
    kinds = {yaml.safe_load(path.read_text())["distributed_type"] for path in root.glob("*.yaml")}
    assert kinds == {"FSDP", "MULTI_GPU"}  # DeepSpeed (zero3) is not installed: removed


def test_cli_reports_a_bad_cell_in_one_line(tmp_path, capsys):
    from balagg.cli import main

    path = tmp_path / "cell.json"
    path.write_text(json.dumps(BASE | {"clip_high": 0.28}))
    assert main(["train", "--cell", str(path), "--workdir", str(tmp_path / "w"), "--out", str(tmp_path / "m")]) == 2
    assert "unknown keys ['clip_high']" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_shipped_example_cells_are_valid():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "configs" / "cells"
    examples = sorted(root.glob("*.json"))
    assert examples
    for path in examples:
        config = CellConfig.load(path)
        kwargs = grpo_config_kwargs(config, "out")
        assert kwargs["use_vllm"] is True and kwargs["vllm_mode"] == "colocate" and kwargs["bf16"] is True
        assert config.generation_batch == 8192 and config.responses_per_step == 512
        assert config.group_preserving_minibatches and kwargs["vllm_importance_sampling_correction"] is False


@pytest.mark.parametrize("correction", [True, False])
def test_vllm_importance_sampling_option_reaches_grpo_config(correction):
    trl = pytest.importorskip("trl")
    config = cell(use_vllm=True, vllm_importance_sampling_correction=correction)
    args = trl.GRPOConfig(**grpo_config_kwargs(config, "out"), use_cpu=True)
    assert args.vllm_importance_sampling_correction is correction
    assert args.vllm_importance_sampling_mode == "sequence_mask"  # TRL's default mode, the one logged


def test_group_preserving_minibatches_need_whole_groups_per_process_and_step():
    # 8 prompts x 4 = 32 responses, 2 mini-batches of 16: 16 / 2 processes = 8 = two groups each
    assert cell(group_preserving_minibatches=True, num_processes=2).group_preserving_minibatches
    with pytest.raises(ValueError, match="group_preserving_minibatches needs whole groups"):
        cell(group_preserving_minibatches=True, num_processes=8, micro_batch_size=1, mini_batches=2)  # 2 per process
    assert cell(num_processes=8, micro_batch_size=1, mini_batches=2).responses_per_step == 16  # fine without it


def test_paper_config_turns_the_is_correction_off_and_keeps_groups_whole():
    from pathlib import Path

    import yaml

    paper = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs" / "paper.yaml").read_text())
    train = paper["train"]
    assert train["vllm_importance_sampling_correction"] is False and train["use_vllm"] is True
    assert train["group_preserving_minibatches"] is True
    for name, model in paper["models"].items():  # the paper's batch shape is whole groups on every GPU count
        settings = {**train, **model.get("train", {})}
        known = {k: v for k, v in settings.items() if k in CellConfig.__dataclass_fields__}
        config = CellConfig.from_dict({**BASE, **known, "num_processes": model["train_resources"]["gpus"],
                                       "accelerate_config": None})
        assert config.group_preserving_minibatches, name


def test_collective_timeout_is_a_config_value_that_leaves_the_hash_alone():
    """The process group's timeout (every rank waits in a collective while the main process writes an
    evaluation checkpoint) is the cell's collective_timeout_minutes, given to transformers as ddp_timeout;
    it changes how a job runs, not what it trains."""
    from trl import GRPOConfig

    config = cell(collective_timeout_minutes=90)
    kwargs = grpo_config_kwargs(config, "out")
    assert kwargs["ddp_timeout"] == 90 * 60
    assert GRPOConfig(**kwargs, use_cpu=True).ddp_timeout_delta.total_seconds() == 5400
    assert grpo_config_kwargs(cell(), "out")["ddp_timeout"] == 30 * 60  # transformers' own default
    assert config.config_hash() == cell().config_hash()
    with pytest.raises(ValueError, match="collective_timeout_minutes must be >= 1"):
        cell(collective_timeout_minutes=0)
