"""balagg.plan / `python -m balagg plan`: the cost arithmetic on a config small enough to do by hand."""

from __future__ import annotations

import importlib.util
import math
import random

import pytest
import yaml

from balagg.cli import main
from balagg.campaign import load
from balagg.grid import Grid
from balagg.completion_lengths import CompletionLengths
from balagg.plan import MEASURED_RATE, model_figures, plan_lines
from test_workflow import REPO, snakemake, workdir  # noqa: F401  (workdir is a fixture)

SMALL = {
    "campaign": "small",
    "seeds": [0],
    "aggregators": ["seq-agg", "balanced-agg"],
    "models": {"m1": {"path": "Org/M1", "train_resources": {"gpus": 2, "runtime": 60, "mem_mb": 30000},
                      "generate_resources": {"gpus": 1}}},
    "datasets": {"d1": {"loader": "dapo-math-17k", "source": "Org/D1"}},
    "benchmarks": {"math500": "Org/B1", "aime24": "Org/B2"},
    "train": {"total_steps": 8, "mini_batches": 1, "num_iterations": 2, "prompts_per_step": 4,
              "num_generations": 2, "micro_batch_size": 2, "max_prompt_length": 20, "max_completion_length": 100,
              "eval_every": 4},
    "eval": {"n": 8, "max_tokens": 50},
    "plan": {"completion_fraction": 0.5, "prompt_tokens": 10, "forward_backward_tokens_per_s_per_gpu": 1.0,
             "rollout_tokens_per_s_per_gpu": 0.1, "generate_tokens_per_s_per_gpu": 1.0, "parameters": 1e6,
             "bench_problems": {"math500": 10, "aime24": 5}},
}


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    return path


def test_plan_arithmetic_by_hand(small):
    lines, total = plan_lines(load([str(small)]))
    initial, cell, _ = lines
    # 8 steps / (1 mini-batch x 2 iterations) = 4 rollout batches x 4 prompts x 2 responses x 0.5 x 100 tokens
    assert cell.train_tokens == 4 * 4 * 2 * 0.5 * 100 == 1600
    # a GPU's 4 rows of a step, sorted by width, cut into micro-batches of 2: each as wide as its prompt part
    # plus its longer completion
    width = 10 + CompletionLengths(100, 0.5).expected_sorted_width(4, 2)
    assert cell.padded_tokens == pytest.approx(4 * 4 * 2 * width)
    # sampling at the rollout rate, a log-prob forward pass (2 iterations: old log-probs; the same 4 rows per
    # GPU sorted) and two forward + backward passes over the padded tokens
    compute = (1600 / 0.1 + 32 * width * (2 + 0.25) / 1.0) / 3600
    # saves at the default 500 MB/s, on both GPUs: the resumable state (12 B x 1e6) at the last step (save_every
    # 10 > 8 steps), and once more at each of the 2 stops of the 3 jobs that 2.9 h take under a 1 h limit; the
    # 2 evaluation checkpoints (2 B x 1e6)
    saves = ((1 + 2) * 12e6 + 2 * 2e6) / 500e6 / 3600
    assert cell.save_hours == pytest.approx(saves)
    assert cell.train_gpu_hours == pytest.approx(compute + 2 * saves)
    assert cell.train_wall_hours == pytest.approx(compute / 2 + saves)  # 2 GPUs per train job
    # checkpoints 4 and 8; each: n 8 x 15 problems x 0.5 x 50 tokens
    assert cell.jobs == {"train": 1, "generate": 2, "score": 2}
    assert cell.eval_tokens == 2 * 8 * 15 * 25 and initial.eval_tokens == 3000
    assert cell.eval_gpu_hours == pytest.approx(6000 / 1.0 / 3600)
    assert (cell.train_gpus, cell.generate_gpus, cell.train_runtime_hours) == (2, 1, 1.0)
    assert total.jobs == {"prepare_data": 3, "train": 2, "generate": 5, "score": 5}
    assert total.train_tokens == 3200 and total.eval_tokens == 2 * 6000 + 3000


