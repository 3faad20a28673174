"""Compare an engine's effective weights with every rule of the registry; invariances and findings.

A *candidate* is a rule of :data:`balagg.aggregation.rules.AGGREGATORS` at one scope (its default first; per-group
rules also at the other) and, for a rule with parameters, at each published value. Its weights for a
batch and layout are :func:`balagg.aggregation.aggregation_weights` with the layout's micro-batches, the
batch's budget as ``max_length`` and the layout's width as ``padded_width``. An engine option *equals* a
candidate when, on every batch and every layout it ran, its weights agree to :data:`TOLERANCE` (relative to
the largest weight), its loss tokens within a response share one weight, and padding gets no gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from balagg.aggregation import aggregation_weights
from balagg.aggregation.rules import AGGREGATORS, SCOPES, Aggregator
from balagg.conformance.batches import Batch
from balagg.conformance.layouts import INVARIANCES, LAYOUTS, Layout
from balagg.conformance.probe import Measurement

TOLERANCE = 1e-5
"""Largest relative deviation that still counts as equal (engines that count tokens in float32 round at
1e-7; every broken reduction the check knows of is off by 1e-2 or more)."""


@dataclass(frozen=True)
class Candidate:
    """One rule at one scope and parameter setting."""

    rule: str
    scope: str
    alpha: float | None = None

    @property
    def label(self) -> str:
        record = _record(self.rule)
        text = self.rule if self.scope == record.default_scope else f"{self.rule} @{self.scope}"
        default = next((p.default for p in record.parameters if p.name == "alpha"), None)
        return text if self.alpha is None or self.alpha == default else f"{text} (alpha={self.alpha:g})"

    def weights(self, batch: Batch, layout: Layout) -> torch.Tensor:
        return aggregation_weights(self.rule, batch.lengths, batch.advantages, batch.group_ids, scope=self.scope,
                                   max_length=batch.budget, micro_batch_ids=layout.micro_batch_ids(batch),
                                   padded_width=layout.width(batch), alpha=self.alpha).to(torch.float64)


def _record(rule: str) -> Aggregator:
    return next(record for record in AGGREGATORS if record.name == rule)


def candidates() -> list[Candidate]:
    """Every rule at its default scope, then at the other scope where the scope matters, at every
    published value of its parameters."""
    out = []
    for record in AGGREGATORS:
        scopes = [record.default_scope]
        if record.per_group and not record.needs_micro_batches:
            scopes += [scope for scope in SCOPES if scope != record.default_scope]
        alphas = [p.published for p in record.parameters if p.name == "alpha"]
        for scope in scopes:
            for alpha in (alphas[0] if alphas else (None,)):
                out.append(Candidate(record.name, scope, alpha))
    return out


def deviation(measured: Measurement, expected: torch.Tensor, batch: Batch) -> float:
    """Largest relative difference between the engine's and a rule's weights (responses with A != 0),
    or the engine's own departure from a per-response weight (spread inside a response, gradient on
    padding), whichever is larger."""
    observable = batch.advantages != 0
    scale = float(expected[observable].abs().max()) if observable.any() else 0.0
    got = measured.weights[observable]
    if torch.isnan(got).any():
        return math.inf
    if scale == 0.0:
        gap = float(got.abs().max()) if got.numel() else 0.0
        return 0.0 if gap == 0.0 else math.inf
    gap = float((got - expected[observable]).abs().max()) / scale
    return max(gap, measured.token_spread, measured.padding_gradient)


def same_weights(a: Measurement, b: Measurement, batch: Batch) -> float:
    """Relative difference between two measurements of the same batch (an invariance)."""
    observable = batch.advantages != 0
    wa, wb = a.weights[observable], b.weights[observable]
    scale = float(torch.maximum(wa.abs(), wb.abs()).max()) if observable.any() else 0.0
    if scale == 0.0:
        return 0.0
    return max(float((wa - wb).abs().max()) / scale, a.token_spread, b.token_spread,
               a.padding_gradient, b.padding_gradient)


@dataclass
class OptionResult:
    """What the check found for one (engine, option, setting)."""

    engine: str
    version: str
    option: str
    setting: str
    claims: str | None
    issues: tuple[str, ...]
    note: str = ""
    error: str = ""
    """one line when the engine's code could not run (then nothing is claimed)"""
    layouts: list[str] = field(default_factory=list)
    """the layouts that ran"""
    deviations: dict[str, dict[str, float]] = field(default_factory=dict)
    """candidate label -> layout -> worst deviation over the batches"""
    invariances: dict[str, bool | None] = field(default_factory=dict)
    """invariance -> holds (None: not applicable)"""
    fake: bool = False

    @property
    def label(self) -> str:
        """The option with its setting, as the report names it."""
        return self.option if self.setting == "default" else f"{self.option} ({self.setting})"

    @property
    def matches(self) -> list[str]:
        """Labels of the candidates it equals on every layout that ran (registry order)."""
        if self.error:
            return []
        return [label for label, by_layout in self.deviations.items()
                if by_layout and max(by_layout.values()) <= TOLERANCE]

    @property
    def match(self) -> str:
        """The rule it equals: the claimed one if it equals it, else the first match, else ``none``."""
        if self.error:
            return "not run"
        matches = self.matches
        claimed = [label for label in matches if self.claims and label.split(" ")[0] == self.claims]
        return (claimed or matches or ["none"])[0]

    @property
    def reference(self) -> str:
        """The candidate the deviation is reported against: the claimed rule (at its default scope and
        parameters), else the match."""
        if self.claims and self.claims in self.deviations:
            return self.claims
        return self.match

    @property
    def largest_deviation(self) -> float:
        by_layout = self.deviations.get(self.reference, {})
        return max(by_layout.values(), default=math.nan)

    @property
    def conforms(self) -> bool | None:
        """It equals the rule it claims on every layout (None without a claim or when it did not run)."""
        if self.error or not self.claims:
            return None
        return self.largest_deviation <= TOLERANCE

    @property
    def findings(self) -> list[str]:
        """One line per departure from what the option claims, naming the engine's issues."""
        if self.error:
            return [f"could not run: {self.error}"]
        out = []
        if self.claims and not self.conforms:
            by_layout = self.deviations.get(self.reference, {})
            off = [layout for layout, dev in by_layout.items() if dev > TOLERANCE]
            measured = self.match if self.match != "none" else "no rule of the registry"
            line = (f"claims {self.claims} but equals {measured}: off by up to {self.largest_deviation:.3g} "
                    f"with {'; '.join(off)}")
            if self.note:
                line += f" ({self.note})"
            if self.issues:
                line += "; see " + ", ".join(self.issues)
            out.append(line)
        broken = [name for name, holds in self.invariances.items() if holds is False]
        if broken and not out and not self.conforms:  # a conforming option has its rule's invariances
            out.append("depends on the " + ", ".join(broken) + " split"
                       + ("; see " + ", ".join(self.issues) if self.issues else ""))
        return out


def summarise(result: OptionResult, runs: dict[str, dict[int, Measurement]], batches: list[Batch],
              layouts: dict[str, Layout]) -> OptionResult:
    """Fill ``result``'s deviations and invariances from the measurements ``runs[layout][seed]``."""
    result.layouts = [name for name in runs]
    for candidate in candidates():
        by_layout = {}
        for name, measurements in runs.items():
            by_layout[name] = max(deviation(measurements[b.seed], candidate.weights(b, layouts[name]), b)
                                  for b in batches)
        result.deviations[candidate.label] = by_layout
    for invariance, (first, second) in INVARIANCES.items():
        if first in runs and second in runs:
            worst = max(same_weights(runs[first][b.seed], runs[second][b.seed], b) for b in batches)
            result.invariances[invariance] = worst <= TOLERANCE
        else:
            result.invariances[invariance] = None
    return result


def layouts_for(adapter: object) -> list[Layout]:
    """The layouts an engine runs (packed rows only where it packs)."""
    return [layout for layout in LAYOUTS if not layout.packed or getattr(adapter, "packs", False)]
