"""Hub ids through huggingface_hub's cache, with no network: fetch records the revisions, generation
evaluates a hub model's step 0 from its snapshot, data preparation reads a hub dataset's snapshot.

The cache is pre-filled in huggingface_hub's own layout (balagg.tinyworld.hubcache), as the fetch stage
would leave it; HF_HUB_OFFLINE=1 makes any attempt to reach the hub an error."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"

from balagg.cli import main  # noqa: E402
from balagg.hub import is_hub_id, resolve_snapshot  # noqa: E402
from balagg.io import read_jsonl, write_jsonl  # noqa: E402
from balagg.tinyworld.hubcache import fill_hub_cache, put_snapshot, repo_folder  # noqa: E402

MODEL = "Qwen/Qwen3-1.7B"
DATASETS = {"math500": "HuggingFaceH4/MATH-500", "dapo-math-17k": "BytedTsinghua-SIA/DAPO-Math-17k",
            "olympiadbench": "Hothan/OlympiadBench"}


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("hf")
    fill_hub_cache(home, [MODEL], DATASETS, train_problems=8, bench_problems=3)
    return home


@pytest.fixture
def cache_env(hf_home, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    return hf_home


def test_stand_ins_lie_in_huggingface_hubs_layout(hf_home):
    """snapshot_download itself (local_files_only) finds them: refs/main -> snapshots/<commit>, blobs."""
    from huggingface_hub import snapshot_download

    root = repo_folder(hf_home, MODEL, "model")
    assert root.name == "models--Qwen--Qwen3-1.7B"
    commit = (root / "refs" / "main").read_text()
    path = Path(snapshot_download(MODEL, cache_dir=hf_home / "hub", local_files_only=True))
    assert path == root / "snapshots" / commit
    assert (path / "config.json").is_symlink() and (path / "config.json").resolve().parent == root / "blobs"
    assert json.loads((path / "config.json").read_text())["model_type"] == "qwen3"
    assert "<think>" in (path / "tokenizer.json").read_text()


def test_same_content_same_commit(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.txt").write_text("1")
    first = put_snapshot(tmp_path / "h1", "o/r", "dataset", tmp_path / "a")
    assert put_snapshot(tmp_path / "h2", "o/r", "dataset", tmp_path / "a") == first
    (tmp_path / "a" / "x.txt").write_text("2")
    assert put_snapshot(tmp_path / "h1", "o/r", "dataset", tmp_path / "a") != first


def test_hub_ids_are_told_from_paths(tmp_path, monkeypatch):
    assert is_hub_id("Qwen/Qwen3-1.7B") and not is_hub_id("tinyworld") and not is_hub_id("/abs/path")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert not is_hub_id("org/name")  # an existing local folder wins


def test_fetch_offline_records_every_commit(cache_env, tmp_path, capsys):
    out = tmp_path / "fetch.json"
    args = ["fetch", "--hf-home", str(cache_env), "--model", MODEL, "--out", str(out)]
    for name, repo in DATASETS.items():
        args += ["--dataset", f"{name}={repo}"]
    assert main(args) == 0
    record = json.loads(out.read_text())
    repos = {r["repo_id"]: r for r in record["repos"]}
    assert set(repos) == {MODEL, *DATASETS.values()}
    for repo_id, r in repos.items():
        kind = "model" if repo_id == MODEL else "dataset"
        assert r["commit"] == (repo_folder(cache_env, repo_id, kind) / "refs" / "main").read_text()
        assert Path(r["path"]).is_dir()
    # what is downloaded of a dataset comes from the data registry: one file, or one subset
    assert repos["BytedTsinghua-SIA/DAPO-Math-17k"]["allow_patterns"][0] == "data/dapo-math-17k.parquet"
    assert "OE_TO_maths_en_COMP/*" in repos["Hothan/OlympiadBench"]["allow_patterns"]
    assert repos["HuggingFaceH4/MATH-500"]["allow_patterns"] is None


def test_fetch_offline_names_a_missing_repository(cache_env, tmp_path, capsys):
    code = main(["fetch", "--hf-home", str(cache_env), "--model", "Qwen/Not-There", "--out", str(tmp_path / "f.json")])
    err = capsys.readouterr().err
    assert code == 2 and "Qwen/Not-There" in err and "HF_HUB_OFFLINE=1" in err
    assert not (tmp_path / "f.json").exists()


def test_step0_generation_takes_a_hub_id(cache_env, tmp_path):
    """generate() takes a hub id as well as a local folder: the id resolves to its cached snapshot."""
    from balagg.evaluation.generation.generate import generate
    from balagg.evaluation.generation.requests import GenerationConfig

    write_jsonl(tmp_path / "bench" / "math500.jsonl",
                [{"id": "math500-0", "benchmark": "math500", "kind": "math", "problem": "1+1?", "answer": "2"}])
    config = GenerationConfig(n=2, max_tokens=8, backend="transformers", chat_template=True)
    summary = generate(MODEL, tmp_path / "bench", ["math500"], tmp_path / "out", config)
    assert summary.benchmarks == {"math500": 2}
    record = json.loads((tmp_path / "out" / "generation.json").read_text())
    assert record["source"] == MODEL and Path(record["checkpoint"]) == resolve_snapshot(MODEL)
    assert len(list(read_jsonl(tmp_path / "out" / "generations.jsonl"))) == 2


def test_training_and_evaluation_load_a_hub_ids_tokenizer_from_the_cache(cache_env):
    """The train job's tokenizer is its model's hub id (cell.tokenizer defaults to the model): the one
    tokenizer loader resolves it to the cached snapshot, offline."""
    from balagg.prompts import load_tokenizer

    tokenizer = load_tokenizer(MODEL)
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None
    assert tokenizer("1 + 1")["input_ids"]


def test_a_hub_id_missing_from_the_cache_says_to_fetch(cache_env, tmp_path):
    from balagg.evaluation.generation.generate import generate

    with pytest.raises(ValueError, match=r"Qwen/Qwen2.5-Math-7B is not in the hub cache .* balagg fetch"):
        generate("Qwen/Qwen2.5-Math-7B", tmp_path, ["math500"], tmp_path / "out")


@pytest.mark.parametrize("name", ["math500", "dapo-math-17k", "olympiadbench"])
def test_prepare_reads_a_hub_dataset_from_its_snapshot(cache_env, tmp_path, name):
    from balagg.data.prepare import prepare

    report = prepare(name, DATASETS[name], tmp_path / f"{name}.jsonl")
    assert report.written == (8 if name == "dapo-math-17k" else 3)
    assert all(r["id"] for r in read_jsonl(tmp_path / f"{name}.jsonl"))


def test_hub_cache_command_layers_configs_as_snakemake(tmp_path, capsys):
    """`tinyworld hub-cache` reads paper.yaml + rehearsal.yaml like `--configfile a b`: the paper's ids."""
    from balagg.campaign import load

    root = Path(__file__).resolve().parents[1] / "configs"
    config = load([str(root / "paper.yaml"), str(root / "rehearsal.yaml")]).config
    assert config["models"]["qwen3-1.7b"]["path"] == MODEL and config["models"]["qwen3-1.7b"]["chat_template"] is True
    assert config["models"]["qwen3-1.7b"]["train_resources"]["gpus"] == 2
    assert config["train"]["accelerate_config"] == "configs/accelerate/fsdp2.yaml"
    assert config["train"]["total_steps"] < 10 and config["train"]["learning_rate"] == 1.0e-6
