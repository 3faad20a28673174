"""The walk task of the tiny world (docs/laboratory.md): wrong answers that are long
because of the slip itself, by the task's own rule, not because of a choice the policy can unlearn.

A *walk* problem ``Walk 14 by 6.`` asks how many steps of ``+6 (mod m)`` lead from 14 to 0; its worked
solution is the walk, step by step, and the count in a box (mod 20: ``Walk 14 by 6.`` and ``Walk 4 by 4.``):

    14+6=0. \\boxed{1}            4+4=8. 8+4=12. 12+4=16. 16+4=0. \\boxed{4}

Starts and steps are even and the modulus is even, so a right walk stays on the even residues; the
problems are the ones that reach 0 within :data:`MAX_STEPS` steps (mod 20: 37, mod 40: 83). A slip to an
odd value (``4+4=9.``) puts the walk on the odd residues, which never reach 0: the *same* rule that ends
a right walk (go on until 0) then runs it to the length limit. A flawed warm-start solution has one
near-miss (odd) error at a random step and goes on by the rule for :data:`LOOP_CHARS` characters (no
box, no EOS: a sampled loop is truncated). Nothing but the error separates a wrong walk from a right
one, and after an odd value every way on is wrong, so a group's baseline pushes neither.

The mirror (``after_slip="stop"``, the ``right-long-walk4`` regime's): the off-lattice value *ends* the walk
(EOS, no box), as 0 ends a right one, so a wrong walk is the walk up to its slip, shorter than the whole walk.

A *world* (:class:`WalkWorld`) is the modulus, the *lattice* (starts and steps are its multiples, so a
right walk stays on them; 2 above) and the warm start's near misses (off the lattice). :data:`WORLDS`
are the tiny world's walk families (``balagg.tinyworld.raw`` writes their problems into the training
sets' and the math benchmarks' schemas): ``walks`` (mod 40, lattice 2, near misses ±1: the
``wrong-long-walk`` regime) and ``walks4`` (mod 80, lattice 4: the same 83 problems doubled, so a ±2 or
tens-digit slip also leaves the lattice; near misses ±1, ±2, ±10: the ``right-long-walk4`` regime). A
model of a regime trains and is evaluated on its world's problems. Everything here is deterministic given a ``random.Random``; no torch.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

MOD = 40
"""The walk world's modulus (mod 40: 83 problems)."""

MAX_STEPS = 5
SLIPS = (-1, 1)
"""The near misses of a flawed walk on the even lattice: one off, so odd."""
LOOP_CHARS = 120
"""Length of a flawed walk in characters (tokens): beyond any sampling limit used with it (96)."""


def walk(start: int, step: int, mod: int = MOD) -> list[int]:
    """The values after each step of ``+step (mod mod)`` from ``start`` until 0 (empty if never)."""
    values, value = [], start
    for _ in range(mod):
        value = (value + step) % mod
        values.append(value)
        if value == 0:
            return values
    return []


@dataclass(frozen=True)
class Walk:
    """One walk problem; ``n_steps`` (its answer) is how many steps reach 0."""

    start: int
    step: int
    mod: int = MOD

    @property
    def values(self) -> list[int]:
        return walk(self.start, self.step, self.mod)

    @property
    def n_steps(self) -> int:
        return len(self.values)

    @property
    def answer(self) -> int:
        return self.n_steps

    @property
    def problem(self) -> str:
        return f"Walk {self.start} by {self.step}."

    @property
    def solution(self) -> str:
        """The right solution: the walk, step by step, and the count boxed."""
        return " ".join(_steps_text(self.start, self.step, self.values) + [f"\\boxed{{{self.answer}}}"])


def walk_problems(mod: int = MOD, lattice: int = 2) -> list[Walk]:
    """Every walk with start and step multiples of ``lattice`` in lattice..mod-lattice that reaches 0
    within :data:`MAX_STEPS`, in order (a right walk stays on the lattice)."""
    if lattice < 2 or mod < 2 * lattice or mod % lattice:
        raise ValueError(f"the walk modulus must be a multiple of the lattice (at least 2) and at least twice it; "
                         f"got modulus {mod}, lattice {lattice}")
    found = [Walk(start, step, mod) for start in range(lattice, mod, lattice) for step in range(lattice, mod, lattice)]
    return [w for w in found if 0 < w.n_steps <= MAX_STEPS]


def _steps_text(start: int, step: int, values: list[int]) -> list[str]:
    texts, value = [], start
    for result in values:
        texts.append(f"{value}+{step}={result}.")
        value = result
    return texts


AFTER_SLIP = ("go-on", "stop")
"""What a flawed warm-start walk does after its slip: go on by the rule to the length limit (never reaching 0:
the ``wrong-long-walk`` regime, wrong answers long) or stop there, the off-lattice value ending the walk (EOS,
no box: the ``right-long-walk4`` regime, wrong answers short)."""


