"""GRPO rewards for math: the evaluation's verifier behind a per-sample timeout, plus DAPO's overlong penalty.

``MathReward`` is a TRL reward function (called with ``completions``, ``completion_ids`` and the dataset's
``answer`` column) returning, per response,

    r_i = (reward_correct if verify(answer_i, gold_i) else reward_incorrect) + overlong_penalty(|o_i|)

with DAPO's soft overlong punishment: for L_max = max completion length and buffer L_buf,

    overlong_penalty(L) = min(0, -(L - (L_max - L_buf)) / L_buf * factor)

(0 up to L_max - L_buf, falling linearly to -factor at L_max).

The verifier is ``balagg.evaluation.verify.math_verifier.verify_math`` -- the very function the evaluation scores with --
run through the evaluation's :class:`~balagg.evaluation.verify.pool.VerifierPool`: worker processes with a hard
per-sample timeout, so one pathological answer (sympy can hang on adversarial input) costs at most
``timeout_s`` and counts as incorrect; a timed-out worker is killed and replaced.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from typing import Any

from balagg import settings
from balagg.evaluation.verify.pool import VerifierPool
from balagg.prompts import ANSWER_FORMATS, answer_for_verifier

log = logging.getLogger(__name__)


def overlong_penalty(length: int, max_length: int, buffer_length: int, factor: float) -> float:
    """DAPO's soft overlong punishment for a response of ``length`` tokens (<= 0)."""
    exceed = length - (max_length - buffer_length)
    return min(0.0, -exceed / buffer_length * factor)


def _completion_text(completion: Any) -> str:
    """Text of a TRL completion: a string, or a list of chat messages (the assistant's content)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise ValueError(f"unexpected completion format: {type(completion).__name__}")


class MathReward:
    """TRL reward function: verifier correctness plus DAPO's overlong penalty (module docstring).

    After each call ``last_correct`` holds the correctness flags of that call's responses (the trainer
    turns them into the accuracy metric)."""

    __name__ = "math"

    def __init__(self, *, answer_format: str, reward_correct: float, reward_incorrect: float,
                 max_completion_length: int, overlong_buffer_len: int | None, overlong_penalty_factor: float,
                 timeout_s: float, workers: int = settings.VERIFIER.workers,
                 verifier: str = settings.VERIFIER.verifier) -> None:
        if answer_format not in ANSWER_FORMATS:
            raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {answer_format!r}")
        self.answer_format = answer_format
        self.reward_correct = reward_correct
        self.reward_incorrect = reward_incorrect
        self.max_completion_length = max_completion_length
        self.overlong_buffer_len = overlong_buffer_len
        self.overlong_penalty_factor = overlong_penalty_factor
        module, _, name = verifier.partition(":")
        if not hasattr(importlib.import_module(module), name):  # fail here, not in a worker
            raise ValueError(f"verifier {verifier!r}: {module} has no {name}")
        self.pool = VerifierPool(workers=workers, timeout_s=timeout_s, verifier=verifier)
        self.timeouts = 0
        self.errors = 0
        self.last_correct: list[bool] = []

    def start(self) -> None:
        """Start the verifier workers now rather than at the first batch (:meth:`VerifierPool.start`)."""
        self.pool.start()

    def close(self) -> None:
        self.pool.close()

    def answer_text(self, completion: Any) -> str | None:
        """What the verifier sees (:func:`balagg.prompts.answer_for_verifier`, as the evaluation's scoring)."""
        return answer_for_verifier(_completion_text(completion), self.answer_format)

    def correctness(self, completions: Sequence[Any], golds: Sequence[Any]) -> list[bool]:
        texts = [self.answer_text(c) for c in completions]
        asked = [i for i, text in enumerate(texts) if text is not None]
        result = self.pool.verify([(texts[i], golds[i]) for i in asked])
        if result.timed_out or result.errors:
            self.timeouts += len(result.timed_out)
            self.errors += len(result.errors)
            log.warning("verifier: %d timed out, %d errors in this batch (scored incorrect); first error: %s",
                        len(result.timed_out), len(result.errors), next(iter(result.errors.values()), "-"))
        correct = [False] * len(texts)
        for i, verdict in zip(asked, result.verdicts, strict=True):
            correct[i] = verdict
        return correct

    def __call__(self, completions: Sequence[Any], completion_ids: Sequence[Sequence[int]],
                 answer: Sequence[Any], **_: Any) -> list[float]:
        if not len(completions) == len(completion_ids) == len(answer):
            raise ValueError("completions, completion_ids and answer must have one entry per response")
        correct = self.correctness(completions, answer)
        rewards = [self.reward_correct if ok else self.reward_incorrect for ok in correct]
        if self.overlong_buffer_len:
            rewards = [r + overlong_penalty(len(ids), self.max_completion_length, self.overlong_buffer_len,
                                            self.overlong_penalty_factor)
                       for r, ids in zip(rewards, completion_ids, strict=True)]
        self.last_correct = correct
        return rewards