def test_completion_width_is_the_expected_longest_of_a_micro_batch():
    """The length model (balagg.padding): clipped exponential lengths with the stated mean; its expected
    longest of m rows against the closed form and a seeded Monte Carlo draw."""
    lengths = CompletionLengths(8192, 0.3)
    mu, t = 8192 / lengths.ratio, lengths.ratio
    assert mu * -math.expm1(-t) == pytest.approx(0.3 * 8192)
    assert lengths.expected_max(1) == pytest.approx(0.3 * 8192)
    closed = mu * sum((-1) ** (k + 1) * math.comb(4, k) * -math.expm1(-k * t) / k for k in range(1, 5))
    assert lengths.expected_max(4) == pytest.approx(closed, rel=1e-9)
    draw = random.Random(0)
    sample = [max(min(draw.expovariate(1 / mu), 8192) for _ in range(4)) for _ in range(100_000)]
    assert lengths.expected_max(4) == pytest.approx(sum(sample) / len(sample), rel=0.01)
    assert lengths.truncated_share == pytest.approx(sum(min(draw.expovariate(1 / mu), 8192) == 8192
                                                        for _ in range(100_000)) / 100_000, abs=0.005)
    assert 0.3 * 8192 < lengths.expected_max(4) < lengths.expected_max(1024) <= 8192
    assert CompletionLengths(100, 1.0).expected_max(4) == 100  # every response truncated


def test_sorted_micro_batches_are_narrower_than_unsorted_ones():
    """Sorting n rows by length before cutting them into micro-batches of m: the mean micro-batch width
    against a seeded Monte Carlo draw; one micro-batch is the unsorted case; never below the mean length."""
    lengths = CompletionLengths(8192, 0.3)
    mu = 8192 / lengths.ratio
    draw = random.Random(1)
    widths = []
    for _ in range(4000):
        rows = sorted((min(draw.expovariate(1 / mu), 8192) for _ in range(64)), reverse=True)
        widths.append(sum(rows[::4]) / 16)
    assert lengths.expected_sorted_width(64, 4) == pytest.approx(sum(widths) / len(widths), rel=0.01)
    assert lengths.expected_sorted_width(4, 4) == pytest.approx(lengths.expected_max(4))
    assert lengths.mean < lengths.expected_sorted_width(1024, 4) < lengths.expected_sorted_width(64, 4) \
        < lengths.expected_max(4)


def test_micro_batch_rules_are_planned_unsorted(small, tmp_path):
    """The trainer keeps the micro-batch rules' cut (their weights depend on it): no sorting, wider."""
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"aggregators": ["token-agg", "token-agg-microbatch"]}))
    lines, _ = plan_lines(load([str(small), str(other)]))
    by_rule = {line.name.split("/")[2]: line for line in lines[1:]}
    lengths = CompletionLengths(100, 0.5)
    assert by_rule["token-agg"].padded_tokens == pytest.approx(32 * (10 + lengths.expected_sorted_width(4, 2)))
    assert by_rule["token-agg-microbatch"].padded_tokens == pytest.approx(32 * (10 + lengths.expected_max(2)))


def test_the_forward_backward_rate_is_the_quantity_gpu_smoke_measures():
    """The plan's forward+backward rate counts every column of a batch (prompt and completion) through one
    forward + backward pass per GPU: bench/gpu_smoke.py's probe reports that under the key the plan names."""
    spec = importlib.util.spec_from_file_location("gpu_smoke", REPO / "bench" / "gpu_smoke.py")
    gpu_smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_smoke)
    file, step, key = MEASURED_RATE
    assert file == "gpu_smoke.json" and step == "probe-7b"
    figures = gpu_smoke.probe("dry-7b", 16, 48, "cpu", repeats=1)
    assert figures[key] == pytest.approx((16 + 48) / figures["seconds_per_pass"], rel=0.01)
    assert figures["gradient_checkpointing"] is True  # the plan's forward-only share assumes it


