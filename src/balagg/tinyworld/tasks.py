"""Synthetic verifiable tasks of the tiny world: arithmetic chains and one-line Python functions.

Arithmetic chain: ``Compute 7-1-2+5.`` with 1-5 operations, operands 1-9 and a
running value kept in 0..9, so every step is a single-digit fact. Its worked solution is one step per
operation and a final box:

    7-1=6. 6-2=4. 4+5=9. \\boxed{9}

A *flawed* solution (warm-start data only) gets one step, chosen uniformly, wrong by a near miss that
keeps the rest of the chain in 0..9; the error propagates to a wrong box. Style ``long`` also repeats the
step before the error 2-4 times (wrong answers ramble, so they are longer than right ones); style
``same`` does not (wrong and right answers have the same length); style ``short`` instead writes at
most one correct step and boxes a wrong guess (wrong answers are shorter).

Two training tasks (declared with their datasets in balagg.data.sources, as each benchmark's) differ in
difficulty and length profile, like DAPO-Math-17k and Polaris:

- ``dapo-math-17k``: verb ``Compute``, 1-4 steps uniformly, warm-start errors ramble.
- ``polaris-53k``: verb ``Evaluate``, 1-5 steps (harder on average, a wider length spread), warm-start
  errors cut the solution short.

The verb tells the warm-started model which error style it imitates, so one warm start per model gives
two length profiles. Measured at step 0 (800 warm-start steps, 64 problems x 8 samples, right/wrong mean
tokens): on dapo-math-17k wrong answers ramble (tiny-s 25.7/36.0, tiny-m 27.6/35.4; length CV 0.37); on
polaris-53k the length CV is higher (0.48) and the sign depends on the model: tiny-s 21.9/26.9 (longer
chains fail more often, which outweighs the shortcuts), tiny-m 26.0/23.9 (wrong answers shorter).

Code task (the LiveCodeBench stand-in): ``Write a function calc(x) that returns x-1+5.`` (call-based,
LeetCode-like) or ``Read an integer x from standard input and print x+4-2.`` (stdin, AtCoder-like); the
answer is a short Python program checked by tests.

Everything here is deterministic given a ``random.Random``; nothing imports torch.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

MIN_VALUE, MAX_VALUE = 0, 9
OPERANDS = range(1, 10)
OPS = ("+", "-")


def _apply(value: int, op: str, operand: int) -> int:
    return value + operand if op == "+" else value - operand


@dataclass(frozen=True)
class Chain:
    """``start op1 b1 op2 b2 ...``; ``values[k]`` is the running value after step k."""

    start: int
    ops: tuple[tuple[str, int], ...]

    @property
    def expression(self) -> str:
        return str(self.start) + "".join(f"{op}{b}" for op, b in self.ops)

    @property
    def values(self) -> list[int]:
        values, value = [], self.start
        for op, b in self.ops:
            value = _apply(value, op, b)
            values.append(value)
        return values

    @property
    def answer(self) -> int:
        return self.values[-1]

    @property
    def n_steps(self) -> int:
        return len(self.ops)


def sample_chain(rng: random.Random, n_steps: int) -> Chain:
    """A chain of ``n_steps`` operations whose running value stays in 0..9."""
    if n_steps < 1:
        raise ValueError(f"a chain needs at least one step, got {n_steps}")
    start = rng.choice(OPERANDS)
    value, ops = start, []
    for _ in range(n_steps):
        choices = [(op, b) for op in OPS for b in OPERANDS if MIN_VALUE <= _apply(value, op, b) <= MAX_VALUE]
        op, b = rng.choice(choices)
        ops.append((op, b))
        value = _apply(value, op, b)
    return Chain(start, tuple(ops))


def _step_text(a: int, op: str, b: int, result: int) -> str:
    return f"{a}{op}{b}={result}."


def _box(value: int) -> str:
    return f"\\boxed{{{value}}}"


def worked_solution(chain: Chain) -> str:
    """The right solution: one ``a op b = c.`` step per operation, then ``\\boxed{answer}``."""
    steps, value = [], chain.start
    for (op, b), result in zip(chain.ops, chain.values):
        steps.append(_step_text(value, op, b, result))
        value = result
    return " ".join(steps + [_box(chain.answer)])


ERROR_STYLES = ("long", "same", "short")


def flawed_solution(chain: Chain, rng: random.Random, style: str) -> tuple[str, int]:
    """A wrong solution and its (wrong) boxed answer; ``style`` is one of ``ERROR_STYLES`` (module doc)."""
    if style not in ERROR_STYLES:
        raise ValueError(f"unknown error style {style!r}; use one of {', '.join(ERROR_STYLES)}")
    if style == "short":  # at most one (correct) step, then a guess
        kept = rng.randint(0, min(1, chain.n_steps - 1))
        steps, value = [], chain.start
        for (op, b), result in zip(chain.ops[:kept], chain.values[:kept]):
            steps.append(_step_text(value, op, b, result))
            value = result
        guess = rng.choice([v for v in range(MIN_VALUE, MAX_VALUE + 1) if v != chain.answer])
        return " ".join(steps + [_box(guess)]), guess
    order = list(range(chain.n_steps))
    rng.shuffle(order)
    for j in order:  # the first step (random order) that admits an in-range near miss
        true = chain.values[j]
        candidates = [v for v in range(MIN_VALUE, MAX_VALUE + 1) if v != true]
        rng.shuffle(candidates)
        for wrong in candidates:
            values = _propagate(chain, j, wrong)
            if values is not None:
                return _render_flawed(chain, values, j, style, rng), values[-1]
    raise ValueError(f"no in-range error for chain {chain.expression}")  # impossible for 0..9 chains


def _propagate(chain: Chain, j: int, wrong: int) -> list[int] | None:
    values = list(chain.values[:j]) + [wrong]
    for op, b in chain.ops[j + 1:]:
        value = _apply(values[-1], op, b)
        if not MIN_VALUE <= value <= MAX_VALUE:
            return None
        values.append(value)
    return values


def _render_flawed(chain: Chain, values: list[int], j: int, style: str, rng: random.Random) -> str:
    steps, value = [], chain.start
    for k, ((op, b), result) in enumerate(zip(chain.ops, values)):
        steps.append(_step_text(value, op, b, result))
        value = result
    if style == "long":
        repeated = max(j - 1, 0)  # the step before the error (the error itself when it is the first)
        steps[repeated + 1:repeated + 1] = [steps[repeated]] * rng.randint(2, 4)
    return " ".join(steps + [_box(values[-1])])


@dataclass(frozen=True)
class ArithmeticTask:
    """A distribution of chain problems and the warm-start behaviour attached to its verb."""

    verb: str
    steps: dict[int, float]  # number of operations -> relative weight
    error_style: str  # style of flawed warm-start solutions: one of ERROR_STYLES
    p_wrong: float  # share of flawed solutions in the warm-start data

    def sample(self, rng: random.Random) -> Chain:
        n_steps = rng.choices(list(self.steps), weights=list(self.steps.values()))[0]
        return sample_chain(rng, n_steps)

    def problem(self, chain: Chain) -> str:
        return f"{self.verb} {chain.expression}."


@dataclass(frozen=True)
class CodeProblem:
    """A one-expression program: ``calc(x)`` returning ``x <ops>`` or a stdin/stdout script."""

    ops: tuple[tuple[str, int], ...]
    call_based: bool

    @property
    def expression(self) -> str:
        return "x" + "".join(f"{op}{b}" for op, b in self.ops)

    def evaluate(self, x: int) -> int:
        value = x
        for op, b in self.ops:
            value = _apply(value, op, b)
        return value

    @property
    def question(self) -> str:
        if self.call_based:
            return f"Write a function calc(x) that returns {self.expression}."
        return f"Read an integer x from standard input and print {self.expression}."

    @property
    def solution(self) -> str:
        """The gold program as a fenced block, the form code graders extract."""
        if self.call_based:
            body = f"def calc(x):\n    return {self.expression}"
        else:
            body = f"x = int(input())\nprint({self.expression})"
        return f"```python\n{body}\n```"

    @property
    def starter_code(self) -> str:
        return "class Solution:\n    def calc(self, x: int) -> int:\n        " if self.call_based else ""

    def test(self, x: int) -> dict:
        """One LiveCodeBench test case: JSON argument lines for call-based, stdin text otherwise."""
        if self.call_based:
            return {"input": str(x), "output": str(self.evaluate(x)), "testtype": "functional"}
        return {"input": f"{x}\n", "output": f"{self.evaluate(x)}\n", "testtype": "stdin"}


def sample_code_problem(rng: random.Random) -> CodeProblem:
    ops = tuple((rng.choice(OPS), rng.choice(OPERANDS)) for _ in range(rng.randint(1, 3)))
    return CodeProblem(ops=ops, call_based=rng.random() < 0.75)


@dataclass(frozen=True)
class WarmStartExample:
    """One supervised example: prompt text, completion text (no EOS), where it came from."""

    prompt: str
    completion: str
    source: str  # a training set of the registry (balagg.data.sources), or "code"
    correct: bool
    ends: bool = True  # the completion ends with EOS (False: it runs past the length limit, a loop)


def warm_start_examples(seed: int, n: int, code_share: float = 0.1) -> list[WarmStartExample]:
    """``n`` warm-start examples: both training tasks in equal parts (right solutions, and flawed ones
    at each task's ``p_wrong``), plus a ``code_share`` of code problems with their gold program."""
    if not 0.0 <= code_share < 1.0:
        raise ValueError(f"code_share must be in [0, 1), got {code_share}")
    from balagg.data.sources import tinyworld_tasks

    rng = random.Random(f"tinyworld-warm-start-{seed}")
    tasks = tinyworld_tasks("train")
    names = list(tasks)
    examples = []
    for _ in range(n):
        if rng.random() < code_share:
            problem = sample_code_problem(rng)
            examples.append(WarmStartExample(problem.question, problem.solution, "code", True))
            continue
        name = rng.choice(names)
        task = tasks[name]
        chain = task.sample(rng)
        if rng.random() < task.p_wrong:
            completion, _ = flawed_solution(chain, rng, task.error_style)
            examples.append(WarmStartExample(task.problem(chain), completion, name, False))
        else:
            examples.append(WarmStartExample(task.problem(chain), worked_solution(chain), name, True))
    return examples
