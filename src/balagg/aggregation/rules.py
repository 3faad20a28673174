"""The registry of aggregation rules: one record per rule, its weight formula included, and no torch.

A rule is a per-response weight w_i >= 0 folded into the advantage and reduced with a token sum
(:mod:`balagg.aggregation`). Its record (:class:`Aggregator`) says everything about it: its name and the
other engines' names of it, its default scope, what it needs, its parameters, its reference, and its
formula, a function of :class:`Groups`. This module imports no torch, so the workflow (building the DAG),
the config loader, the schema and ``--help`` read the registry without loading it; the formulas are
written against :class:`Groups`, which :mod:`balagg.aggregation.weights` implements with torch tensors.
Adding a rule is adding its record and its formula here.

Notation for one group of G responses to one prompt: response i has length |o_i| (loss tokens) and
advantage A_i; P / N are the responses with A > 0 / A < 0, k = |P|, L+ / L- the total length of each
side. With binary rewards and no zero advantages |N| = G - k, so BA's side weights are k/G and (G-k)/G as
in the paper. A formula gives w_i inside its group; scope ``group`` then divides every weight by the
number of groups (the loss is the mean of the per-group losses) unless the rule is not ``per_group``, and
scope ``batch`` makes the whole batch one group (G = batch size, one pool of tokens): ``token-agg`` at
scope ``batch`` is DAPO's / TRL's global token mean.

A rule's name is canonicalised, and its scope defaulted, where a config enters (:func:`aggregator`, called
by :class:`balagg.campaign.Campaign`, :class:`balagg.train.config.CellConfig` and the public entry points);
code downstream of them is handed canonical names.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from torch import Tensor

NAME_PATTERN = r"[a-z]+(-[a-z]+)*"
"""What a rule's canonical name is made of: lowercase words joined by hyphens. Every record is checked
against it (:class:`Aggregator`), so each rule name is a folder name and matches in a path; the workflow's
``aggregator`` wildcard is the registry's names (:data:`balagg.layout.WILDCARDS`)."""


class Groups(Protocol):
    """A batch of responses in groups, as a rule's formula sees it.

    Every tensor has one entry per response (float64); :class:`balagg.aggregation.weights.TorchGroups` builds
    it from a batch. A formula uses the tensors' arithmetic and comparison operators (``+ - * / **``,
    ``> <``, ``abs``) and the methods below, nothing else of torch, so this module needs no torch."""

    lengths: Tensor
    """|o_i|: the loss tokens of each response."""
    advantages: Tensor
    """A_i."""
    size: Tensor
    """G: the size of each response's group."""
    count: int
    """The number of groups."""
    max_length: float | None
    """The constant length normaliser (the generation budget) of the rules that need it."""
    alpha: float
    """``delta-l-norm``'s exponent (:data:`ALPHA`)."""
    padded_width: float | None
    """The width the batch is padded to (None: unknown, take its longest response)."""

    def sum(self, values: Tensor) -> Tensor:
        """sum_{j in the group of i} values_j, for each response i."""

    def divide(self, numerator: Tensor | float, denominator: Tensor) -> Tensor:
        """numerator / denominator, 0 where the denominator is 0 (an empty side or a zero-length response
        carries no tokens, so its weight is irrelevant to the loss; 0 keeps everything finite)."""

    def where(self, mask: Tensor, chosen: Tensor | float, otherwise: Tensor | float) -> Tensor:
        """``chosen`` where ``mask`` holds, ``otherwise`` elsewhere."""

    def constant(self, value: float) -> Tensor:
        """``value`` for every response."""

    def longest(self) -> float:
        """The longest response's length."""


Formula = Callable[[Groups], "Tensor"]
"""A rule's weights w_i >= 0 of a batch in groups (before scope ``group``'s division by the number of groups)."""


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


# --------------------------------------------------------------------------------------------------
# The formulas (each rule's record below names its own)
# --------------------------------------------------------------------------------------------------


