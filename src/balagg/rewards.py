"""GRPO rewards for math: the evaluation's verifier behind a per-sample timeout, plus DAPO's overlong penalty.

``MathReward`` is a TRL reward function (called with ``completions``, ``completion_ids`` and the dataset's
``answer`` column) returning, per response,

    r_i = (reward_correct if verify(answer_i, gold_i) else reward_incorrect) + overlong_penalty(|o_i|)

with DAPO's soft overlong punishment: for L_max = max completion length and buffer L_buf,

    overlong_penalty(L) = min(0, -(L - (L_max - L_buf)) / L_buf * factor)

(0 up to L_max - L_buf, falling linearly to -factor at L_max).

The verifier is ``balagg.evaluation.math.verify_math`` -- the very function the evaluation scores with --
run in a child process so that one pathological answer (sympy can hang on adversarial input) costs at
most ``timeout_s`` and counts as incorrect; a timed-out child is killed and replaced.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import re
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)

VERIFIER = "balagg.evaluation.math:verify_math"
"""``module:function`` of the verifier; the same one the evaluation uses."""

_ANSWER_LINE = re.compile(r"^\s*\**\s*answer\s*\**\s*:\s*\**\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


def load_verifier(spec: str = VERIFIER):
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def extract_answer_line(text: str) -> str | None:
    """The content of the last ``Answer: ...`` line of ``text`` (None if there is none)."""
    matches = _ANSWER_LINE.findall(text)
    return matches[-1] if matches else None


def overlong_penalty(length: int, max_length: int, buffer_length: int, factor: float) -> float:
    """DAPO's soft overlong punishment for a response of ``length`` tokens (<= 0)."""
    exceed = length - (max_length - buffer_length)
    return min(0.0, -exceed / buffer_length * factor)


def _verifier_worker(conn, spec: str) -> None:  # runs in the child process
    verify = load_verifier(spec)
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        text, gold = request
        try:
            conn.send(("ok", bool(verify(text, gold))))
        except Exception as error:  # a verifier crash on one answer is that answer's problem only
            conn.send(("error", f"{type(error).__name__}: {error}"))


class TimeoutVerifier:
    """Calls the verifier in a persistent child process with a per-sample deadline.

    ``__call__(text, gold) -> bool``; a timeout or crash returns False and is counted in ``timeouts`` /
    ``errors``. The child is started on first use and after a timeout (the hung one is killed)."""

    def __init__(self, timeout_s: float, spec: str = VERIFIER) -> None:
        if timeout_s <= 0:
            raise ValueError(f"verifier timeout must be positive, got {timeout_s}")
        self.timeout_s = timeout_s
        self.spec = spec
        self.timeouts = 0
        self.errors = 0
        self._process = None
        self._conn = None
        load_verifier(spec)  # fail early, in the parent, if the verifier cannot be imported

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        self._process = context.Process(target=_verifier_worker, args=(child, self.spec), daemon=True)
        self._process.start()
        child.close()
        self._conn = parent

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join()
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send(None)
            except OSError:
                pass
        self._kill()

    def __call__(self, text: str, gold: Any) -> bool:
        if self._process is None or not self._process.is_alive():
            self._kill()
            self._start()
        try:
            self._conn.send((text, gold))
            # the first call also waits for the child's start-up and imports
            ready = self._conn.poll(self.timeout_s + (30.0 if not getattr(self, "_warm", False) else 0.0))
            if ready:
                status, value = self._conn.recv()
                self._warm = True
                if status == "ok":
                    return value
                self.errors += 1
                log.warning("verifier error (counted as incorrect): %s", value)
                return False
        except (EOFError, OSError, BrokenPipeError) as error:
            self.errors += 1
            log.warning("verifier process failed (%s); restarting it", error)
            self._kill()
            return False
        self.timeouts += 1
        log.warning("verifier timed out after %.1f s (counted as incorrect); restarting it", self.timeout_s)
        self._kill()
        self._warm = False
        return False

    def __del__(self) -> None:
        try:
            self._kill()
        except Exception:
            pass


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
                 timeout_s: float, verifier: str = VERIFIER) -> None:
        if answer_format not in ("boxed", "answer-line"):
            raise ValueError(f"answer_format must be 'boxed' or 'answer-line', got {answer_format!r}")
        self.answer_format = answer_format
        self.reward_correct = reward_correct
        self.reward_incorrect = reward_incorrect
        self.max_completion_length = max_completion_length
        self.overlong_buffer_len = overlong_buffer_len
        self.overlong_penalty_factor = overlong_penalty_factor
        self.verify = TimeoutVerifier(timeout_s, verifier)
        self.last_correct: list[bool] = []

    def is_correct(self, text: str, gold: Any) -> bool:
        if self.answer_format == "answer-line":
            answer = extract_answer_line(text)
            if answer is None:
                return False
            text = f"\\boxed{{{answer}}}"
        return self.verify(text, gold)

    def __call__(self, completions: Sequence[Any], completion_ids: Sequence[Sequence[int]],
                 answer: Sequence[Any], **_: Any) -> list[float]:
        correct = [self.is_correct(_completion_text(c), gold) for c, gold in zip(completions, answer, strict=True)]
        rewards = [self.reward_correct if ok else self.reward_incorrect for ok in correct]
        if self.overlong_buffer_len:
            rewards = [r + overlong_penalty(len(ids), self.max_completion_length, self.overlong_buffer_len,
                                            self.overlong_penalty_factor)
                       for r, ids in zip(rewards, completion_ids, strict=True)]
        self.last_correct = correct
        return rewards
