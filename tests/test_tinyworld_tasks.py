"""Synthetic tasks of the tiny world (balagg.tinyworld.tasks): solutions, errors, warm-start data."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from balagg.data.sources import tinyworld_tasks
from balagg.tinyworld.model import ALPHABET
from balagg.tinyworld.tasks import (
    flawed_solution,
    sample_chain,
    sample_code_problem,
    warm_start_examples,
    worked_solution,
)

TRAIN_TASKS, BENCH_TASKS = tinyworld_tasks("train"), tinyworld_tasks("benchmark")  # the registry's
STEP = re.compile(r"(\d+)([+-])(\d+)=(-?\d+)\.")
BOX = re.compile(r"\\boxed\{(-?\d+)\}$")


def parse(solution: str):
    steps = [(int(a), op, int(b), int(c)) for a, op, b, c in STEP.findall(solution)]
    box = BOX.search(solution)
    assert box, solution
    return steps, int(box.group(1))


@pytest.mark.parametrize("n_steps", [1, 2, 3, 4, 5])
def test_worked_solutions_are_correct_chains_in_range(n_steps):
    rng = random.Random(n_steps)
    for _ in range(200):
        chain = sample_chain(rng, n_steps)
        assert chain.n_steps == n_steps and 1 <= chain.start <= 9
        assert all(0 <= v <= 9 for v in chain.values)
        assert eval(chain.expression) == chain.answer  # noqa: S307 - our own digits and +/-
        steps, boxed = parse(worked_solution(chain))
        assert len(steps) == n_steps and boxed == chain.answer
        value = chain.start
        for a, op, b, c in steps:
            assert a == value and c == (a + b if op == "+" else a - b)
            value = c


def test_flawed_solutions_box_a_wrong_answer_and_ramble_only_in_long_style():
    rng = random.Random(0)
    extra = {"long": [], "same": [], "short": []}
    for _ in range(300):
        chain = sample_chain(rng, rng.randint(1, 4))
        right = worked_solution(chain)
        for style in ("long", "same", "short"):
            text, wrong = flawed_solution(chain, rng, style)
            steps, boxed = parse(text)
            assert boxed == wrong != chain.answer
            assert all(0 <= c <= 9 for *_, c in steps)
            arithmetic_errors = sum(c != (a + b if op == "+" else a - b) for a, op, b, c in steps)
            if style == "short":  # at most one correct step, then a guess
                assert arithmetic_errors == 0 and len(steps) <= min(1, chain.n_steps - 1)
            else:
                assert arithmetic_errors >= 1  # at least the one near miss (repeats of it in long style)
            extra[style].append(len(text) - len(right))
    assert all(d == 0 for d in extra["same"])  # same length as the right solution
    assert all(d < 0 for d in extra["short"])
    assert all(d > 0 for d in extra["long"]) and 14 <= sum(extra["long"]) / len(extra["long"]) <= 28
    with pytest.raises(ValueError, match="unknown error style"):
        flawed_solution(sample_chain(rng, 2), rng, "rambling")


def test_training_tasks_differ_in_difficulty_and_length_profile():
    rng = random.Random(1)
    stats = {}
    for name, task in TRAIN_TASKS.items():
        lengths = [len(worked_solution(task.sample(rng))) for _ in range(2000)]
        mean = sum(lengths) / len(lengths)
        cv = (sum((n - mean) ** 2 for n in lengths) / len(lengths)) ** 0.5 / mean
        stats[name] = (mean, cv)
    assert stats["polaris-53k"][0] > stats["dapo-math-17k"][0]  # longer chains on average
    assert stats["polaris-53k"][1] > stats["dapo-math-17k"][1] + 0.03  # and a wider spread
    assert TRAIN_TASKS["dapo-math-17k"].error_style == "long" and TRAIN_TASKS["polaris-53k"].error_style == "short"
    assert {t.verb for t in BENCH_TASKS.values()} == {t.verb for t in TRAIN_TASKS.values()}


def test_code_problems_gold_program_passes_its_tests():
    rng = random.Random(2)
    kinds = Counter()
    for _ in range(50):
        problem = sample_code_problem(rng)
        kinds[problem.call_based] += 1
        body = problem.solution.removeprefix("```python\n").removesuffix("\n```")
        for x in (-5, 0, 7):
            case = problem.test(x)
            if problem.call_based:
                scope: dict = {}
                exec(body, scope)  # noqa: S102 - our own generated one-liner
                assert str(scope["calc"](int(case["input"]))) == case["output"]
            else:
                printed = []
                exec(body, {"input": lambda: case["input"].strip(), "print": printed.append})  # noqa: S102
                assert f"{printed[0]}\n" == case["output"]
    assert kinds[True] > kinds[False] > 0


def test_warm_start_examples_are_deterministic_and_mixed_as_specified():
    a, b = warm_start_examples(3, 4000), warm_start_examples(3, 4000)
    assert a == b and a != warm_start_examples(4, 4000)
    sources = Counter(e.source for e in a)
    assert 0.07 < sources["code"] / len(a) < 0.13
    assert abs(sources["dapo-math-17k"] - sources["polaris-53k"]) < 0.1 * len(a)
    for name, task in TRAIN_TASKS.items():
        rows = [e for e in a if e.source == name]
        wrong = sum(not e.correct for e in rows) / len(rows)
        assert abs(wrong - task.p_wrong) < 0.05
        assert all(e.prompt.startswith(task.verb + " ") for e in rows)
        for e in rows[:200]:
            _, boxed = parse(e.completion)
            assert (boxed == eval(e.prompt.split()[1].rstrip("."))) == e.correct  # noqa: S307
    assert set("".join(e.prompt + e.completion for e in a)) <= set(ALPHABET)