def flawed_walk(problem: Walk, rng: random.Random, after_slip: str = "go-on", slips: tuple[int, ...] = SLIPS) -> str:
    """A near-miss error (the right value plus one of ``slips``, off the lattice) at a random step; then
    the walk by the rule for LOOP_CHARS characters (``go-on``), or nothing (``stop``: the walk ends at the
    off-lattice value). Both draw the same from ``rng``, so the two styles of one stream differ only after
    the slip."""
    if after_slip not in AFTER_SLIP:
        raise ValueError(f"unknown after_slip {after_slip!r}; use one of {', '.join(AFTER_SLIP)}")
    values = problem.values
    j = rng.randrange(len(values))
    wrong = (values[j] + rng.choice(slips)) % problem.mod
    if after_slip == "stop":
        return " ".join(_steps_text(problem.start, problem.step, values[:j] + [wrong]))
    # the rule goes on from the odd value; LOOP_CHARS steps are more than LOOP_CHARS characters
    rule = [(wrong + k * problem.step) % problem.mod for k in range(1, LOOP_CHARS)]
    return " ".join(_steps_text(problem.start, problem.step, values[:j] + [wrong] + rule))[:LOOP_CHARS]


@dataclass(frozen=True)
class WalkWorld:
    """One walk world: its modulus, lattice and the warm start's near misses (module doc)."""

    mod: int = MOD
    lattice: int = 2
    slips: tuple[int, ...] = SLIPS

    def __post_init__(self):
        walk_problems(self.mod, self.lattice)  # checks the modulus and lattice
        if not self.slips or any(s % self.lattice == 0 for s in self.slips):
            raise ValueError(f"the near misses {self.slips} must all leave the lattice {self.lattice}")

    @property
    def problems(self) -> list[Walk]:
        return walk_problems(self.mod, self.lattice)


WORLDS = {"walks": WalkWorld(), "walks4": WalkWorld(mod=80, lattice=4, slips=(-10, -2, -1, 1, 2, 10))}
"""The tiny world's walk families (balagg.layout.TINYWORLD_FAMILIES) by name."""
WALKS = WORLDS["walks"]


def warm_start_examples(seed: int, n: int, p_wrong: float, world: WalkWorld = WALKS, after_slip: str = "go-on") -> list:
    """``n`` warm-start examples (balagg.tinyworld.tasks.WarmStartExample) of uniformly drawn problems of
    ``world``: flawed (:func:`flawed_walk` with the world's near misses: no EOS when it goes on, EOS when it
    stops) at ``p_wrong``, right otherwise. The stream is the probe's (bench/walk_probe.py), so the
    ``wrong-long-walk`` regime's warm start is the one its probe runs, and a world's two styles have the same
    problems and slips."""
    from balagg.tinyworld.tasks import WarmStartExample

    rng, pool, examples = random.Random(f"walk-warm-start-{seed}"), world.problems, []
    for _ in range(n):
        problem = rng.choice(pool)
        if rng.random() < p_wrong:
            text = flawed_walk(problem, rng, after_slip, world.slips)
            examples.append(WarmStartExample(problem.problem, text, "walk", False, ends=after_slip == "stop"))
        else:
            examples.append(WarmStartExample(problem.problem, problem.solution, "walk", True))
    return examples


def sample_walks(rng: random.Random, n: int, world: WalkWorld = WALKS) -> list[Walk]:
    """``n`` distinct problems in random order, at most the whole space (a training set of walks)."""
    space = world.problems
    return rng.sample(space, min(n, len(space)))


def dealt_walks(seed: int, index: int, parts: int, n: int, world: WalkWorld = WALKS) -> list[Walk]:
    """Slice ``index`` of ``parts`` disjoint slices of one fixed shuffle of the space (seeded by ``seed``):
    ``n`` problems each, or as many as ``parts`` disjoint slices can hold (``len(space) // parts``, 16 at
    mod 40 for five benchmarks) where ``n`` is more, so that no two benchmarks share a problem and none
    repeats one."""
    if not 0 <= index < parts:
        raise ValueError(f"slice {index} of {parts} does not exist")
    space, size = world.problems, slice_size(n, parts, world)
    random.Random(f"tinyworld-walks-deal-{seed}").shuffle(space)
    return space[index * size:(index + 1) * size]


def slice_size(n: int, parts: int, world: WalkWorld = WALKS) -> int:
    """Problems in each of ``parts`` disjoint slices of the space when ``n`` are asked (:func:`dealt_walks`)."""
    return min(n, len(world.problems) // parts)


__all__ = ["AFTER_SLIP", "LOOP_CHARS", "MAX_STEPS", "MOD", "SLIPS", "WALKS", "WORLDS", "Walk", "WalkWorld",
           "dealt_walks", "flawed_walk", "sample_walks", "slice_size", "walk", "walk_problems", "warm_start_examples"]
