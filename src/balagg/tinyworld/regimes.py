"""Length regimes of the laboratory (docs/laboratory.md): where right and wrong answers differ in length.

A regime decides the worked solutions a tiny model is warm-started on, hence how its sampled right and
wrong answers differ in length, *in tokens* (the tokenizer is character level: a step ``7-1=6. `` is
:data:`STEP_TOKENS` tokens, ``\\boxed{6}`` 9, plus EOS). Each regime puts the length where the policy
cannot drop it without changing whether it is right:

- ``spread`` (family ``chains``: the tiny world's arithmetic chains): right and wrong answers alike
  repeat one step ``repeats`` times (uniform, independent of correctness); wrong answers carry a
  near-miss error. A large within-side spread and no gap between the sides.
- ``wrong-long-walk`` (family ``walks``: the walk problems of balagg.tinyworld.walks, mod 40): right
  answers are the walk to 0 and the count boxed; a wrong answer has one near-miss (odd) slip and goes on
  by the task's rule, never reaching 0, until the length limit (no box, no EOS). The length follows the
  slip by the task's own rule, whatever made it, so the negative side is much longer.
- ``right-long-walk4`` (family ``walks4``: the same problems on the lattice of 4 mod 80): the mirror. A
  wrong answer *stops* at its off-lattice value (EOS, no box), as 0 ends a right walk, so it is the walk
  up to its slip, shorter than the whole walk, whatever made it; the positive side is much longer. Near
  misses ±1, ±2 and ±10 all leave the lattice, so the policy's own slips end the walk too, and 60 % of the
  examples are flawed, so that near misses are unlearned slowly.

The knobs (:class:`Regime`) are the share of flawed solutions, the wrong-answer style, the repeat range
(spread in tokens: ``STEP_TOKENS`` per repeat) and the walk world; :func:`length_profile` measures the
resulting warm-start lengths in tokens.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

from balagg.layout import TINYWORLD_DEFAULT_FAMILY, TINYWORLD_SOURCE
from balagg.tinyworld import walks
from balagg.tinyworld.tasks import (
    Chain,
    WarmStartExample,
    _box,
    _propagate,
    _step_text,
)

STEP_TOKENS = 7
"""Tokens of one written step (``a±b=c.`` and the space), with single-digit values."""

WRONG_STYLES = ("near-miss", "walk-slip", "walk-stop")
"""``near-miss``: a chain with one in-range error carried to its boxed end; ``walk-slip`` and
``walk-stop`` are the styles of the walk families (:func:`walks.flawed_walk`: after the slip the walk
goes on by the rule, or stops)."""
WALK_STYLES = {"walk-slip": "go-on", "walk-stop": "stop"}
"""The walk styles and what their flawed walk does after its slip (walks.AFTER_SLIP)."""


@dataclass(frozen=True)
class Regime:
    """Warm-start knobs of one laboratory regime (module doc)."""

    name: str
    p_wrong: float  # share of flawed solutions in the warm-start data
    wrong_style: str  # one of WRONG_STYLES
    repeats: tuple[int, int] = (0, 0)  # extra copies of one step, uniform in [lo, hi], both sides
    walk_world: str = "walks"  # walk styles: the world (walks.WORLDS) whose problems and near misses it writes

    @property
    def family(self) -> str:
        """The tiny-world task family whose problems this regime's warm start writes (balagg.layout.TINYWORLD_FAMILIES)."""
        return self.walk_world if self.wrong_style in WALK_STYLES else TINYWORLD_DEFAULT_FAMILY

    def __post_init__(self):
        if self.wrong_style not in WRONG_STYLES:
            raise ValueError(f"regime {self.name}: unknown wrong_style {self.wrong_style!r}; use one of {WRONG_STYLES}")
        if not 0.0 <= self.p_wrong < 1.0:
            raise ValueError(f"regime {self.name}: p_wrong must be in [0, 1), got {self.p_wrong}")
        if self.walk_world not in walks.WORLDS:
            raise ValueError(f"regime {self.name}: unknown walk_world {self.walk_world!r}; use one of {', '.join(walks.WORLDS)}")
        lo, hi = self.repeats
        if not 0 <= lo <= hi:
            raise ValueError(f"regime {self.name}: repeats must be 0 <= lo <= hi, got {self.repeats}")


