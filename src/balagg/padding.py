"""Expected width of a micro-batch trimmed to its widest row, under a stated model of completion lengths.

Training pads a micro-batch's completion part to its longest completion, so the tokens a forward and
backward pass computes are ``rows x (prompt width + the longest of the rows' completion lengths)``. The
plan (:mod:`balagg.plan`) knows only the expected completion length ``f x L`` (``completion_fraction``
of ``max_completion_length``); this module states the distribution around it:

    length = min(Y, L),   Y exponential with mean mu,   mu chosen so that E[length] = f x L

i.e. ``mu (1 - exp(-L/mu)) = f L``; a share ``exp(-L/mu)`` of the responses is truncated at L (the
per-step ``truncation_rate`` of ``metrics.jsonl`` measures it). ``f = 1`` is every response truncated.
The expected longest of ``m`` independent lengths is

    E[max] = integral_0^L 1 - (1 - exp(-x/mu))^m dx

(computed by Simpson's rule). Rows of one group share a prompt and are correlated in length, which
makes the true expected maximum smaller: for rows drawn from one group this is an upper estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

SIMPSON_INTERVALS = 4096


@dataclass(frozen=True)
class CompletionLengths:
    """Clipped-exponential completion lengths with mean ``fraction x max_length`` (module docstring)."""

    max_length: int
    fraction: float

    def __post_init__(self) -> None:
        if self.max_length < 1:
            raise ValueError(f"max_length must be at least 1, got {self.max_length}")
        if not 0 < self.fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {self.fraction}")

    @cached_property
    def ratio(self) -> float:
        """``t = L / mu``, the root of ``(1 - exp(-t)) / t = fraction`` (0 when every response is truncated)."""
        if self.fraction == 1:
            return 0.0
        low, high = 0.0, 1 / self.fraction + 1  # (1 - e^-t)/t falls from 1 at t -> 0 to below f at 1/f + 1
        for _ in range(200):
            middle = (low + high) / 2
            mean = 1.0 if middle == 0 else -math.expm1(-middle) / middle
            low, high = (middle, high) if mean > self.fraction else (low, middle)
        return (low + high) / 2

    @property
    def mean(self) -> float:
        return self.fraction * self.max_length

    @property
    def truncated_share(self) -> float:
        """Expected share of responses that reach ``max_length``."""
        return math.exp(-self.ratio)

    def expected_max(self, rows: int) -> float:
        """Expected longest completion among ``rows`` independent ones: a trimmed micro-batch's completion width."""
        if rows < 1:
            raise ValueError(f"rows must be at least 1, got {rows}")
        if self.ratio == 0:
            return float(self.max_length)
        scale = self.max_length / self.ratio

        def above(x: float) -> float:  # P(max > x) for x < L
            return 1 - (-math.expm1(-x / scale)) ** rows

        n, h = SIMPSON_INTERVALS, self.max_length / SIMPSON_INTERVALS
        total = above(0) + above(self.max_length)
        total += sum((4 if i % 2 else 2) * above(i * h) for i in range(1, n))
        return total * h / 3