def _seq_agg(groups: Groups) -> Tensor:
    """w_i = 1 / (G |o_i|): each response's token mean, averaged over the group."""
    return groups.divide(1.0, groups.size * groups.lengths)


def _token_agg(groups: Groups) -> Tensor:
    """w_i = 1 / sum_j |o_j|: one token mean over the group's pooled tokens."""
    return groups.divide(1.0, groups.sum(groups.lengths))


def _token_agg_microbatch(groups: Groups) -> Tensor:
    """w_i = 1 / (T_m(i) M), the groups being the micro-batches of one optimiser step: T_m the loss tokens
    of micro-batch m, M the number of micro-batches (over all data-parallel ranks) in the step.

    verl's legacy FSDP actor (``verl/workers/actor/dp_actor.py`` before verl#6067): each micro-batch's loss
    is its own token mean (``agg_loss`` token-mean with an empty ``global_batch_info`` falls back to the
    micro-batch's token count), divided by the gradient accumulation (``loss = policy_loss /
    self.gradient_accumulation``), and FSDP averages the gradients of the D ranks, so M =
    gradient_accumulation * D. It is a mean of micro-batch token means, not a token mean (verl#5625,
    upstream); a micro-batch without tokens gets weight 0. The formula divides by M itself and ignores the
    scope; the weights of one call must be those of one optimiser step."""
    return groups.divide(1.0, groups.sum(groups.lengths) * groups.count)


def _side_balanced(groups: Groups, mass: Tensor) -> Tensor:
    """Balanced weights with per-response ``mass`` (1 for BA, |A_i| for the mass generalisation).

    On each side s of a group: w_i = (sum_{j in s} mass_j / G) / (sum_{j in s} mass_j |o_j|), so the side
    carries total token weight sum_{s} mass / G (k/G for BA) spread as a token mean inside the side; a
    response with A_i == 0 is on neither side and gets 0."""
    weights = groups.constant(0.0)
    for side in (groups.advantages > 0, groups.advantages < 0):
        side_mass = groups.where(side, mass, 0.0)
        side_share = groups.sum(side_mass) / groups.size
        side_tokens = groups.sum(side_mass * groups.lengths)
        weights = groups.where(side, groups.divide(side_share, side_tokens), weights)
    return weights


def _balanced_agg(groups: Groups) -> Tensor:
    """w_i = (k/G) / T+ for A_i > 0, ((G-k)/G) / T- for A_i < 0 (T+-: the side's tokens; 0 for A_i = 0)."""
    return _side_balanced(groups, groups.constant(1.0))


def _balanced_agg_mass(groups: Groups) -> Tensor:
    """w_i = (sum_{j in s} |A_j| / G) / sum_{j in s} |A_j| |o_j|, s the side of response i (_side_balanced)."""
    return _side_balanced(groups, abs(groups.advantages))


def _seq_mean_token_sum(groups: Groups) -> Tensor:
    """w_i = 1 / G: each response's token sum, averaged over the group."""
    return 1.0 / groups.size


def _dr_grpo(groups: Groups) -> Tensor:
    """w_i = 1 / (G L_max): token sums over a constant length (Dr. GRPO)."""
    return 1.0 / (groups.size * groups.max_length)


def _seq_mean_token_sum_norm(groups: Groups) -> Tensor:
    """w_i = 1 / (G W), W the batch's padded width (``padded_width``; default its longest response).

    verl's ``seq-mean-token-sum-norm`` divides by ``loss_mask.shape[-1]`` unless ``loss_scale_factor`` is
    set (``verl/trainer/ppo/core_algos.py::agg_loss``): the width the batch is padded to, not the
    generation budget of Dr. GRPO (verl#3741)."""
    width = groups.padded_width if groups.padded_width is not None else groups.longest()
    if not width > 0:
        return groups.constant(0.0)
    return 1.0 / (groups.size * width)


def _token_sum(groups: Groups) -> Tensor:
    """w_i = 1: the batch's token sum (verl's ``token-sum``, which times dp_size undoes the ranks' mean)."""
    return groups.constant(1.0)


