"""Length regimes of the laboratory (docs/laboratory.md): where right and wrong answers differ in length.

A regime decides the worked solutions a tiny model is warm-started on, hence how its sampled right and
wrong answers differ in length, *in tokens* (the tokenizer is character level: a step ``7-1=6. `` is
:data:`STEP_TOKENS` tokens, an inverse check ``6+1=7. `` as many, ``\\boxed{6}`` 9, plus EOS). Each
regime puts the length where the policy cannot drop it without changing whether it is right:

- ``wrong-long``: on chains of two or more steps a wrong answer gets stuck on its first step: it writes
  it (with a near-miss error) and repeats it until the length limit (``loop_tokens``; no box, no EOS,
  so a sampled loop is truncated). The loop starts at a fixed place (after the first step) so that the
  verifier, which reads the last equation of an unboxed answer, sees an intermediate value, almost
  never the final answer; a loop after the *last* step would be credited whenever that step is right
  (the first version of this regime looped after the erroneous step and measured a side-mass ratio of
  1.03 at step 0 for that reason, docs/laboratory.md). One-step chains fail by a near-miss error.
  Right answers are the plain chain. Negative side much longer.
- ``right-long``: every step is followed by its inverse check; a wrong answer is a *premature stop*: it
  boxes the running value after j < n steps (necessarily shorter than the full chain). Positive side
  much longer.
- ``spread``: right and wrong answers alike repeat one step ``repeats`` times (uniform, independent of
  correctness); wrong answers carry a near-miss error. A large within-side spread and no gap.
- ``wrong-long-retry`` (a candidate successor of ``wrong-long``, not in the laboratory grid): an
  attempt that makes a near-miss error stops right after the erroneous step and writes ``retry:``; a
  wrong answer is ``retries`` such attempts and a last one that boxes its erroneous value, a right
  answer is the plain chain, after one failed attempt in ``right_retry_share`` of them. Unlike a loop,
  the length of a wrong answer is effort that pays on other samples (a retry can end right). The
  hope was that the policy could not drop it without losing reward; its probe (docs/laboratory.md)
  found that it does drop it: the ratio falls from 1.4 to 1.0 as the policy retries less.
- ``wrong-long-doubt`` (a second candidate successor, not in the laboratory grid): a wrong answer is the
  *right* chain, then second-guessing that never ends: ``wait:`` and the last step restated with a
  wrong result, repeated until the length limit (no box, no EOS). Right answers are the plain chain.
  The one token after the chain (``wait:`` or the box) decides both the length and the reward, and
  every chain in the data is right, so there is no short wrong answer to learn apart from the model's
  own slips. Its probe (docs/laboratory.md) found the ratio at 3.3 at step 0 and at or above 1.5 in
  about 60 % of 200 steps, ending near 1.1-1.4: the policy stops doubting (truncation 0.37 -> 0.01)
  while its slips, which it does not unlearn, become most of its wrong answers.
- ``wrong-long-doubt-hmm``: ``wrong-long-doubt`` with a tail of ``hmm`` repeated instead of the
  restated step (``doubt_tail="filler"``): characters that no right answer contains. Why: in the
  first probe the slips *rose* during training (5 % of samples at the start, 10-16 % later), and
  pushing down a tail that repeats the chain's own operands may push down copying them in the chain.
  Its probe (docs/laboratory.md) refuted that: the ratio held in 51-58 % of the steps; the slips rose
  in one seed without the restated tail and stayed in the other, where doubting decayed all the same.
- ``wrong-long-check`` (a third candidate successor, not in the laboratory grid): every step is followed
  by its inverse check, computed honestly from the step's result (``7-1=5. 5+1=6.``: the check does not
  give back the step's first operand). A wrong answer makes a near-miss error, checks it, and gets
  stuck: the erroneous step and its failed check repeated until the length limit (no box, no EOS). A
  right answer is the checked chain, boxed. Why: in the five designs above the long side was a choice
  the policy learned away while its own slips, which were short, stayed. Here the length follows a
  *failed check*, which the model's own slips produce as well as the data's errors, so a wrong answer
  is long whatever made it wrong, and the only way out of the loop is a step that checks.
  Its probe (docs/laboratory.md) refuted that: the model copies the step's first operand into the check
  instead of computing it (``1+2=4. 4-2=1.``), so its own slips pass their checks and end short; the
  loops fell from 48 % of samples to 10-17 % and the ratio was at or above 1.5 in 4-7 % of 200 steps.
- ``wrong-long-walk`` (family ``walks``: the tiny world's walk problems, balagg.tinyworld.walks): right
  answers are the walk to 0 and the count boxed; a wrong answer has one near-miss (odd) slip and goes on
  by the task's rule, never reaching 0, until the length limit (no box, no EOS). The length follows
  the slip by the task's own rule, whatever made it. Its probe (bench/walk_probe.py, docs/laboratory.md)
  held token-agg's ratio at or above 1.5 in 81-89 % of the steps with mixed groups through 200 steps,
  the first design to do so, while the policy nearly stopped erring (accuracy 0.97-0.99).
- ``right-long-walk`` (family ``walks``): its mirror. The same problems and slips (the same stream), but a
  wrong answer *stops* at its odd value (EOS, no box): an odd value ends the walk by the task's rule, as 0
  ends a right one. A wrong answer is the walk up to its slip, so shorter than the whole walk, whatever
  made it; a right answer cannot be shorter than the walk. Positive side much longer. Its probes
  (docs/laboratory.md) and the laboratory held the ratio at or below 0.67 in 65-70 % of the steps: the
  policy's own slips that keep the walk even go on, reach 0 at another count and end long.
- ``right-long-walk4`` (family ``walks4``): the same mirror on the lattice of 4 mod 80 (the same problems,
  doubled), so a ±2 or tens-digit slip also leaves the lattice and ends the walk; near misses ±1, ±2,
  ±10, and 60 % flawed examples, so that near misses are unlearned more slowly. Its probe held the ratio
  at or below 0.67 in 87-90 % of the steps, and in every tenth (docs/laboratory.md, "An eighth design").

The knobs (:class:`Regime`) are the share of flawed solutions, the wrong-answer style, the checks, the
repeat range (spread in tokens: ``STEP_TOKENS`` per repeat) and the loop length in tokens;
:func:`length_profile` measures the resulting warm-start lengths in tokens.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

from balagg import contract
from balagg.tinyworld import walks
from balagg.tinyworld.tasks import (
    TRAIN_TASKS,
    Chain,
    WarmStartExample,
    _apply,
    _box,
    _propagate,
    _step_text,
)

STEP_TOKENS = 7
"""Tokens of one written step or check (``a±b=c.`` and the space), with single-digit values."""

WRONG_STYLES = ("near-miss", "loop", "premature-stop", "retry", "doubt", "stuck", "walk-slip", "walk-stop")
"""``walk-slip`` and ``walk-stop`` are the styles of the ``walks`` family (:func:`walks.flawed_walk`: after
the slip the walk goes on by the rule, or stops); the others write chains."""
WALK_STYLES = {"walk-slip": "go-on", "walk-stop": "stop"}
"""The walk styles and what their flawed walk does after its slip (walks.AFTER_SLIP)."""

RETRY_TEXT = "retry:"
"""What an attempt writes after its erroneous step (``retry`` style) before starting the chain again."""

DOUBT_TEXT = "wait:"
"""What a ``doubt`` style wrong answer writes after its right chain before its endless tail."""

DOUBT_TAILS = ("restate", "filler")
"""What a ``doubt`` tail repeats: the last step restated with a wrong result, or :data:`FILLER_TEXT`."""

FILLER_TEXT = "hmm"
"""The ``filler`` doubt tail's unit: characters that no step or right answer contains."""


