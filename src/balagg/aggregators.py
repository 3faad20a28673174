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
class RuleParameter:
    """A number a rule's weights depend on besides the batch (declared once; the cell config, the verl
    plug-in, ``balagg weights`` and the conformance check take it from here)."""

    name: str
    """Keyword of :func:`balagg.aggregation.aggregation_weights`."""
    default: float
    """The value used unless a config says otherwise."""
    description: str
    """One line for the docs and ``--help``: what it is, with the published values."""
    published: tuple[float, ...]
    """The values the rule's reference uses (the conformance check tries each)."""


ALPHA = RuleParameter(
    "alpha", 1.0,
    "exponent of delta-l-norm's w_i ~ L_i^-alpha: 1 is the paper's minimum-variance choice (He et al. 2025, "
    "arXiv 2509.07558); its scripts run 0.75 on math (the default of its verl config) and 1 on CountDown",
    (1.0, 0.75))
"""ΔL Normalization's alpha (the paper's default 1; 0.75 in the authors' math scripts)."""


@dataclass(frozen=True)
class Aggregator:
    """One aggregation rule."""

    name: str
    """Canonical name (the workflow's grid axis, folder names, ``cell.json``): lowercase letters and hyphens."""
    description: str
    """One line for the docs: what the rule is, and where it comes from."""
    default_scope: str = "group"
    """The scope the rule is used with unless a config says otherwise."""
    verl_aliases: tuple[str, ...] = ()
    """verl's ``loss_agg_mode`` names of the rule, accepted wherever a rule is named."""
    aliases: tuple[str, ...] = ()
    """Other engines' names of the rule (e.g. a TRL ``loss_type``), accepted wherever a rule is named."""
    needs_micro_batches: bool = False
    """Its weights depend on the micro-batch partition of an optimiser step (the trainer passes
    ``micro_batch_ids``); such a rule ignores the scope."""
    needs_max_length: bool = False
    """Its weights need the constant length normaliser ``max_length`` (the generation budget)."""
    per_group: bool = True
    """Its formula is per group and the batch's loss the mean over groups; ``False``: one formula for
    the whole batch, whatever the scope."""
    weights_of: str | None = None
    """The rule whose weight function it shares (it is that rule under another name and default scope)."""
    parameters: tuple[RuleParameter, ...] = ()
    """The rule parameters its weights read."""
    verl_estimator: bool = True
    """The verl plug-in offers it as an advantage estimator (:mod:`balagg.integrations.verl`; the constant
    length of ``dr-grpo`` and ``delta-l-norm`` is then verl's padded width, ``rollout.response_length``).
    Not the micro-batch rules: an estimator sees the batch, not how the actor will cut it."""
    reference: str = ""
    """Where the rule is published: paper and code."""

    @property
    def all_aliases(self) -> tuple[str, ...]:
        """Every other name of the rule (verl's and other engines')."""
        return self.verl_aliases + self.aliases


