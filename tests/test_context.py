"""balagg.context: prompt + completion must fit the model's effective context (checked at DAG build, or at
train start when the model is not fetched yet), and one override reaches training, vLLM and evaluation."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from balagg.context import (
    check_fits, check_model_lengths, find_model_config, prepare_model, resolve_model_dir, with_context,
)
from balagg.train.config import CellConfig, grpo_config_kwargs

sys.path.insert(0, str(Path(__file__).parent))
from tiny_checkpoint import build_checkpoint  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def fake_hub_cache(cache: Path, repo: str, config: dict, commit: str = "0" * 40) -> Path:
    """``repo``'s config.json in the layout huggingface_hub writes (refs/main -> snapshots/<commit>/)."""
    root = cache / ("models--" + repo.replace("/", "--"))
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)
    (snapshot / "config.json").write_text(json.dumps(config))
    return snapshot


def test_lengths_past_the_context_are_one_line_naming_the_model_and_numbers():
    check_fits("m", 10240, 2048, 8192, "training", None)  # exactly full is fine
    with pytest.raises(ValueError) as error:
        check_fits("qwen2.5-math-7b", 4096, 2048, 8192, "training", None)
    message = str(error.value)
    assert "\n" not in message
    assert "model qwen2.5-math-7b" in message and "= 10240 tokens" in message
    # the message names the settings that make the lengths, the ones to change
    assert "prompt 2048 (train.max_prompt_length) + completion 8192 (train.max_completion_length)" in message
    assert "context of 4096 tokens (its max_position_embeddings 4096)" in message
    with pytest.raises(ValueError, match="override 8192"):
        check_fits("m", 8192, 2048, 8192, "evaluation", 8192)


def test_model_config_is_found_in_a_folder_or_the_hub_cache_and_nothing_is_downloaded(tmp_path):
    folder = tmp_path / "local"
    folder.mkdir()
    assert find_model_config(folder) is None  # a folder without config.json
    (folder / "config.json").write_text("{}")
    assert find_model_config(folder) == folder / "config.json"
    cache = tmp_path / "hub"
    snapshot = fake_hub_cache(cache, "Org/Model-7B", {"max_position_embeddings": 4096})
    assert find_model_config("Org/Model-7B", cache) == snapshot / "config.json"
    assert resolve_model_dir("Org/Model-7B", cache) == snapshot
    assert find_model_config("Org/Other", cache) is None
    assert find_model_config("results/x/models/tiny-s", cache) is None  # not built yet, not a hub id
    with pytest.raises(ValueError, match="Org/Other: no local folder and no snapshot"):
        resolve_model_dir("Org/Other", cache)
    lengths = {"training": (2048, 2048), "evaluation": (2048, 4096)}
    with pytest.raises(ValueError, match=r"evaluation needs prompt 2048 \(train.max_prompt_length\) \+ completion 4096 \(eval.max_tokens\)"):
        check_model_lengths("m7", "Org/Model-7B", None, lengths, cache)
    assert check_model_lengths("m7", "Org/Model-7B", 8192, lengths, cache) == 8192
    assert check_model_lengths("m7", "Org/Other", None, lengths, cache) is None  # deferred to the train job


def test_the_override_folder_reaches_the_policy_its_checkpoints_and_vllm(tmp_path):
    from transformers import AutoModelForCausalLM

    source = build_checkpoint(tmp_path / "source", max_positions=64)
    assert with_context(source, None, tmp_path / "view") == str(source)
    view = Path(with_context(source, 512, tmp_path / "view"))
    assert view == tmp_path / "view"
    assert json.loads((view / "config.json").read_text())["max_position_embeddings"] == 512
    assert json.loads((source / "config.json").read_text())["max_position_embeddings"] == 64  # untouched
    weights = view / "model.safetensors"
    assert weights.is_symlink() and weights.resolve() == (source / "model.safetensors").resolve()
    assert Path(with_context(source, 512, view)) == view  # rebuilding over it is safe
    model = AutoModelForCausalLM.from_pretrained(view)
    # TRL's colocated engine is LLM(model=model.name_or_path): it reads the overridden config.json
    assert model.config.max_position_embeddings == 512 and Path(model.name_or_path) == view
    model.save_pretrained(tmp_path / "checkpoint")
    assert json.loads((tmp_path / "checkpoint" / "config.json").read_text())["max_position_embeddings"] == 512
    assert with_context(tmp_path / "checkpoint", 512, tmp_path / "unused") == str(tmp_path / "checkpoint")
    assert not (tmp_path / "unused").exists()


def test_the_train_job_checks_before_any_work_and_records_the_context(tmp_path, monkeypatch):
    source = build_checkpoint(tmp_path / "source", max_positions=64)
    with pytest.raises(ValueError, match=r"model tiny: training needs prompt 40 .* completion 40 .* = 80"):
        prepare_model("tiny", source, None, 40, 40, tmp_path / "view")
    assert not (tmp_path / "view").exists()
    path, record = prepare_model("tiny", source, 128, 40, 40, tmp_path / "view")
    assert record == {"native": 64, "override": 128, "effective": 128, "max_prompt_length": 40,
                      "max_completion_length": 40}
    assert json.loads((Path(path) / "config.json").read_text())["max_position_embeddings"] == 128
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="model q: cannot read config.json of Org/NotFetched .*fetch the model"):
        prepare_model("q", "Org/NotFetched", None, 40, 40, tmp_path / "v2", cache_dir=tmp_path / "empty-cache")


