"""balagg.prompts: a problem's training prompt (as TRL tokenizes it) is its evaluation prompt, the answer
extraction reads what the instruction asks for, and the paper grid's models agree on one choice."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import yaml

from balagg.evaluation.generation.generate import prompt_ids as evaluation_prompt_ids
from balagg.evaluation.generation.requests import GenerationConfig
from balagg.prompts import (
    DAPO_TEMPLATE,
    MATH_TEMPLATE,
    PromptFormat,
    answer_for_verifier,
    prompt_ids,
    render_prompt,
    trl_prompt,
)
from balagg.train.config import CellConfig, grpo_config_kwargs
from balagg.train.data import build_prompts

REPO = Path(__file__).resolve().parents[1]

# Qwen3's template logic in ASCII (the tiny world's tokenizer is character level): thinking off pre-fills
# an empty think block, as Qwen3's own template does.
THINKING_TEMPLATE = (
    "{%- for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{%- endif %}"
    "{%- endif %}"
)
PROBLEMS = ["What is $1+\\frac{1}{2}$?", "Find x if 2x = {4}."]


@pytest.fixture(scope="module")
def tokenizer():
    from balagg.tinyworld.model import build_tokenizer

    tok = build_tokenizer()
    tok.chat_template = THINKING_TEMPLATE
    return tok


def trl_tokenize(tokenizer, prompts, chat_template_kwargs):
    """TRL 1.16's own GRPOTrainer._tokenize_prompts on a minimal trainer object."""
    from trl import GRPOTrainer

    fake = types.SimpleNamespace(processing_class=tokenizer, chat_template=None, tools=None,
                                 chat_template_kwargs=chat_template_kwargs, environment_factories=None,
                                 _is_vlm=False)
    prompt_ids, _, _ = GRPOTrainer._tokenize_prompts(fake, prompts)
    return [list(ids) for ids in prompt_ids]


def training_cell(tmp_path, chat, thinking, template=DAPO_TEMPLATE):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{i}", "problem": p, "answer": "1"}) + "\n"
                            for i, p in enumerate(PROBLEMS)))
    return CellConfig(model="m", train_files=[str(data)], aggregator="balanced-agg", seed=0,
                      prompt_template=template, chat_template=chat, enable_thinking=thinking,
                      prompts_per_step=2, num_generations=2, mini_batches=1, micro_batch_size=4,
                      max_prompt_length=1000, max_completion_length=8, overlong_buffer_len=4, save_every=1)


@pytest.mark.parametrize(("chat", "thinking"), [(False, None), (True, None), (True, True), (True, False)])
def test_training_prompt_as_trl_tokenizes_it_is_the_evaluation_prompt(tmp_path, tokenizer, chat, thinking):
    cell = training_cell(tmp_path, chat, thinking)
    dataset = build_prompts(cell, tokenizer)
    kwargs = grpo_config_kwargs(cell, str(tmp_path)).get("chat_template_kwargs", {})
    trained = trl_tokenize(tokenizer, [row["prompt"] for row in dataset], kwargs)
    generation = GenerationConfig(chat_template=chat, enable_thinking=thinking,
                                  math_template=DAPO_TEMPLATE, answer_format="answer-line")
    evaluated = [evaluation_prompt_ids({"id": f"p{i}", "kind": "math", "problem": p}, tokenizer, generation)
                 for i, p in enumerate(PROBLEMS)]
    assert trained == evaluated
    text = tokenizer.decode(evaluated[1])
    assert "Find x if 2x = {4}." in text and 'after "Answer:".' in text
    assert ("<|im_start|>user" in text) == chat
    assert text.endswith("</think>") == (thinking is False)


def test_enable_thinking_reaches_both_stages(tmp_path, tokenizer):
    # the switch must change the prompt, in training (TRL's kwargs) and in evaluation alike
    on, off = (grpo_config_kwargs(training_cell(tmp_path, True, flag), str(tmp_path))["chat_template_kwargs"]
               for flag in (True, False))
    assert on == {"enable_thinking": True} and off == {"enable_thinking": False}
    assert "chat_template_kwargs" not in grpo_config_kwargs(training_cell(tmp_path, True, None), str(tmp_path))
    ids = [prompt_ids(tokenizer, "q", PromptFormat(chat=True, enable_thinking=flag)) for flag in (True, False)]
    assert ids[0] != ids[1]
    assert PromptFormat(chat=False, enable_thinking=True).chat_template_kwargs() == {}


def test_templates_are_filled_literally_so_latex_braces_need_no_escaping():
    assert render_prompt(MATH_TEMPLATE, problem="2+{x}") == (
        "2+{x}\nPlease reason step by step, and put your final answer within \\boxed{}.")
    assert render_prompt("{problem}: {code_instructions}", problem="p", code_instructions="c") == "p: c"
    with pytest.raises(ValueError, match="must contain the placeholder"):
        CellConfig(model="m", train_files=["t.jsonl"], aggregator="seq-agg", seed=0, prompt_template="no placeholder")
    assert trl_prompt("t", PromptFormat(chat=True, system_prompt="s")) == [
        {"role": "system", "content": "s"}, {"role": "user", "content": "t"}]