@dataclass(frozen=True)
class Regime:
    """Warm-start knobs of one laboratory regime (module doc)."""

    name: str
    p_wrong: float  # share of flawed solutions in the warm-start data
    wrong_style: str  # one of WRONG_STYLES
    checks: bool = False  # an inverse check after every step (right and wrong answers alike)
    repeats: tuple[int, int] = (0, 0)  # extra copies of one step, uniform in [lo, hi], both sides
    loop_tokens: int = 120  # length of a looping wrong answer (> the sampling limit: it is truncated)
    retries: int = 2  # retry style: failed attempts of a wrong answer before its last (boxed) one
    right_retry_share: float = 0.0  # retry style: right answers that follow one failed attempt
    doubt_tail: str = "restate"  # doubt style: what the tail repeats (DOUBT_TAILS)
    walk_world: str = "walks"  # walk styles: the world (walks.WORLDS) whose problems and near misses it writes

    @property
    def family(self) -> str:
        """The tiny-world task family whose problems this regime's warm start writes (contract.TINYWORLD_FAMILIES)."""
        return self.walk_world if self.wrong_style in WALK_STYLES else contract.TINYWORLD_DEFAULT_FAMILY

    def __post_init__(self):
        if self.wrong_style not in WRONG_STYLES:
            raise ValueError(f"regime {self.name}: unknown wrong_style {self.wrong_style!r}; use one of {WRONG_STYLES}")
        if not 0.0 <= self.p_wrong < 1.0:
            raise ValueError(f"regime {self.name}: p_wrong must be in [0, 1), got {self.p_wrong}")
        if self.retries < 0 or not 0.0 <= self.right_retry_share <= 1.0:
            raise ValueError(f"regime {self.name}: retries must be >= 0 and right_retry_share in [0, 1]")
        if self.walk_world not in walks.WORLDS:
            raise ValueError(f"regime {self.name}: unknown walk_world {self.walk_world!r}; use one of {', '.join(walks.WORLDS)}")
        if self.doubt_tail not in DOUBT_TAILS:
            raise ValueError(f"regime {self.name}: unknown doubt_tail {self.doubt_tail!r}; use one of {DOUBT_TAILS}")
        lo, hi = self.repeats
        if not 0 <= lo <= hi:
            raise ValueError(f"regime {self.name}: repeats must be 0 <= lo <= hi, got {self.repeats}")