def _delta_l_norm(groups: Groups) -> Tensor:
    """w_i = x_i / (max_length sum_j x_j), x_i = |o_i|^-alpha (0 for an empty response): ΔL Normalization.

    He et al. 2025 (arXiv 2509.07558): the minimum-variance unbiased combination of the per-response
    gradients when Var(g_i) grows like |o_i| is x_i / sum_j x_j with alpha = 1; alpha < 1 trades variance
    for the weight of long responses. The authors' code (zerolllin/Delta-L-Normalization,
    ``verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage`` with ``use_grpopp``) scales each
    advantage by (|o_i| / mean |o|)^-alpha / mean_j (|o_j| / mean |o|)^-alpha over the whole batch, which is
    B x_i / sum_j x_j, then reduces with ``masked_mean_allavg``: a mean over B x the padded width (their
    rollouts are padded to the budget, max_length). So the reference's scope is ``batch``; at scope
    ``group`` each group is normalised to 1 and the groups averaged. A length below one token (a fractional
    length) counts as one, which keeps 0^-alpha out of the formula."""
    at_least_one = groups.where(groups.lengths > 1.0, groups.lengths, 1.0)
    x = groups.where(groups.lengths > 0, at_least_one ** -groups.alpha, 0.0)
    return groups.divide(x, groups.sum(x)) / groups.max_length


# --------------------------------------------------------------------------------------------------
# The records
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Aggregator:
    """One aggregation rule."""

    name: str
    """Canonical name (the workflow's grid axis, folder names, ``cell.json``): :data:`NAME_PATTERN`."""
    description: str
    """One line for the docs: what the rule is, and where it comes from."""
    formula: Formula | None = None
    """Its weights (a function of :class:`Groups`, whose docstring states the math); None for a rule that
    shares another's (``weights_of``)."""
    default_scope: str = "group"
    """The scope the rule is used with unless a config says otherwise."""
    verl_aliases: tuple[str, ...] = ()
    """verl's ``loss_agg_mode`` names of the rule, accepted wherever a rule is named."""
    aliases: tuple[str, ...] = ()
    """Other engines' names of the rule (e.g. a TRL ``loss_type``), accepted wherever a rule is named."""
    needs_micro_batches: bool = False
    """Its weights depend on the micro-batch partition of an optimiser step (the trainer passes
    ``micro_batch_ids``; its formula's groups are the micro-batches); such a rule ignores the scope."""
    needs_max_length: bool = False
    """Its weights need the constant length normaliser ``max_length`` (the generation budget)."""
    per_group: bool = True
    """Its formula is per group and the batch's loss the mean over groups; ``False``: one formula for
    the whole batch, whatever the scope."""
    weights_of: str | None = None
    """The rule whose formula it shares (it is that rule under another name and default scope)."""
    parameters: tuple[RuleParameter, ...] = ()
    """The rule parameters its weights read."""
    verl_estimator: bool = True
    """The verl plug-in offers it as an advantage estimator (:mod:`balagg.integrations.verl`; the constant
    length of ``dr-grpo`` and ``delta-l-norm`` is then ``algorithm.balagg_max_length``, by default the
    batch's padded width).
    Not the micro-batch rules: an estimator sees the batch, not how the actor will cut it."""
    reference: str = ""
    """Where the rule is published: paper and code."""

    def __post_init__(self) -> None:
        if not re.fullmatch(NAME_PATTERN, self.name):
            raise ValueError(f"rule name {self.name!r}: lowercase words joined by hyphens ({NAME_PATTERN})")
        if (self.formula is None) == (self.weights_of is None):
            raise ValueError(f"rule {self.name!r}: give its formula or the rule whose formula it shares "
                             "(weights_of), one of the two")

    @property
    def all_aliases(self) -> tuple[str, ...]:
        """Every other name of the rule (verl's and other engines')."""
        return self.verl_aliases + self.aliases


