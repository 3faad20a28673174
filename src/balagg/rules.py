"""The names of the aggregation rules and their default scopes (no torch: cheap to import anywhere,
e.g. by the workflow while it builds the DAG). The math is in :mod:`balagg.aggregation`."""

from __future__ import annotations

RULES: tuple[str, ...] = (
    "seq-agg",
    "token-agg",
    "token-agg-microbatch",
    "balanced-agg",
    "balanced-agg-mass",
    "seq-mean-token-sum",
    "dr-grpo",
)
"""Canonical rule names."""

ALIASES: dict[str, str] = {
    "seq-mean-token-mean": "seq-agg",
    "token-mean": "token-agg",
    "seq-mean-token-sum": "seq-mean-token-sum",
    "seq-mean-token-sum-norm": "dr-grpo",
}
"""verl's ``loss_agg_mode`` names, accepted wherever a rule is named."""

SCOPES: tuple[str, ...] = ("group", "batch")

DEFAULT_SCOPES: dict[str, str] = {rule: "group" for rule in RULES} | {"token-agg": "batch",
                                                                      "token-agg-microbatch": "batch"}
"""The scope each rule is used with unless a config says otherwise: ``token-agg`` pools the whole
batch as in DAPO/verl/TRL; every other rule is defined per group. ``token-agg-microbatch`` is defined
by the micro-batch split and ignores the scope."""

MICRO_BATCH_RULES: tuple[str, ...] = ("token-agg-microbatch",)
"""Rules whose weights depend on the micro-batch partition (the trainer passes ``micro_batch_ids``)."""


def canonical_rule(rule: str) -> str:
    """Return the canonical name of ``rule`` (a canonical name or a verl alias)."""
    if rule in RULES:
        return rule
    if rule in ALIASES:
        return ALIASES[rule]
    valid = ", ".join(RULES) + "; verl aliases: " + ", ".join(ALIASES)
    raise ValueError(f"unknown aggregation rule {rule!r}; valid rules: {valid}")


def default_scope(rule: str) -> str:
    """The scope ``rule`` is used with by default (see :data:`DEFAULT_SCOPES`)."""
    return DEFAULT_SCOPES[canonical_rule(rule)]