def test_answer_line_extraction_reads_what_the_dapo_instruction_asks_for():
    follows = "Let me add.\n1 + 1/2 = 3/2\nAnswer: \\frac{3}{2}"
    assert answer_for_verifier(follows, "answer-line") == "\\boxed{\\frac{3}{2}}"
    assert answer_for_verifier("so \\boxed{3/2}", "answer-line") is None  # not what the prompt asked for
    # after the reasoning only: an Answer: line inside the thinking does not count, an unclosed one neither
    assert answer_for_verifier("<think>Answer: 1</think>\nAnswer: 2", "answer-line") == "\\boxed{2}"
    assert answer_for_verifier("<think>Answer: 2", "answer-line") is None
    assert answer_for_verifier("<think>x</think> \\boxed{2}", "boxed") == " \\boxed{2}"
    with pytest.raises(ValueError, match="answer_format"):
        answer_for_verifier("x", "last-number")


def test_reward_and_scoring_agree_on_the_answer_line(tmp_path):
    from balagg.evaluation.scoring.score import ScoreConfig, score
    from balagg.rewards import MathReward

    texts = ["work\nAnswer: 34", "\\boxed{34}", "<think>Answer: 34", "<think>hm</think>Answer: 35"]
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "aime24.jsonl").write_text(json.dumps(
        {"id": "a-0", "benchmark": "aime24", "kind": "math", "problem": "?", "answer": "34"}) + "\n")
    run = tmp_path / "step-000000"
    run.mkdir()
    (run / "generations.jsonl").write_text("".join(json.dumps(
        {"benchmark": "aime24", "problem_id": "a-0", "sample": s, "seed": s, "text": t, "finish_reason": "stop",
         "num_tokens": 3}) + "\n" for s, t in enumerate(texts)))
    (run / "generation.json").write_text(json.dumps({"checkpoint": "c", "config": {"answer_format": "answer-line"}}))
    summary = score(run / "generations.jsonl", bench, run, ScoreConfig(workers=1))
    flags = json.loads((run / "scores.jsonl").read_text())["correct"]
    assert flags == [1, 0, 0, 0] and summary["answer_format"] == "answer-line"
    assert summary["benchmarks"]["aime24"]["no_answer"] == 2
    reward = MathReward(answer_format="answer-line", reward_correct=1.0, reward_incorrect=-1.0,
                        max_completion_length=100, overlong_buffer_len=None, overlong_penalty_factor=1.0,
                        timeout_s=10.0, workers=1)
    try:
        assert reward(texts, [[0]] * 4, [["34"]] * 4) == [1.0, -1.0, -1.0, -1.0]
    finally:
        reward.close()
    # read as boxed answers (the whole text after the reasoning) the bare box counts too: the format decides
    boxed = score(run / "generations.jsonl", bench, run, ScoreConfig(workers=1, answer_format="boxed"))
    assert json.loads((run / "scores.jsonl").read_text())["correct"] == [1, 1, 0, 0]
    assert boxed["answer_format"] == "boxed"


def test_boxed_strict_reads_no_answer_without_a_box_in_reward_scoring_and_the_tiny_models_card():
    """A truncated loop ending on a right value is credited by math-verify's last-expression fallback
    under ``boxed``; under ``boxed-strict`` (the laboratory) it is no answer, in all three readers."""
    from balagg.rewards import MathReward
    from balagg.tinyworld.warmstart import answer_checker

    loop, boxed = "3+6=9. 3+6=9. 3+6=9. 3+6=9", "3+6=9. \\boxed{9}"
    assert answer_for_verifier(loop, "boxed-strict") is None
    assert answer_for_verifier(boxed, "boxed-strict") == boxed
    loose, strict = answer_checker("boxed")[1], answer_checker("boxed-strict")[1]
    assert loose(loop, "9") and not strict(loop, "9")
    assert loose(boxed, "9") and strict(boxed, "9") and not strict("\\boxed{8}", "9")
    reward = MathReward(answer_format="boxed-strict", reward_correct=1.0, reward_incorrect=0.0,
                        max_completion_length=100, overlong_buffer_len=None, overlong_penalty_factor=1.0,
                        timeout_s=10.0, workers=1)
    try:
        assert reward([loop, boxed], [[0], [0]], ["9", "9"]) == [0.0, 1.0]
    finally:
        reward.close()


def test_paper_grid_example_cell_and_docs_make_one_prompt_choice_per_model():
    paper = yaml.safe_load((REPO / "configs/paper.yaml").read_text())
    for name, spec in paper["models"].items():
        template, fmt = spec["math_template"], spec["answer_format"]
        assert spec["chat_template"] is True, name
        assert (template, fmt) == (DAPO_TEMPLATE, "answer-line"), name  # the instruction asks for Answer:
        assert "{problem}" in template and "Answer:" in template and "\\boxed" not in template
    assert paper["models"]["qwen3-1.7b"]["enable_thinking"] is True  # chosen explicitly, not left to default
    cell = json.loads((REPO / "configs/cells/example-qwen2.5-math-7b-dapo.json").read_text())
    qwen_math = paper["models"]["qwen2.5-math-7b"]
    assert (cell["prompt_template"], cell["answer_format"], cell["chat_template"]) == (
        qwen_math["math_template"], qwen_math["answer_format"], qwen_math["chat_template"])
    assert cell["max_position_embeddings"] == qwen_math["max_position_embeddings"]
    CellConfig.from_dict(cell)  # still a valid cell
    docs = (REPO / "docs/training.md").read_text()
    assert "DAPO_TEMPLATE" in docs and "enable_thinking: true" in docs