REGIMES: dict[str, Regime] = {
    "spread": Regime("spread", p_wrong=0.4, wrong_style="near-miss", repeats=(0, 8)),
    "wrong-long-walk": Regime("wrong-long-walk", p_wrong=0.4, wrong_style="walk-slip"),
    "right-long-walk4": Regime("right-long-walk4", p_wrong=0.6, wrong_style="walk-stop", walk_world="walks4"),
}
"""The regimes of the shipped configs (configs/laboratory.yaml), by name."""


def get_regime(name: str) -> Regime:
    if name not in REGIMES:
        raise ValueError(f"unknown tiny-world regime {name!r}; choose one of {', '.join(REGIMES)}")
    return REGIMES[name]


def warm_start_family(regime: str | None) -> str:
    """The task family (balagg.layout.TINYWORLD_FAMILIES) of the problems a warm start writes: the named
    regime's, or the default mix's (chains) for ``None``."""
    return get_regime(regime).family if regime else TINYWORLD_DEFAULT_FAMILY


def model_family(spec: dict) -> str:
    """The task family of a configured model's problems (``models.<name>`` of the workflow config): a tiny
    model's warm start's; the default family for a model not built here."""
    if spec["path"] != TINYWORLD_SOURCE:
        return TINYWORLD_DEFAULT_FAMILY
    return warm_start_family(spec.get("tinyworld_regime"))


def _steps(chain: Chain, values: list[int]) -> list[str]:
    """The written steps of ``chain`` with running ``values``."""
    pieces, value = [], chain.start
    for (op, b), result in zip(chain.ops, values):
        pieces.append(_step_text(value, op, b, result))
        value = result
    return pieces


def _with_repeats(pieces: list[str], rng: random.Random, repeats: tuple[int, int]) -> list[str]:
    """``pieces`` with one of them (drawn) repeated a drawn number of times in ``repeats``."""
    copies = rng.randint(*repeats)
    if copies and pieces:
        k = rng.randrange(len(pieces))
        pieces = pieces[:k + 1] + [pieces[k]] * copies + pieces[k + 1:]
    return pieces


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


def right_solution(chain: Chain, regime: Regime, rng: random.Random) -> str:
    """The chain's right steps (one repeated per ``regime.repeats``), its answer boxed."""
    return " ".join(_with_repeats(_steps(chain, chain.values), rng, regime.repeats) + [_box(chain.answer)])


def wrong_solution(chain: Chain, regime: Regime, rng: random.Random) -> tuple[str, bool]:
    """A wrong solution and whether it ends (EOS): the chain with a near-miss error carried to its boxed
    end (one step repeated per ``regime.repeats``)."""
    _, values = _near_miss_values(chain, rng)
    return " ".join(_with_repeats(_steps(chain, values), rng, regime.repeats) + [_box(values[-1])]), True


def regime_examples(regime: Regime, seed: int, n: int) -> list[WarmStartExample]:
    """``n`` warm-start examples of ``regime`` on both training tasks' problems (their verbs and step
    counts; a walk family: every problem of its world), flawed at ``regime.p_wrong``; no code problems.
    Deterministic in ``seed``."""
    if regime.family in walks.WORLDS:
        return walks.warm_start_examples(seed, n, regime.p_wrong, walks.WORLDS[regime.family],
                                         after_slip=WALK_STYLES[regime.wrong_style])
    from balagg.data.sources import tinyworld_tasks

    rng = random.Random(f"tinyworld-regime-{regime.name}-{seed}")
    tasks = tinyworld_tasks("train")
    names = list(tasks)
    examples = []
    for _ in range(n):
        name = rng.choice(names)
        task = tasks[name]
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


__all__ = ["REGIMES", "Regime", "STEP_TOKENS", "WALK_STYLES", "WRONG_STYLES", "get_regime", "length_profile",
           "regime_examples", "right_solution", "warm_start_family", "wrong_solution"]
