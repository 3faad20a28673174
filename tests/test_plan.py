"""balagg.plan / `python -m balagg plan`: the cost arithmetic on a config small enough to do by hand."""

from __future__ import annotations

import pytest
import yaml

from balagg.cli import main
from balagg.commands.plan import load_config
from balagg.plan import plan_lines
from test_workflow import REPO, snakemake, workdir  # noqa: F401  (workdir is a fixture)

SMALL = {
    "campaign": "small",
    "seeds": [0],
    "aggregators": ["seq-agg", "balanced-agg"],
    "models": {"m1": {"path": "Org/M1", "train_resources": {"gpus": 2, "runtime": 60},
                      "generate_resources": {"gpus": 1}}},
    "datasets": {"d1": {"loader": "dapo-math-17k", "source": "Org/D1"}},
    "benchmarks": {"math500": "Org/B1", "aime24": "Org/B2"},
    "train": {"total_steps": 8, "mini_batches": 2, "num_iterations": 1, "prompts_per_step": 4,
              "num_generations": 2, "max_completion_length": 100, "eval_every": 4},
    "eval": {"n": 8, "max_tokens": 50},
    "plan": {"completion_fraction": 0.5, "train_tokens_per_s_per_gpu": 0.1, "generate_tokens_per_s_per_gpu": 1.0,
             "bench_problems": {"math500": 10, "aime24": 5}},
}


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    return path


def test_plan_arithmetic_by_hand(small):
    lines, total = plan_lines(load_config([str(small)]))
    initial, cell, _ = lines
    # 8 steps / (2 mini-batches x 1 iteration) = 4 rollout batches x 4 prompts x 2 responses x 0.5 x 100 tokens
    assert cell.train_tokens == 4 * 4 * 2 * 0.5 * 100 == 1600
    # checkpoints 4 and 8; each: n 8 x 15 problems x 0.5 x 50 tokens
    assert cell.jobs == {"train": 1, "generate": 2, "score": 2}
    assert cell.eval_tokens == 2 * 8 * 15 * 25 and initial.eval_tokens == 3000
    assert cell.train_gpu_hours == pytest.approx(1600 / 0.1 / 3600)
    assert cell.train_wall_hours == pytest.approx(1600 / 0.1 / 3600 / 2)  # 2 GPUs per train job
    assert cell.eval_gpu_hours == pytest.approx(6000 / 1.0 / 3600)
    assert (cell.train_gpus, cell.generate_gpus, cell.train_runtime_hours) == (2, 1, 1.0)
    assert total.jobs == {"prepare_data": 3, "train": 2, "generate": 5, "score": 5}
    assert total.train_tokens == 3200 and total.eval_tokens == 2 * 6000 + 3000


def test_tiny_models_are_planned_on_their_own_familys_benchmarks(tmp_path, capsys):
    """A walks model's math benchmarks are disjoint slices of the walk space (16 each however many are
    asked); a chains model gets bench_problems; each family in use has its own data jobs."""
    from balagg.tinyworld.walks import slice_size

    tiny = {"path": "tinyworld", "tinyworld_size": "tiny-s"}
    config = {**SMALL, "models": {"walker": {**tiny, "tinyworld_regime": "wrong-long-walk"},
                                  "chainer": {**tiny, "tinyworld_regime": "spread"}},
              "datasets": {"d1": {"loader": "dapo-math-17k", "source": "tinyworld"}},
              "benchmarks": {"math500": "tinyworld", "aime24": "tinyworld"},
              "tinyworld": {"bench_problems": 48}, "plan": {"completion_fraction": 0.5}}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    lines, total = plan_lines(load_config([str(path)]))
    initial = {line.name.split("/")[0]: line for line in lines if line.name.endswith("(step 0)")}
    walk_size = slice_size(48, 5)
    assert walk_size == 16
    assert initial["walker"].eval_tokens == 8 * 2 * walk_size * 0.5 * 50
    assert initial["chainer"].eval_tokens == 8 * 2 * 48 * 0.5 * 50
    assert total.jobs["prepare_data"] == 2 * 3  # a training set and two benchmarks, per family
    assert main(["plan", "--configfile", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "benchmark problems (walker): aime24 16, math500 16" in printed
    assert "benchmark problems (chainer): aime24 48, math500 48" in printed


def test_later_files_override_and_per_model_rates_win(small, tmp_path, capsys):
    more = tmp_path / "more.yaml"
    more.write_text(yaml.safe_dump({"train": {"total_steps": 16},
                                    "plan": {"models": {"m1": {"completion_fraction": 0.25}}}}))
    assert main(["plan", "--configfile", str(small), str(more)]) == 0
    printed = capsys.readouterr().out
    lines, total = plan_lines(load_config([str(small), str(more)]))
    assert lines[1].train_tokens == 8 * 4 * 2 * 0.25 * 100  # 8 rollout batches, a quarter of the length
    assert lines[1].jobs["generate"] == 4  # checkpoints 4, 8, 12, 16
    assert "m1/d1/balanced-agg/seed0" in printed and "OVER" in printed  # 2.2 h on 2 GPUs > the 1 h limit
    assert "m1: completion_fraction 0.25, train 0.1 tokens/s/GPU" in printed


def test_bad_plans_are_one_line_errors(small, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"plan": {"models": {"nope": {"completion_fraction": 0.5}}}}))
    assert main(["plan", "--configfile", str(small), str(bad)]) == 2
    assert "plan.models names models that are not in the config: ['nope']" in capsys.readouterr().err
    no_size = {**SMALL, "benchmarks": {"livecodebench": "Org/L"}, "plan": {}}
    bad.write_text(yaml.safe_dump(no_size))
    assert main(["plan", "--configfile", str(bad)]) == 2
    assert "set plan.bench_problems.livecodebench" in capsys.readouterr().err
    bad.write_text(yaml.safe_dump({**SMALL, "plan": {"completion_fraction": 2}}))
    assert main(["plan", "--configfile", str(bad)]) == 2
    assert "2 is greater than the maximum of 1 at instance['plan']['completion_fraction']" in capsys.readouterr().err


def test_the_plan_rule_writes_what_the_command_prints(workdir):  # noqa: F811
    from balagg.plan import format_plan

    snakemake("results/smoke/plan.txt", "--cores", "1", "--configfile", "configs/smoke.yaml", cwd=workdir)
    written = (workdir / "results/smoke/plan.txt").read_text()
    assert written == format_plan(load_config([str(REPO / "configs/smoke.yaml")])) + "\n"
    assert "tiny-s/arith-long/balanced-agg/seed0" in written and not (workdir / "results/smoke/data").exists()
