"""``balagg conformance``: does an engine's loss aggregation do what its name says?

For each engine it can import and each of the engine's aggregation options, the check runs **the engine's
own** loss and reduction code on seeded batches of GRPO groups (mixed lengths and signs, zero advantages,
responses truncated at the budget, padding), split the way the engine splits a step: 1, 2 and 4
micro-batches with gradient accumulation, 2 data-parallel ranks over gloo, extra padding columns and, where
the engine packs, packed rows (:mod:`balagg.conformance.layouts`). It reads off each response's effective
weight, the gradient of the engine's loss with respect to each loss token's log-probability at the policy
(ratio 1, so no clip is active) divided by the response's advantage (:mod:`balagg.conformance.probe`), and
compares it with every rule of the registry at every scope and published parameter
(:mod:`balagg.conformance.compare`). The report (:mod:`balagg.conformance.report`) names, per (engine,
version, option, setting), the rule it equals (or none), the largest deviation from the rule its name
claims, and which invariances hold; docs/conformance.md is generated from it and the registry.

Modules: :mod:`~balagg.conformance.batches` (the seeded batches), :mod:`~balagg.conformance.layouts` (how
a step is split), :mod:`~balagg.conformance.probe` (running an engine and reading off weights),
:mod:`~balagg.conformance.compare` (rules, deviations, invariances, findings),
:mod:`~balagg.conformance.report` (tables, figure, the docs page), and one adapter per engine under
:mod:`balagg.conformance.engines`.
"""