REGIMES: dict[str, Regime] = {
    "wrong-long": Regime("wrong-long", p_wrong=0.4, wrong_style="loop"),
    "right-long": Regime("right-long", p_wrong=0.5, wrong_style="premature-stop", checks=True),
    "spread": Regime("spread", p_wrong=0.4, wrong_style="near-miss", repeats=(0, 8)),
    "wrong-long-retry": Regime("wrong-long-retry", p_wrong=0.5, wrong_style="retry", retries=2, right_retry_share=0.2),
    "wrong-long-doubt": Regime("wrong-long-doubt", p_wrong=0.5, wrong_style="doubt"),
    "wrong-long-doubt-hmm": Regime("wrong-long-doubt-hmm", p_wrong=0.5, wrong_style="doubt", doubt_tail="filler"),
    "wrong-long-check": Regime("wrong-long-check", p_wrong=0.4, wrong_style="stuck", checks=True),
    "wrong-long-walk": Regime("wrong-long-walk", p_wrong=0.4, wrong_style="walk-slip"),
    "right-long-walk": Regime("right-long-walk", p_wrong=0.4, wrong_style="walk-stop"),
    "right-long-walk4": Regime("right-long-walk4", p_wrong=0.6, wrong_style="walk-stop", walk_world="walks4"),
}


def get_regime(name: str) -> Regime:
    if name not in REGIMES:
        raise ValueError(f"unknown tiny-world regime {name!r}; choose one of {', '.join(REGIMES)}")
    return REGIMES[name]


def warm_start_family(regime: str | None) -> str:
    """The task family (contract.TINYWORLD_FAMILIES) of the problems a warm start writes: the named
    regime's, or the default mix's (chains) for ``None``."""
    return get_regime(regime).family if regime else contract.TINYWORLD_DEFAULT_FAMILY


def model_family(spec: dict) -> str:
    """The task family of a configured model's problems (``models.<name>`` of the workflow config): a tiny
    model's warm start's; the default family for a model not built here."""
    if spec["path"] != contract.TINYWORLD_SOURCE:
        return contract.TINYWORLD_DEFAULT_FAMILY
    return warm_start_family(spec.get("tinyworld_regime"))


def _inverse_op(op: str) -> str:
    return "-" if op == "+" else "+"