def test_checkpoint_disk_per_cell_and_in_total(small, tmp_path):
    """Eval checkpoints in bf16 (2 B/parameter, trained steps only), resumable state 12 B/parameter, kept
    keep_checkpoints times plus one while saving; the total adds every cell and the model's snapshot. After
    training only the evaluation checkpoints stay (the trainer removes the resumable state), unless
    keep_resumable_state keeps keep_checkpoints of them."""
    lines, total = plan_lines(load([str(small)]))
    initial, cell, _ = lines
    # 2 eval checkpoints x 1e6 x 2 B + (2 kept + 1) x 1e6 x 12 B
    assert cell.disk_bytes == 2 * 2e6 + 3 * 12e6
    assert initial.disk_bytes == 2e6
    assert total.disk_bytes == 2 * cell.disk_bytes + 2e6
    assert cell.kept_bytes == 2 * 2e6 and initial.kept_bytes == 2e6 and total.kept_bytes == 2 * 2 * 2e6 + 2e6
    keep = tmp_path / "keep.yaml"
    keep.write_text(yaml.safe_dump({"train": {"keep_resumable_state": True}}))
    _, cell, _ = plan_lines(load([str(small), str(keep)]))[0]
    assert cell.kept_bytes == 2 * 2e6 + 2 * 12e6


def test_printed_plan_states_widths_disk_memory_and_job_limits(small, tmp_path, capsys):
    assert main(["plan", "--configfile", str(small)]) == 0
    printed = capsys.readouterr().out
    width = CompletionLengths(100, 0.5).expected_sorted_width(4, 2)
    assert (f"micro-batch width (trimmed, 2 rows): a step's rows (4 per GPU) sorted by width: 10 + {width:,.0f} = "
            f"{10 + width:,.0f} tokens") in printed
    assert "gpu_smoke.json/probe-7b/tokens_per_s" in printed
    assert "= 0.0 GB per cell" in printed and "total disk: 0.1 GB" in printed
    # 2 ranks x (1e6 x 4 B + 10 GB) = 20 GB, within the 30000 MB asked
    assert "train job host memory (load path): 2 ranks x (0.00G x 4 B + 10 GB) = 20.0 GB" in printed
    assert "SHORT" not in printed
    # evaluation job: 3000 tokens / 1 token/s = 0.83 h, within the default 1 h
    assert "evaluation job: 0.83 h at the generate rate (limit 1 h" in printed and "outlasts generate" not in printed
    slow = tmp_path / "slow.yaml"
    slow.write_text(yaml.safe_dump({"plan": {"generate_tokens_per_s_per_gpu": 0.5},
                                    "models": {"m1": {"train_resources": {"mem_mb": 10000}}}}))
    assert main(["plan", "--configfile", str(small), str(slow)]) == 0
    printed = capsys.readouterr().out
    assert "evaluation job: 1.67 h" in printed and "OVER: an evaluation job outlasts" in printed
    assert "asks 10.0 GB SHORT" in printed and "SHORT: train_resources.mem_mb is below" in printed


def test_paper_grid_evaluation_fits_and_train_memory_is_sized_from_the_load_path():
    """configs/paper.yaml: each model's evaluation job fits its runtime at the plan's rate, and a train job
    asks for the load path's host memory with a margin, not a whole node's."""
    from balagg.grid import Grid

    grid = Grid(load([str(REPO / "configs" / "paper.yaml")]))
    for model in grid.models:
        figures = model_figures(grid, model)
        assert figures.eval_job_hours < figures.generate_runtime_hours, model
        assert figures.train_host_bytes <= figures.train_mem_bytes <= 1.5 * figures.train_host_bytes, model


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
    lines, total = plan_lines(load([str(path)]))
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
    assert "disk, save time and host memory: not estimated (set plan.models.walker.parameters or its shape)" in printed
    assert "train job GPU memory: not estimated (set plan.models.walker.shape)" in printed


def test_later_files_override_and_per_model_rates_win(small, tmp_path, capsys):
    more = tmp_path / "more.yaml"
    more.write_text(yaml.safe_dump({"train": {"total_steps": 16},
                                    "plan": {"models": {"m1": {"completion_fraction": 0.25}}}}))
    assert main(["plan", "--configfile", str(small), str(more)]) == 0
    printed = capsys.readouterr().out
    lines, total = plan_lines(load([str(small), str(more)]))
    assert lines[1].train_tokens == 8 * 4 * 2 * 0.25 * 100  # 8 rollout batches, a quarter of the length
    assert lines[1].jobs["generate"] == 4  # checkpoints 4, 8, 12, 16
    assert "m1/d1/balanced-agg/seed0" in printed and "OVER" in printed  # 2.3 h on 2 GPUs > the 1 h limit
    assert "m1: completion_fraction 0.25 of 100" in printed and "forward+backward 1 padded tokens/s" in printed