def test_cell_override_sets_the_vllm_engine_length_and_is_checked(tmp_path):
    cell = dict(model="m", train_files=["t.jsonl"], aggregator="seq-agg", seed=0, prompts_per_step=2,
                num_generations=2, mini_batches=1, micro_batch_size=4, max_prompt_length=2048,
                max_completion_length=8192, overlong_buffer_len=4096, save_every=1, use_vllm=True)
    kwargs = grpo_config_kwargs(CellConfig(**cell, max_position_embeddings=32768), str(tmp_path))
    assert kwargs["vllm_max_model_length"] == 2048 + 8192  # not the model's 4096, not the override's 32768
    with pytest.raises(ValueError, match=r"2048 .* completion 8192 .* = 10240 .* override 4096"):
        CellConfig(**cell, max_position_embeddings=4096)


def test_evaluation_applies_the_same_override(tmp_path):
    from balagg.data import write_jsonl
    from balagg.evaluation.generation.generate import generate
    from balagg.evaluation.generation.requests import GenerationConfig

    source = build_checkpoint(tmp_path / "step-000000", max_positions=40, eos_bias=1.5)
    write_jsonl(tmp_path / "bench" / "math500.jsonl", [
        {"id": "m-0", "benchmark": "math500", "kind": "math", "problem": "Compute $1+1$.", "answer": "2"}])
    config = dict(n=2, max_tokens=8, backend="transformers", temperature=1.0, top_p=1.0)
    with pytest.raises(ValueError, match="do not fit the context length 40"):  # the prompt alone is ~80 tokens
        generate(source, tmp_path / "bench", ["math500"], tmp_path / "out", GenerationConfig(**config))
    out = tmp_path / "out2"
    generate(source, tmp_path / "bench", ["math500"], out, GenerationConfig(**config, max_position_embeddings=256))
    meta = json.loads((out / "generation.json").read_text())
    assert meta["context_length"] == 256 and meta["config"]["max_position_embeddings"] == 256
    assert meta["checkpoint"] == str(source)  # the checkpoint, not the temporary view
    assert not (out / ".model-context").exists()


RACE = """
import json, multiprocessing, sys, traceback
from pathlib import Path
from balagg.context import with_context

source, root = Path(sys.argv[1]), Path(sys.argv[2])
processes, trials, override = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])

def rank(barrier, failures):
    for trial in range(trials):
        barrier.wait()  # every rank reaches the build at once, as accelerate's ranks do at job start
        try:
            with_context(source, override, root / f"view-{trial}")
        except Exception:
            failures.put(f"trial {trial}: " + traceback.format_exc().splitlines()[-1])

context = multiprocessing.get_context("fork")
barrier, failures = context.Barrier(processes), context.Queue()
ranks = [context.Process(target=rank, args=(barrier, failures)) for _ in range(processes)]
for process in ranks:
    process.start()
for process in ranks:
    process.join()
found = []
while not failures.empty():
    found.append(failures.get())
print(json.dumps({"failures": found, "exit_codes": [p.exitcode for p in ranks]}))
"""


def test_eight_ranks_building_the_override_folder_at_once_never_fail(tmp_path):
    """Every rank of a launched job builds the view itself at start: 8 processes x 30 trials, each trial
    a fresh folder built by all 8 at the same instant, give no error and one complete, correct folder."""
    import subprocess

    source = tmp_path / "source"
    source.mkdir()
    (source / "config.json").write_text(json.dumps({"model_type": "qwen2", "max_position_embeddings": 64}))
    names = ["generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
             "vocab.json", "merges.txt", "model.safetensors.index.json",
             *(f"model-{i:05d}-of-00004.safetensors" for i in range(1, 5))]  # a sharded 7B's folder
    for name in names:
        (source / name).write_text(name)
    def race(override: int, trials: int) -> None:
        result = subprocess.run([sys.executable, "-c", RACE, str(source), str(tmp_path / "views"), "8", str(trials),
                                 str(override)], capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        report = json.loads(result.stdout)
        assert report["failures"] == [] and report["exit_codes"] == [0] * 8, report
        for trial in range(trials):
            view = tmp_path / "views" / f"view-{trial}"
            assert json.loads((view / "config.json").read_text())["max_position_embeddings"] == override
            assert sorted(p.name for p in view.iterdir()) == sorted([*names, "config.json", "balagg-context.json"])
            assert all((view / name).resolve() == (source / name).resolve() for name in names)
        left = sorted(p.name for p in (tmp_path / "views").iterdir() if not p.name.endswith(".lock"))
        assert left == sorted(f"view-{t}" for t in range(30))  # no half-built or moved-aside folder left

    race(512, 30)
    (tmp_path / "views" / "view-0" / "tokenizer.json").unlink()  # a half-built folder
    race(1024, 10)  # folders of another override, and the half-built one, are replaced by all 8 at once
