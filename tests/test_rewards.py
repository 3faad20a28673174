"""balagg.rewards: DAPO's overlong penalty, answer extraction, and a verifier that cannot hang the trainer."""

from __future__ import annotations

import time

import pytest

from balagg.rewards import MathReward, TimeoutVerifier, extract_answer_line, overlong_penalty

STUB = "verifier_stubs:hangs_on_request"


def test_overlong_penalty_is_dapos_linear_ramp():
    # L_max 20, buffer 4: free up to 16, then -1/4 per token, -1 at 20
    assert [overlong_penalty(n, 20, 4, 1.0) for n in (1, 16, 17, 18, 20)] == [0.0, 0.0, -0.25, -0.5, -1.0]
    assert overlong_penalty(20, 20, 4, 0.5) == -0.5


def test_answer_line_takes_the_last_answer_line():
    text = "Answer: 3\nno wait\n**Answer:** 41 \n"
    assert extract_answer_line(text) == "41"
    assert extract_answer_line("no answer here") is None


def test_a_hanging_verifier_costs_one_timeout_and_counts_as_wrong():
    verify = TimeoutVerifier(timeout_s=1.0, spec=STUB)
    try:
        assert verify("\\boxed{7}", "7") is True  # starts the worker
        start = time.monotonic()
        assert verify("hang", "7") is False
        assert time.monotonic() - start < 10
        assert verify.timeouts == 1
        assert verify("crash", "7") is False and verify.errors == 1
        assert verify("\\boxed{7}", ["7"]) is True  # a fresh worker replaced the hung one
        assert verify("\\boxed{8}", "7") is False
    finally:
        verify.close()


def test_math_reward_combines_correctness_and_overlong_penalty():
    reward = MathReward(answer_format="answer-line", reward_correct=1.0, reward_incorrect=-1.0,
                        max_completion_length=10, overlong_buffer_len=4, overlong_penalty_factor=1.0,
                        timeout_s=5.0, verifier=STUB)
    try:
        completions = [[{"role": "assistant", "content": "Answer: 7"}], [{"role": "assistant", "content": "7"}],
                       [{"role": "assistant", "content": "Answer: 7"}]]
        rewards = reward(completions=completions, completion_ids=[[0] * 3, [0] * 3, [0] * 8],
                         answer=[["7"], ["7"], ["7"]])
        assert rewards == [1.0, -1.0, 1.0 - 0.5]
        assert reward.last_correct == [True, False, True]
    finally:
        reward.verify.close()


def test_missing_verifier_fails_at_construction():
    with pytest.raises(ModuleNotFoundError):
        TimeoutVerifier(timeout_s=1.0, spec="no_such_module_xyz:verify")