def test_bad_plans_are_one_line_errors(small, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"plan": {"models": {"nope": {"completion_fraction": 0.5}}}}))
    assert main(["plan", "--configfile", str(small), str(bad)]) == 2
    assert f"config {bad}: plan.models.nope: not a model of the config" in capsys.readouterr().err
    no_size = {**SMALL, "benchmarks": {"livecodebench": "Org/L"}, "plan": {}}
    bad.write_text(yaml.safe_dump(no_size))
    assert main(["plan", "--configfile", str(bad)]) == 2
    assert "set plan.bench_problems.livecodebench" in capsys.readouterr().err
    bad.write_text(yaml.safe_dump({**SMALL, "plan": {"completion_fraction": 2}}))
    assert main(["plan", "--configfile", str(bad)]) == 2
    assert f"config {bad}: plan.completion_fraction: 2 is greater than the maximum of 1" in capsys.readouterr().err
    bad.write_text(yaml.safe_dump({**SMALL, "plan": {"prompt_tokens": 50}}))  # max_prompt_length is 20
    assert main(["plan", "--configfile", str(bad)]) == 2
    assert "prompt_tokens of m1 must be in [1, max_prompt_length=20], got 50" in capsys.readouterr().err
    # the former all-in-one train rate is not silently ignored
    bad.write_text(yaml.safe_dump({**SMALL, "plan": {"train_tokens_per_s_per_gpu": 1500}}))
    assert main(["plan", "--configfile", str(bad)]) == 2
    assert f"config {bad}: plan.train_tokens_per_s_per_gpu: unknown key" in capsys.readouterr().err


def test_the_plan_rule_writes_what_the_command_prints(workdir):  # noqa: F811
    from balagg.plan import format_plan

    snakemake("results/smoke/plan.txt", "--cores", "1", "--configfile", "configs/smoke.yaml", cwd=workdir)
    written = (workdir / "results/smoke/plan.txt").read_text()
    assert written == format_plan(load([str(REPO / "configs/smoke.yaml")])) + "\n"
    assert "tiny-s/arith-long/balanced-agg/seed0" in written and not (workdir / "results/smoke/data").exists()


def paper_figures(*overlays: dict, tmp_path=None) -> dict:
    paths = [str(REPO / "configs" / "paper.yaml")]
    for number, overlay in enumerate(overlays):
        path = tmp_path / f"overlay{number}.yaml"
        path.write_text(yaml.safe_dump(overlay))
        paths.append(str(path))
    grid = Grid(load(paths))
    return {model: model_figures(grid, model) for model in grid.models}


def test_paper_train_jobs_leave_a_tenth_of_each_gpu_free_and_the_engines_hold_a_sequence():
    """configs/paper.yaml on 80 GB GPUs (balagg.train.memory): each model's train job keeps at least 10 % of
    its GPU free at its peak, the colocated engine's KV cache holds a full-length rollout, and an evaluation
    engine holds a sequence of the model's context."""
    for model, figures in paper_figures().items():
        memory = figures.train_memory
        assert memory.total == pytest.approx(80 * 2**30 * 0.99)
        assert memory.free_share >= 0.10, (model, memory.peak / 2**30)
        assert memory.peak_phase == "backward"  # the activations' peak, not the optimiser step's
        assert figures.train_engine.kv_tokens >= figures.train_sequence
        assert figures.eval_memory.kv_tokens >= figures.eval_context and figures.eval_memory.free > 0


