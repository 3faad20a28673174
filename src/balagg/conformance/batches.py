"""Seeded batches of GRPO groups for the conformance check.

Every batch holds ``groups`` groups of ``group_size`` responses with lengths drawn in [1, budget], binary
rewards but in its last group, and GRPO advantages (population std, :func:`balagg.aggregation.group_advantages`).
It always has the cases on which engines and rules differ: mixed signs inside a group, a group whose
rewards are all equal (zero advantages: no gradient, but tokens an engine may count), a group of graded
rewards (advantages of different sizes on one side: ``balanced-agg-mass`` differs from ``balanced-agg``
only there), responses truncated at the budget (length == budget), and lengths that differ within and
across groups. Empty responses are left out: they carry no
token, so no engine's gradient can show their weight.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from balagg.aggregation import group_advantages

BUDGET = 12
"""The generation budget (max_length): the constant of dr-grpo and delta-l-norm, the padded width of a
batch whose longest response was truncated."""


@dataclass(frozen=True)
class Batch:
    """One rollout batch, as the rows an engine is handed (group after group)."""

    seed: int
    lengths: torch.Tensor
    """[B] loss tokens per response (long)"""
    advantages: torch.Tensor
    """[B] one advantage per response (float64)"""
    group_ids: torch.Tensor
    """[B] the group (prompt) of each response (long), contiguous"""
    budget: int
    """the generation budget"""

    @property
    def size(self) -> int:
        return int(self.lengths.numel())

    def mask(self, width: int) -> torch.Tensor:
        """[B, width] float64 loss mask, right-padded to ``width`` columns."""
        return (torch.arange(width)[None, :] < self.lengths[:, None]).to(torch.float64)


def grpo_batch(seed: int, groups: int = 6, group_size: int = 4, budget: int = BUDGET) -> Batch:
    """A seeded batch (module docstring). Group 0 is all correct (zero advantages); every other group
    holds both signs, the last with graded rewards (1, 1/2 and 0, in a seeded order: two sizes of positive
    advantage, on responses of different lengths); one response of group 1 and one of the last group are
    truncated at the budget."""
    generator = torch.Generator().manual_seed(seed)
    size = groups * group_size
    lengths = torch.randint(1, budget + 1, (size,), generator=generator)
    lengths[group_size] = budget
    lengths[-1] = budget
    rewards = torch.zeros(size, dtype=torch.float64)
    for group in range(groups):
        rows = slice(group * group_size, (group + 1) * group_size)
        if group == 0:
            rewards[rows] = 1.0
        elif group == groups - 1:
            graded = torch.tensor([1.0, 0.5] + [0.0] * (group_size - 2), dtype=torch.float64)
            rewards[rows] = graded[torch.randperm(group_size, generator=generator)]
            positive = [row for row in range(rows.start, rows.stop) if rewards[row] > 0 and row != size - 1]
            other = next(row for row in range(rows.start, rows.stop) if rewards[row] > 0 and row != positive[0])
            if lengths[positive[0]] == lengths[other]:  # the side's lengths differ, or its masses do not show
                lengths[positive[0]] = int(lengths[other]) // 2 if lengths[other] > 1 else 2
        else:
            correct = 1 + int(torch.randint(0, group_size - 1, (1,), generator=generator))
            order = torch.randperm(group_size, generator=generator)[:correct]
            rewards[group * group_size + order] = 1.0
    group_ids = torch.arange(size) // group_size
    advantages = group_advantages(rewards, group_ids).to(torch.float64)
    return Batch(seed, lengths, advantages, group_ids, budget)


def seeded_batches(count: int = 3) -> list[Batch]:
    """``count`` batches, seeds 0..count-1."""
    return [grpo_batch(seed) for seed in range(count)]