AGGREGATORS: tuple[Aggregator, ...] = (
    Aggregator("seq-agg", "token mean per response, mean over responses (GRPO)",
               verl_aliases=("seq-mean-token-mean",),
               reference="Shao et al. 2024 (arXiv 2402.03300); TRL loss_type=grpo"),
    Aggregator("token-agg", "token mean over the pooled tokens (DAPO; TRL's dapo loss)", default_scope="batch",
               verl_aliases=("token-mean",),
               reference="Yu et al. 2025 (DAPO, arXiv 2503.14476); verl loss_agg_mode=token-mean"),
    Aggregator("token-agg-microbatch", "mean of micro-batch token means (verl's legacy FSDP token-mean; "
               "TRL's bnpo)", default_scope="batch", needs_micro_batches=True, aliases=("bnpo",), verl_estimator=False,
               reference="verl dp_actor before verl#6067 (verl#5625); TRL loss_type=bnpo"),
    Aggregator("balanced-agg", "token mean inside each advantage sign, sides weighted k/G and (G-k)/G "
               "(the paper's BA)", reference="the paper"),
    Aggregator("balanced-agg-mass", "balanced-agg with each side weighted by its advantage mass "
               "(non-binary rewards)", reference="balagg"),
    Aggregator("seq-mean-token-sum", "token sum per response, mean over responses",
               verl_aliases=("seq-mean-token-sum",), reference="verl loss_agg_mode=seq-mean-token-sum"),
    Aggregator("dr-grpo", "token sum per response over a constant length, the generation budget (Dr. GRPO)",
               needs_max_length=True,
               reference="Liu et al. 2025 (arXiv 2503.20783), sail-sg/understand-r1-zero; TRL loss_type=dr_grpo"),
    Aggregator("seq-mean-token-sum-norm", "dr-grpo over the padded width of the batch instead of the budget "
               "(verl's seq-mean-token-sum-norm without loss_scale_factor)",
               verl_aliases=("seq-mean-token-sum-norm",),
               reference="verl core_algos.agg_loss (loss_scale_factor=None: loss_mask.shape[-1]; verl#3741)"),
    Aggregator("token-sum", "token sum over the batch, no normaliser", default_scope="batch", per_group=False,
               verl_aliases=("token-sum",), reference="verl loss_agg_mode=token-sum (verl#7197)"),
    Aggregator("prompt-mean", "token mean inside each prompt's group, groups averaged: token-agg at scope group",
               weights_of="token-agg",
               reference="ScaleRL (Khatri et al. 2025, arXiv 2510.13786); SkyRL loss_reduction=prompt_mean"),
    Aggregator("delta-l-norm", "ΔL Normalization: w_i ~ L_i^-alpha normalised to sum 1, over a constant length",
               default_scope="batch", needs_max_length=True, parameters=(ALPHA,),
               reference="He et al. 2025 (arXiv 2509.07558), zerolllin/Delta-L-Normalization "
                         "verl/trainer/ppo/core_algos.py (use_grpopp)"),
)
"""Every rule, in the order tables and figures list them. ``token-agg`` pools the whole batch as in
DAPO/verl/TRL, so its default scope is ``batch``; so does ``delta-l-norm``, whose reference normalises over
the whole batch (``token-sum`` has no groups). Every other rule is defined per group. ``prompt-mean`` is
``token-agg`` at scope ``group`` under the name SkyRL and ScaleRL give it: a rule of its own (its own cells
and folders), sharing ``token-agg``'s weight function. ``dr-grpo`` and ``delta-l-norm`` divide by a
constant length (the generation budget); ``seq-mean-token-sum-norm`` by the batch's padded width, which
is what verl's mode does unless ``loss_scale_factor`` is set, and equals ``dr-grpo`` when the batch is
padded to the budget."""

SCOPES: tuple[str, ...] = ("group", "batch")
"""``group``: the mean of per-group losses; ``batch``: the whole batch is one group."""

_BY_NAME: dict[str, Aggregator] = {rule.name: rule for rule in AGGREGATORS} | {
    alias: rule for rule in AGGREGATORS for alias in rule.all_aliases}

RULES: tuple[str, ...] = tuple(rule.name for rule in AGGREGATORS)
"""Canonical rule names."""

ALIASES: dict[str, str] = {alias: rule.name for rule in AGGREGATORS for alias in rule.all_aliases}
"""verl's ``loss_agg_mode`` names and other engines' names, each with the rule it names."""

RULE_PARAMETERS: dict[str, RuleParameter] = {
    parameter.name: parameter for rule in AGGREGATORS for parameter in rule.parameters}
"""Every rule parameter, by name."""

NAME_PATTERN = r"[a-z]+(-[a-z]+)*"
"""What a rule's name is made of (the workflow's ``aggregator`` wildcard matches ``[a-z-]+``)."""

DEFAULT_SCOPES: dict[str, str] = {rule.name: rule.default_scope for rule in AGGREGATORS}

MICRO_BATCH_RULES: tuple[str, ...] = tuple(rule.name for rule in AGGREGATORS if rule.needs_micro_batches)


def aggregator(name: str) -> Aggregator:
    """The record of the rule ``name`` (a canonical name or a verl alias); a ``ValueError`` naming the
    valid names otherwise. The one place a rule's name is canonicalised."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        valid = ", ".join(RULES) + "; aliases: " + ", ".join(ALIASES)
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