def test_a_train_job_without_a_tenth_free_is_marked_over(tmp_path, capsys):
    """The 7B with 4 responses per micro-batch (the train section's) leaves about 5 % of an 80 GB GPU free;
    a user with 141 GB GPUs (gpu_memory_gb) gets room again."""
    four = {"models": {"qwen2.5-math-7b": {"train": {"micro_batch_size": 4}}}}
    figures = paper_figures(four, tmp_path=tmp_path)["qwen2.5-math-7b"]
    assert figures.train_memory.free_share < 0.10
    paths = [str(REPO / "configs" / "paper.yaml"), str(tmp_path / "overlay0.yaml")]
    assert main(["plan", "--configfile", *paths]) == 0
    printed = capsys.readouterr().out
    assert "% free OVER" in printed and "OVER: a train job's GPU keeps under 10% of its memory free" in printed
    bigger = {"models": {"qwen2.5-math-7b": {"train_resources": {"gpu_memory_gb": 141}}}}
    figures = paper_figures(four, bigger, tmp_path=tmp_path)["qwen2.5-math-7b"]
    assert figures.train_memory.free_share > 0.10


def test_no_sync_accumulation_would_not_fit_the_7b(monkeypatch):
    """The paper's 7B train job as the plan models it, under no_sync (FSDP2 keeps every parameter's unsharded
    gradient in the fp32 reduce dtype between micro-batches): P x 4 B more per GPU, past the GPU itself."""
    from functools import partial

    import balagg.plan
    from balagg.train.memory import train_memory

    synced = paper_figures()["qwen2.5-math-7b"].train_memory
    monkeypatch.setattr(balagg.plan, "train_memory", partial(train_memory, sync_each_batch=False))
    no_sync = paper_figures()["qwen2.5-math-7b"].train_memory
    kept = {term.name: term.bytes for term in no_sync.persistent if term.name.startswith("gradients kept")}
    assert list(kept.values()) == [7615616512 * 4]  # the 7B's parameters, fp32
    assert no_sync.peak - synced.peak >= 7615616512 * 4 and no_sync.free_share < 0 < synced.free_share


def test_printed_plan_states_each_models_gpu_memory_save_time_and_disk_kept(capsys):
    assert main(["plan", "--configfile", str(REPO / "configs" / "paper.yaml")]) == 0
    printed = capsys.readouterr().out
    for phrase in ("train job GPU memory (79.2 GiB usable; FSDP2 over 8, reduce in fp32; the widest micro-batch "
                   "2 x 10,240 tokens): peak", "rollout engine (0.35 of the GPU) 27.7", "weights (fp32, sharded) 3.5",
                   "AdamW moments (2 x fp32, sharded) 7.1", "checkpointed layer inputs", "evaluation job GPU memory",
                   "checkpoint saves at 500 MB/s (plan write_bytes_per_s): a resumable one 3.0 min",
                   "after training 304.6 GB stays", "GB stays after training"):
        assert phrase in printed, phrase
    assert "OVER: a train job's GPU" not in printed


def test_paper_save_every_keeps_the_saves_a_small_part_of_training(tmp_path):
    """Saves take their bytes / write_bytes_per_s of the train wall hours: every rollout batch a 7B state
    (91.4 GB) would be 11 % of a cell's time at 500 MB/s; configs/paper.yaml's save_every keeps it under 5 %
    and a cell's lost work after an unforeseen failure under 5 rollout batches."""
    paper = str(REPO / "configs" / "paper.yaml")
    campaign = load([paper])
    lines, _ = plan_lines(campaign)
    for line in lines:
        if line.train_gpus:
            assert 0 < line.save_hours < 0.05 * line.train_wall_hours, line.name
    settings = campaign.config["train"]
    assert settings["save_every"] <= 5 * settings["mini_batches"] * settings["num_iterations"]
    overlay = tmp_path / "every-batch.yaml"
    overlay.write_text(yaml.safe_dump({"train": {"save_every": settings["mini_batches"]}}))
    every_batch = load([paper, str(overlay)])
    seven_b = next(line for line in plan_lines(every_batch)[0] if line.name.startswith("qwen2.5-math-7b/dapo"))
    assert seven_b.save_hours > 0.10 * seven_b.train_wall_hours


def test_a_stated_parameter_count_must_agree_with_the_shape(tmp_path):
    wrong = {"plan": {"models": {"qwen3-1.7b": {"parameters": 2.5e9}}}}
    with pytest.raises(ValueError, match="parameters of qwen3-1.7b .* differ from its shape's"):
        paper_figures(wrong, tmp_path=tmp_path)
