"""The registry of aggregation rules: one record per rule (no torch: cheap to import anywhere, e.g. by
the workflow while it builds the DAG). The math is in :mod:`balagg.aggregation`, whose weight functions
are keyed by these names.

A rule's name is canonicalised, and its scope defaulted, where a config enters (:func:`aggregator`, called
by :class:`balagg.train.config.CellConfig` and the public entry points); code downstream of them is
handed canonical names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Aggregator:
    """One aggregation rule."""

    name: str
    """Canonical name (the workflow's grid axis, folder names, ``cell.json``)."""
    description: str
    """One line for the docs: what the rule is, and where it comes from."""
    default_scope: str = "group"
    """The scope the rule is used with unless a config says otherwise."""
    verl_aliases: tuple[str, ...] = ()
    """verl's ``loss_agg_mode`` names of the rule, accepted wherever a rule is named."""
    needs_micro_batches: bool = False
    """Its weights depend on the micro-batch partition of an optimiser step (the trainer passes
    ``micro_batch_ids``); such a rule ignores the scope."""
    needs_max_length: bool = False
    """Its weights need the constant length normaliser ``max_length``."""
    verl_estimator: bool = True
    """The verl plug-in offers it as an advantage estimator (:mod:`balagg.integrations.verl`)."""


AGGREGATORS: tuple[Aggregator, ...] = (
    Aggregator("seq-agg", "token mean per response, mean over responses (GRPO)",
               verl_aliases=("seq-mean-token-mean",)),
    Aggregator("token-agg", "token mean over the pooled tokens (DAPO; TRL's dapo loss)", default_scope="batch",
               verl_aliases=("token-mean",)),
    Aggregator("token-agg-microbatch", "mean of micro-batch token means (verl's legacy FSDP token-mean)",
               default_scope="batch", needs_micro_batches=True),
    Aggregator("balanced-agg", "token mean inside each advantage sign, sides weighted k/G and (G-k)/G "
               "(the paper's BA)"),
    Aggregator("balanced-agg-mass", "balanced-agg with each side weighted by its advantage mass "
               "(non-binary rewards)"),
    Aggregator("seq-mean-token-sum", "token sum per response, mean over responses",
               verl_aliases=("seq-mean-token-sum",)),
    Aggregator("dr-grpo", "token sum per response over a constant length (Dr. GRPO)",
               verl_aliases=("seq-mean-token-sum-norm",), needs_max_length=True, verl_estimator=False),
)
"""Every rule, in the order tables and figures list them. ``token-agg`` pools the whole batch as in
DAPO/verl/TRL, so its default scope is ``batch``; every other rule is defined per group. ``dr-grpo`` has
no verl estimator: it needs a constant length that verl's advantage estimators are not given (verl has it
natively, ``seq-mean-token-sum-norm`` with ``loss_scale_factor``)."""

SCOPES: tuple[str, ...] = ("group", "batch")
"""``group``: the mean of per-group losses; ``batch``: the whole batch is one group."""

_BY_NAME: dict[str, Aggregator] = {rule.name: rule for rule in AGGREGATORS} | {
    alias: rule for rule in AGGREGATORS for alias in rule.verl_aliases}

RULES: tuple[str, ...] = tuple(rule.name for rule in AGGREGATORS)
"""Canonical rule names."""

ALIASES: dict[str, str] = {alias: rule.name for rule in AGGREGATORS for alias in rule.verl_aliases}
"""verl's ``loss_agg_mode`` names, each with the rule it names."""

DEFAULT_SCOPES: dict[str, str] = {rule.name: rule.default_scope for rule in AGGREGATORS}

MICRO_BATCH_RULES: tuple[str, ...] = tuple(rule.name for rule in AGGREGATORS if rule.needs_micro_batches)


def aggregator(name: str) -> Aggregator:
    """The record of the rule ``name`` (a canonical name or a verl alias); a ``ValueError`` naming the
    valid names otherwise. The one place a rule's name is canonicalised."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        valid = ", ".join(RULES) + "; verl aliases: " + ", ".join(ALIASES)
        raise ValueError(f"unknown aggregation rule {name!r}; valid rules: {valid}") from None


def canonical_rule(name: str) -> str:
    """The canonical name of the rule ``name`` (a canonical name or a verl alias)."""
    return aggregator(name).name


def default_scope(name: str) -> str:
    """The scope the rule ``name`` is used with by default."""
    return aggregator(name).default_scope


def check_scope(scope: str) -> str:
    """``scope`` if it is one of :data:`SCOPES`; a ``ValueError`` naming them otherwise."""
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; valid scopes: {', '.join(SCOPES)}")
    return scope
