"""balagg.rewards: DAPO's overlong penalty, answer extraction, and a verifier that cannot hang the trainer."""

from __future__ import annotations

import time

import pytest

from balagg.prompts import extract_answer_line
from balagg.rewards import MathReward, overlong_penalty

STUB = "verifier_stubs:hangs_on_request"


def test_overlong_penalty_is_dapos_linear_ramp():
    # L_max 20, buffer 4: free up to 16, then -1/4 per token, -1 at 20
    assert [overlong_penalty(n, 20, 4, 1.0) for n in (1, 16, 17, 18, 20)] == [0.0, 0.0, -0.25, -0.5, -1.0]
    assert overlong_penalty(20, 20, 4, 0.5) == -0.5


def test_answer_line_takes_the_last_answer_line():
    text = "Answer: 3\nno wait\n**Answer:** 41 \n"
    assert extract_answer_line(text) == "41"
    assert extract_answer_line("no answer here") is None


def make_reward(**changes):
    settings = dict(answer_format="answer-line", reward_correct=1.0, reward_incorrect=-1.0,
                    max_completion_length=10, overlong_buffer_len=4, overlong_penalty_factor=1.0, timeout_s=1.0,
                    workers=1, verifier=STUB)
    return MathReward(**(settings | changes))


def message(text):
    return [{"role": "assistant", "content": text}]


def test_a_hanging_verifier_costs_one_timeout_and_counts_as_wrong():
    reward = make_reward(answer_format="boxed")
    try:
        start = time.monotonic()
        rewards = reward(completions=[message("\\boxed{7}"), message("hang"), message("crash"), message("\\boxed{7}")],
                         completion_ids=[[0]] * 4, answer=[["7"]] * 4)
        assert time.monotonic() - start < 30
        assert rewards == [1.0, -1.0, -1.0, 1.0]  # the samples after the hung one are still verified
        assert (reward.timeouts, reward.errors) == (1, 1)
        assert reward(completions=["\\boxed{7}"], completion_ids=[[0]], answer=["7"]) == [1.0]  # fresh worker
    finally:
        reward.close()


def test_math_reward_combines_correctness_and_overlong_penalty():
    reward = make_reward(timeout_s=5.0)
    try:
        completions = [message("Answer: 7"), message("7"), message("Answer: 7")]
        rewards = reward(completions=completions, completion_ids=[[0] * 3, [0] * 3, [0] * 8],
                         answer=[["7"], ["7"], ["7"]])
        assert rewards == [1.0, -1.0, 1.0 - 0.5]
        assert reward.last_correct == [True, False, True]
    finally:
        reward.close()


def test_missing_verifier_fails_at_construction():
    with pytest.raises(ModuleNotFoundError):
        make_reward(verifier="no_such_module_xyz:verify")
    with pytest.raises(ValueError, match="has no"):
        make_reward(verifier="verifier_stubs:no_such_function")


def test_default_verifier_is_the_evaluations_verify_math():
    pytest.importorskip("math_verify")
    reward = make_reward(verifier="balagg.evaluation.verify.math_verifier:verify_math", answer_format="boxed", timeout_s=10.0)
    try:
        texts = ["so it is \\boxed{\\frac{1}{2}}", "\\boxed{0.5}", "\\boxed{2}", "no box at all: 1/3"]
        assert reward.correctness([message(t) for t in texts], [["\\frac{1}{2}"]] * 3 + [["5"]]) == [
            True, True, False, False]
    finally:
        reward.close()