AGGREGATORS: tuple[Aggregator, ...] = (
    Aggregator("seq-agg", "token mean per response, mean over responses (GRPO)", _seq_agg,
               verl_aliases=("seq-mean-token-mean",),
               reference="Shao et al. 2024 (arXiv 2402.03300); TRL loss_type=grpo"),
    Aggregator("token-agg", "token mean over the pooled tokens (DAPO; TRL's dapo loss)", _token_agg,
               default_scope="batch", verl_aliases=("token-mean",),
               reference="Yu et al. 2025 (DAPO, arXiv 2503.14476); verl loss_agg_mode=token-mean"),
    Aggregator("token-agg-microbatch", "mean of micro-batch token means (verl's legacy FSDP token-mean; "
               "TRL's bnpo)", _token_agg_microbatch, default_scope="batch", needs_micro_batches=True,
               aliases=("bnpo",), verl_estimator=False,
               reference="verl dp_actor before verl#6067 (verl#5625); TRL loss_type=bnpo"),
    Aggregator("balanced-agg", "token mean inside each advantage sign, sides weighted k/G and (G-k)/G "
               "(the paper's BA)", _balanced_agg, reference="the paper"),
    Aggregator("balanced-agg-mass", "balanced-agg with each side weighted by its advantage mass "
               "(non-binary rewards)", _balanced_agg_mass, reference="balagg"),
    Aggregator("seq-mean-token-sum", "token sum per response, mean over responses", _seq_mean_token_sum,
               verl_aliases=("seq-mean-token-sum",), reference="verl loss_agg_mode=seq-mean-token-sum"),
    Aggregator("dr-grpo", "token sum per response over a constant length, the generation budget (Dr. GRPO)",
               _dr_grpo, needs_max_length=True,
               reference="Liu et al. 2025 (arXiv 2503.20783), sail-sg/understand-r1-zero; TRL loss_type=dr_grpo"),
    Aggregator("seq-mean-token-sum-norm", "dr-grpo over the padded width of the batch instead of the budget "
               "(verl's seq-mean-token-sum-norm without loss_scale_factor)", _seq_mean_token_sum_norm,
               verl_aliases=("seq-mean-token-sum-norm",),
               reference="verl core_algos.agg_loss (loss_scale_factor=None: loss_mask.shape[-1]; verl#3741)"),
    Aggregator("token-sum", "token sum over the batch, no normaliser", _token_sum, default_scope="batch",
               per_group=False, verl_aliases=("token-sum",), reference="verl loss_agg_mode=token-sum (verl#7197)"),
    Aggregator("prompt-mean", "token mean inside each prompt's group, groups averaged: token-agg at scope group",
               weights_of="token-agg",
               reference="ScaleRL (Khatri et al. 2025, arXiv 2510.13786); SkyRL loss_reduction=prompt_mean"),
    Aggregator("delta-l-norm", "ΔL Normalization: w_i ~ L_i^-alpha normalised to sum 1, over a constant length",
               _delta_l_norm, default_scope="batch", needs_max_length=True, parameters=(ALPHA,),
               reference="He et al. 2025 (arXiv 2509.07558), zerolllin/Delta-L-Normalization "
                         "verl/trainer/ppo/core_algos.py (use_grpopp)"),
)
"""Every rule, in the order tables and figures list them. ``token-agg`` pools the whole batch as in
DAPO/verl/TRL, so its default scope is ``batch``; so does ``delta-l-norm``, whose reference normalises over
the whole batch (``token-sum`` has no groups). Every other rule is defined per group. ``prompt-mean`` is
``token-agg`` at scope ``group`` under the name SkyRL and ScaleRL give it: a rule of its own (its own cells
and folders), sharing ``token-agg``'s formula. ``dr-grpo`` and ``delta-l-norm`` divide by a
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


def weight_formula(name: str) -> Formula:
    """The formula of the rule ``name``: its own, or that of the rule it shares (``weights_of``)."""
    record = aggregator(name)
    return aggregator(record.weights_of).formula if record.weights_of else record.formula


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