def _inverse(a: int, op: str, b: int, c: int) -> str:
    """The check of step ``a op b = c``: ``c inv b = a`` (in 0..9 whenever a and c are)."""
    return _step_text(c, _inverse_op(op), b, a)


def _honest_check(op: str, b: int, c: int) -> str:
    """The check of a step ``? op b = c`` computed from its result: ``c inv b = (c inv b)``, which gives
    back the step's first operand only when the step is right (the value may leave 0..9)."""
    return _step_text(c, _inverse_op(op), b, _apply(c, _inverse_op(op), b))


def _steps(chain: Chain, values: list[int], checks: bool) -> list[list[str]]:
    """Written steps (each with its check when ``checks``), one list of pieces per step."""
    pieces, value = [], chain.start
    for (op, b), result in zip(chain.ops, values):
        step = [_step_text(value, op, b, result)]
        if checks:
            step.append(_inverse(value, op, b, result))
        pieces.append(step)
        value = result
    return pieces


def _with_repeats(pieces: list[list[str]], rng: random.Random, repeats: tuple[int, int]) -> list[list[str]]:
    copies = rng.randint(*repeats)
    if copies and pieces:
        k = rng.randrange(len(pieces))
        pieces = pieces[:k + 1] + [pieces[k]] * copies + pieces[k + 1:]
    return pieces


def _loop(text: str, step: str, tokens: int) -> str:
    """``text`` followed by ``step`` repeated, cut at ``tokens`` characters (a loop the sampler truncates)."""
    while len(text) < tokens:
        text += " " + step
    return text[:tokens]


def _join(pieces: list[list[str]], box: str | None) -> str:
    return " ".join([p for step in pieces for p in step] + ([box] if box is not None else []))


def _near_miss_values(chain: Chain, rng: random.Random) -> tuple[int, list[int]]:
    """(index of the erroneous step, running values) of a near-miss error (tasks.flawed_solution's rule)."""
    order = list(range(chain.n_steps))
    rng.shuffle(order)
    for j in order:
        candidates = [v for v in range(10) if v != chain.values[j]]
        rng.shuffle(candidates)
        for wrong in candidates:
            values = _propagate(chain, j, wrong)
            if values is not None:
                return j, values
    raise ValueError(f"no in-range error for chain {chain.expression}")


def _erroneous_attempt(chain: Chain, regime: Regime, rng: random.Random) -> tuple[list[list[str]], int]:
    """The steps of an attempt up to and including its near-miss error, and the erroneous value."""
    j, values = _near_miss_values(chain, rng)
    return _steps(chain, values, regime.checks)[:j + 1], values[j]


def _failed_attempt(chain: Chain, regime: Regime, rng: random.Random) -> str:
    return _join(_erroneous_attempt(chain, regime, rng)[0], None) + " " + RETRY_TEXT


def right_solution(chain: Chain, regime: Regime, rng: random.Random) -> str:
    pieces = _with_repeats(_steps(chain, chain.values, regime.checks), rng, regime.repeats)
    text = _join(pieces, _box(chain.answer))
    if regime.wrong_style == "retry" and rng.random() < regime.right_retry_share:
        text = _failed_attempt(chain, regime, rng) + " " + text
    return text


