"""Expected widths of trimmed micro-batches under a stated model of completion lengths (for balagg.plan).

The trainer trims each micro-batch to its widest row (:mod:`balagg.train.padding`), so the completion
tokens a forward (and backward) pass computes are ``rows x the longest completion among them``. The plan
knows only the expected completion length ``f x L`` (``completion_fraction`` of ``max_completion_length``);
this module states the distribution around it:

    length = min(Y, L),   Y exponential with mean mu,   mu chosen so that E[length] = f x L

i.e. ``mu (1 - exp(-L/mu)) = f L``; a share ``exp(-L/mu)`` of the responses is truncated at L (the
per-step ``truncation_rate`` of ``metrics.jsonl`` measures it). ``f = 1`` is every response truncated.
With ``p(x) = P(length > x) = exp(-x/mu)`` for ``x < L``, and rows drawn independently:

- a micro-batch of ``m`` rows in no particular order is as wide as the longest of ``m`` lengths,
  ``E[max] = integral_0^L 1 - (1 - p(x))^m dx``;
- ``n`` rows sorted by width and cut into consecutive micro-batches of ``m`` (the trainer sorts each
  optimiser step's rows, and the rows of its log-prob pass): the number of micro-batches wider than ``x``
  is ``ceil(B(x) / m)`` with ``B(x) ~ Binomial(n, p(x))`` the rows longer than ``x``, so the mean width of
  a micro-batch is ``integral_0^L E[ceil(B(x) / m)] dx / ceil(n / m)``.

Both integrals are computed by Simpson's rule. Rows of one group share a prompt and are correlated in
length, which makes the true expected maximum of a micro-batch drawn from one group smaller: for those
the unsorted figure is an upper estimate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache

SIMPSON_INTERVALS = 1024


def _simpson(function: Callable[[float], float], end: float, intervals: int = SIMPSON_INTERVALS) -> float:
    """Integral of ``function`` over [0, end]; ``function(end)`` is its left limit there."""
    h = end / intervals
    total = function(0.0) + function(end) + sum((4 if i % 2 else 2) * function(i * h) for i in range(1, intervals))
    return total * h / 3


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

    def longer_than(self, x: float) -> float:
        """``P(length > x)`` for ``0 <= x < max_length`` (at ``max_length``: its left limit)."""
        return math.exp(-self.ratio * x / self.max_length)

    def expected_max(self, rows: int) -> float:
        """Expected longest completion among ``rows`` independent ones: an unsorted micro-batch's width."""
        if rows < 1:
            raise ValueError(f"rows must be at least 1, got {rows}")
        if self.ratio == 0:
            return float(self.max_length)
        return _simpson(lambda x: 1 - (1 - self.longer_than(x)) ** rows, self.max_length)

    @lru_cache(maxsize=64)  # noqa: B019 (a few instances, each a handful of calls)
    def expected_sorted_width(self, rows: int, block: int) -> float:
        """Mean expected width of the micro-batches of ``block`` rows cut from ``rows`` rows sorted by length."""
        if rows < 1 or block < 1:
            raise ValueError(f"rows and block must be at least 1, got {rows} and {block}")
        blocks = math.ceil(rows / block)
        if self.ratio == 0:
            return float(self.max_length)
        log_choose = [math.lgamma(rows + 1) - math.lgamma(k + 1) - math.lgamma(rows - k + 1) for k in range(rows + 1)]
        counts = [math.ceil(k / block) for k in range(rows + 1)]

        def wider(x: float) -> float:  # E[ceil(B(x) / block)], B(x) ~ Binomial(rows, P(length > x))
            p = self.longer_than(x)
            if p >= 1:
                return float(blocks)
            log_p, log_q = math.log(p), math.log1p(-p)
            spread = 12 * math.sqrt(rows * p * (1 - p)) + 2  # terms beyond 12 standard deviations are < 1e-30
            first, last = max(1, int(rows * p - spread)), min(rows, int(rows * p + spread) + 1)
            return sum(counts[k] * math.exp(log_choose[k] + k * log_p + (rows - k) * log_q)
                       for k in range(first, last + 1))

        return _simpson(wider, self.max_length) / blocks