def wrong_solution(chain: Chain, regime: Regime, rng: random.Random) -> tuple[str, bool]:
    """A wrong solution and whether it ends (EOS); a loop does not end (it runs past the limit)."""
    if regime.wrong_style == "premature-stop":
        stops = [j for j in range(chain.n_steps) if (chain.values[j - 1] if j else chain.start) != chain.answer]
        if stops:
            j = rng.choice(stops)
            pieces = _steps(chain, chain.values, regime.checks)[:j]
            pieces = _with_repeats(pieces, rng, regime.repeats)
            return _join(pieces, _box(chain.values[j - 1] if j else chain.start)), True
        # every partial value equals the answer: fall back to a near-miss error (as long as a right one)
    if regime.wrong_style == "retry":
        failed = [_failed_attempt(chain, regime, rng) for _ in range(regime.retries)]
        for _ in range(20):  # the boxed erroneous value must not happen to be the answer
            pieces, value = _erroneous_attempt(chain, regime, rng)
            if value != chain.answer:
                return " ".join([*failed, _join(pieces, _box(value))]), True
        j, values = _near_miss_values(chain, rng)  # the error carried to the end is never the answer
        return " ".join([*failed, _join(_steps(chain, values, regime.checks), _box(values[-1]))]), True
    if regime.wrong_style == "loop" and chain.n_steps > 1:
        wrong = rng.choice([v for v in range(10) if v not in (chain.values[0], chain.answer)])
        pieces = _steps(Chain(chain.start, chain.ops[:1]), [wrong], regime.checks)
        return _loop(_join(pieces, None), " ".join(pieces[0]), regime.loop_tokens), False
    if regime.wrong_style == "doubt":
        pieces = _steps(chain, chain.values, regime.checks)
        before = chain.values[-2] if chain.n_steps > 1 else chain.start
        op, b = chain.ops[-1]
        wrong = rng.choice([v for v in range(10) if v != chain.answer])
        unit = _step_text(before, op, b, wrong) if regime.doubt_tail == "restate" else FILLER_TEXT
        return _loop(_join(pieces, None) + " " + DOUBT_TEXT + " " + unit, unit, regime.loop_tokens), False
    if regime.wrong_style == "stuck":
        j, values = _near_miss_values(chain, rng)
        pieces = _steps(chain, values, checks=True)[:j + 1]
        op, b = chain.ops[j]
        pieces[j] = [pieces[j][0], _honest_check(op, b, values[j])]  # the check that fails
        return _loop(_join(pieces, None), " ".join(pieces[j]), regime.loop_tokens), False
    j, values = _near_miss_values(chain, rng)
    pieces = _steps(chain, values, regime.checks)
    return _join(_with_repeats(pieces, rng, regime.repeats), _box(values[-1])), True


def regime_examples(regime: Regime, seed: int, n: int) -> list[WarmStartExample]:
    """``n`` warm-start examples of ``regime`` on both training tasks' problems (their verbs and step
    counts; a walk family: every problem of its world), flawed at ``regime.p_wrong``; no code problems.
    Deterministic in ``seed``."""
    if regime.family in walks.WORLDS:
        return walks.warm_start_examples(seed, n, regime.p_wrong, walks.WORLDS[regime.family],
                                         after_slip=WALK_STYLES[regime.wrong_style])
    rng = random.Random(f"tinyworld-regime-{regime.name}-{seed}")
    names = list(TRAIN_TASKS)
    examples = []
    for _ in range(n):
        name = rng.choice(names)
        task = TRAIN_TASKS[name]
        chain = task.sample(rng)
        if rng.random() < regime.p_wrong:
            text, ends = wrong_solution(chain, regime, rng)
            examples.append(WarmStartExample(task.problem(chain), text, name, False, ends=ends))
        else:
            examples.append(WarmStartExample(task.problem(chain), right_solution(chain, regime, rng), name, True))
    return examples


def length_profile(regime: Regime, seed: int = 0, n: int = 4000) -> dict[str, float]:
    """Warm-start solution lengths in tokens (characters, plus EOS where the solution ends): mean and
    population standard deviation of right and wrong solutions, and the share of wrong ones that loop."""
    examples = regime_examples(regime, seed, n)

    def tokens(example: WarmStartExample) -> int:
        return len(example.completion) + int(example.ends)

    right = [tokens(e) for e in examples if e.correct]
    wrong = [tokens(e) for e in examples if not e.correct]
    return {
        "right_mean": statistics.fmean(right), "right_std": statistics.pstdev(right),
        "wrong_mean": statistics.fmean(wrong), "wrong_std": statistics.pstdev(wrong),
        "wrong_unended_share": sum(not e.ends for e in examples if not e.correct) / len(wrong),
    }


__all__ = ["DOUBT_TAILS", "DOUBT_TEXT", "FILLER_TEXT", "REGIMES", "RETRY_TEXT", "Regime", "STEP_TOKENS", "WALK_STYLES", "WRONG_STYLES", "get_regime", "length_profile",
           "regime_examples", "right_solution", "warm_start_family", "wrong_solution"]
