"""Loss-aggregation rules for GRPO-style policy gradients, as per-response weights.

Notation for one group of G responses to one prompt: response i has length |o_i| (loss tokens),
advantage A_i, and per-token clipped surrogate l_it (which already carries A_i). Every rule here is a
per-response weight w_i >= 0 and the loss is the weighted token *sum*

    loss = sum_i w_i * sum_t mask_it * l_it.

Because the PPO clip (min/max, dual clip) is positively homogeneous in the advantage,
w_i * l_it(A_i) == l_it(w_i * A_i) for w_i >= 0: a trainer can fold w_i into the advantage and reduce
with a plain token sum. That makes every rule exact under any micro-batching, shuffling or
data-parallel sharding, and lets all rules share one code path.

Rules (per group; P / N = responses with A > 0 / A < 0, k = |P|, L+- = total length of each side):

    seq-agg             1 / (G |o_i|)                                 GRPO; verl seq-mean-token-mean
    token-agg           1 / sum_j |o_j|                               DAPO; verl token-mean
    token-agg-microbatch  1 / (T_m * M)                               verl's legacy FSDP token-mean
    balanced-agg        (k/G) / L+ on P, (|N|/G) / L- on N,           the paper's BA
                        0 where A_i == 0
    balanced-agg-mass   (sum_s |A_j| / G) / (sum_s |A_j| |o_j|)       BA for non-binary rewards
                        on each side s
    seq-mean-token-sum  1 / G                                         verl seq-mean-token-sum
    dr-grpo             1 / (G * max_length)                          Dr. GRPO; TRL dr_grpo
    seq-mean-token-sum-norm  1 / (G * W)                              verl seq-mean-token-sum-norm
    token-sum           1 (no mean over groups)                       verl token-sum
    prompt-mean         1 / sum_j |o_j|  (token-agg at scope group)   SkyRL prompt_mean; ScaleRL
    delta-l-norm        |o_i|^-alpha / (max_length sum_j |o_j|^-alpha)  ΔL Normalization (He et al. 2025)

``max_length`` is the generation budget (a constant); W is the batch's padded width (``padded_width``,
by default its longest response: a batch padded to its longest), which is verl's divisor for
``seq-mean-token-sum-norm`` unless ``loss_scale_factor`` is set, and equals max_length only when the batch
is padded to the budget. ``token-sum`` is the plain token sum of the batch (w_i = 1 whatever the scope).
``prompt-mean`` shares ``token-agg``'s weight function; its default scope is ``group``. ``delta-l-norm``'s
alpha is a rule parameter (:data:`balagg.aggregators.ALPHA`, default 1).

With binary rewards and no zero advantages |N| = G - k, so BA's side weights are k/G and (G-k)/G as in
the paper. A response with A_i == 0 carries no gradient; BA leaves it out of both sides.

``token-agg-microbatch`` is not defined by groups but by the micro-batch split of one optimiser step:
response i in micro-batch m(i) gets 1 / (T_m * M), T_m = loss tokens of micro-batch m, M = number of
micro-batches (over all data-parallel ranks) in the step. That is, exactly, verl's legacy FSDP actor
(``verl/workers/actor/dp_actor.py`` before verl#6067): each micro-batch's loss is its own token mean
(``agg_loss`` token-mean with an empty ``global_batch_info`` falls back to the micro-batch's token
count), divided by the gradient accumulation (``loss = policy_loss / self.gradient_accumulation``), and
FSDP averages the gradients of the D ranks, so M = gradient_accumulation * D. It is a mean of
micro-batch token means, not a token mean (verl#5625, upstream). Pass the micro-batch of each response as
``micro_batch_ids``; without them the call is one micro-batch (and the rule equals ``token-agg`` at
scope ``batch``). ``scope`` does not apply to it. The weights of one call must be those of one
optimiser step.

Scope ``group`` applies the formulas per group and divides every weight by the number of groups, so the
loss is the mean of the per-group losses. Scope ``batch`` treats the whole batch as one group
(G = batch size, one pool of tokens): ``token-agg`` with scope ``batch`` is DAPO's / TRL's global token
mean. Without a ``scope``, :func:`aggregation_weights` uses the rule's registered default scope
(:data:`DEFAULT_SCOPES`): ``batch`` for ``token-agg`` (and its alias ``token-mean``), ``group`` for every
other rule. All functions are vectorised over the batch; group ids may come in any order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from balagg.aggregators import (ALIASES, ALPHA, DEFAULT_SCOPES, MICRO_BATCH_RULES, RULES, SCOPES, aggregator,
                                canonical_rule, check_scope, default_scope)

__all__ = [
    "RULES",
    "ALIASES",
    "SCOPES",
    "DEFAULT_SCOPES",
    "MICRO_BATCH_RULES",
    "canonical_rule",
    "default_scope",
    "aggregator",
    "aggregation_weights",
    "GROUP_WEIGHTS",
    "group_weights",
    "aggregate",
    "microbatch_token_weights",
    "group_advantages",
    "length_diagnostics",
]

# --------------------------------------------------------------------------------------------------
# Input handling and segment sums (the only "group" machinery; everything else is elementwise)
# --------------------------------------------------------------------------------------------------


def _as_1d(name: str, values: Any) -> torch.Tensor:
    tensor = values if isinstance(values, torch.Tensor) else torch.as_tensor(values)
    if tensor.dim() != 1:
        raise ValueError(f"{name} must be one-dimensional (one value per response), got shape {tuple(tensor.shape)}")
    return tensor


def _group_index(group_ids: Any, size: int) -> tuple[torch.Tensor, int]:
    """Dense group index in [0, n_groups) for each response, and n_groups."""
    if isinstance(group_ids, torch.Tensor):
        ids = group_ids
    else:
        try:
            ids = torch.as_tensor(group_ids)
        except (TypeError, ValueError, RuntimeError):  # strings or other hashables
            lookup: dict[Any, int] = {}
            ids = torch.tensor([lookup.setdefault(g, len(lookup)) for g in group_ids], dtype=torch.long)
    if ids.dim() != 1:
        raise ValueError(f"group_ids must be one-dimensional, got shape {tuple(ids.shape)}")
    if ids.numel() != size:
        raise ValueError(f"group_ids has {ids.numel()} entries but there are {size} responses")
    if size == 0:
        return torch.zeros(0, dtype=torch.long), 0
    _, inverse = torch.unique(ids, return_inverse=True)
    return inverse, int(inverse.max()) + 1


def _validated(
    lengths: Any, advantages: Any, group_ids: Any, scope: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, torch.dtype]:
    """Check inputs; return float64 lengths and advantages, the dense group index, n_groups and the
    dtype the weights are returned in."""
    check_scope(scope)
    lengths_t = _as_1d("lengths", lengths)
    advantages_t = _as_1d("advantages", advantages)
    if lengths_t.numel() != advantages_t.numel():
        raise ValueError(
            f"lengths and advantages must have one entry per response: got {lengths_t.numel()} lengths "
            f"and {advantages_t.numel()} advantages"
        )
    out_dtype = advantages_t.dtype if advantages_t.is_floating_point() else torch.float32
    lengths64 = lengths_t.detach().to(torch.float64)
    advantages64 = advantages_t.detach().to(torch.float64)
    if not torch.isfinite(lengths64).all():
        raise ValueError("lengths must be finite")
    if (lengths64 < 0).any():
        bad = torch.nonzero(lengths64 < 0).flatten()[:5].tolist()
        raise ValueError(f"lengths must be non-negative; negative at positions {bad}")
    if not torch.isfinite(advantages64).all():
        bad = torch.nonzero(~torch.isfinite(advantages64)).flatten()[:5].tolist()
        raise ValueError(f"advantages must be finite; non-finite at positions {bad}")
    size = lengths64.numel()
    if scope == "batch":
        # The whole batch is one group; the ids are still checked for shape.
        _group_index(group_ids, size)
        return lengths64, advantages64, torch.zeros(size, dtype=torch.long), int(size > 0), out_dtype
    index, n_groups = _group_index(group_ids, size)
    return lengths64, advantages64, index, n_groups, out_dtype


def _group_sum(values: torch.Tensor, index: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Per-group sums of ``values`` (one entry per group)."""
    return torch.zeros(n_groups, dtype=values.dtype).index_add_(0, index, values)


def _safe_div(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """numerator / denominator, 0 where the denominator is 0 (an empty side or zero-length response
    carries no tokens, so its weight is irrelevant to the loss; 0 keeps everything finite)."""
    zero = denominator == 0
    return torch.where(zero, torch.zeros_like(numerator), numerator / torch.where(zero, 1.0, denominator))


def _side_balanced(
    lengths: torch.Tensor, advantages: torch.Tensor, index: torch.Tensor, n_groups: int, group_size: torch.Tensor,
    mass: torch.Tensor,
) -> torch.Tensor:
    """Balanced weights with per-response ``mass`` (1 for BA, |A_i| for the mass generalisation).

    On each side s of a group: w_i = (sum_{j in s} mass_j / G) / (sum_{j in s} mass_j |o_j|), so the side
    carries total token weight sum_{s} mass / G (k/G for BA) spread as a token mean inside the side."""
    weights = torch.zeros_like(lengths)
    for side in (advantages > 0, advantages < 0):
        side_mass = torch.where(side, mass, torch.zeros_like(mass))
        side_share = _group_sum(side_mass, index, n_groups) / group_size
        side_tokens = _group_sum(side_mass * lengths, index, n_groups)
        weights = torch.where(side, _safe_div(side_share, side_tokens)[index], weights)
    return weights


@dataclass(frozen=True)
class Groups:
    """A validated batch as the per-group weight functions see it (float64, one entry per response)."""

    lengths: torch.Tensor
    advantages: torch.Tensor
    index: torch.Tensor
    """the dense group of each response, in [0, n_groups)"""
    n_groups: int
    max_length: float | None
    alpha: float = ALPHA.default
    """delta-l-norm's exponent"""
    padded_width: float | None = None
    """the width the batch is padded to (None: its longest response)"""

    @property
    def group_size(self) -> torch.Tensor:
        """G of each group (one entry per group)."""
        return _group_sum(torch.ones_like(self.lengths), self.index, self.n_groups)


GROUP_WEIGHTS: dict[str, Callable[[Groups], torch.Tensor]] = {}
"""Each group-defined rule's weight function: its per-group formula w_i (before the division by the number
of groups). Every rule of :data:`balagg.aggregators.AGGREGATORS` has one, except the micro-batch rules
(:func:`microbatch_token_weights`)."""


def group_weights(rule: str) -> Callable[[Callable[[Groups], torch.Tensor]], Callable[[Groups], torch.Tensor]]:
    """Register the decorated function as the weights of the canonical rule ``rule``."""

    def register(function: Callable[[Groups], torch.Tensor]) -> Callable[[Groups], torch.Tensor]:
        if canonical_rule(rule) != rule or rule in GROUP_WEIGHTS:
            raise ValueError(f"weights of {rule!r}: not a canonical rule name, or registered twice")
        GROUP_WEIGHTS[rule] = function
        return function

    return register


@group_weights("seq-agg")
def _seq_agg(groups: Groups) -> torch.Tensor:
    """w_i = 1 / (G |o_i|): each response's token mean, averaged over the group."""
    return _safe_div(torch.ones_like(groups.lengths), groups.group_size[groups.index] * groups.lengths)


@group_weights("token-agg")
def _token_agg(groups: Groups) -> torch.Tensor:
    """w_i = 1 / sum_j |o_j|: one token mean over the group's pooled tokens."""
    tokens = _group_sum(groups.lengths, groups.index, groups.n_groups)
    return _safe_div(torch.ones_like(groups.lengths), tokens[groups.index])


@group_weights("balanced-agg")
def _balanced_agg(groups: Groups) -> torch.Tensor:
    """w_i = (k/G) / T+ for A_i > 0, ((G-k)/G) / T- for A_i < 0 (T+-: the side's tokens; 0 for A_i = 0)."""
    return _side_balanced(groups.lengths, groups.advantages, groups.index, groups.n_groups, groups.group_size,
                          torch.ones_like(groups.lengths))


@group_weights("balanced-agg-mass")
def _balanced_agg_mass(groups: Groups) -> torch.Tensor:
    """w_i = (sum_{j in s} |A_j| / G) / sum_{j in s} |A_j| |o_j|, s the side of response i (_side_balanced)."""
    return _side_balanced(groups.lengths, groups.advantages, groups.index, groups.n_groups, groups.group_size,
                          groups.advantages.abs())


@group_weights("seq-mean-token-sum")
def _seq_mean_token_sum(groups: Groups) -> torch.Tensor:
    """w_i = 1 / G: each response's token sum, averaged over the group."""
    return 1.0 / groups.group_size[groups.index]


@group_weights("dr-grpo")
def _dr_grpo(groups: Groups) -> torch.Tensor:
    """w_i = 1 / (G L_max): token sums over a constant length (Dr. GRPO)."""
    return 1.0 / (groups.group_size[groups.index] * float(groups.max_length))


@group_weights("seq-mean-token-sum-norm")
def _seq_mean_token_sum_norm(groups: Groups) -> torch.Tensor:
    """w_i = 1 / (G W), W the batch's padded width (``padded_width``; default its longest response).

    verl's ``seq-mean-token-sum-norm`` divides by ``loss_mask.shape[-1]`` unless ``loss_scale_factor`` is
    set (``verl/trainer/ppo/core_algos.py::agg_loss``): the width the batch is padded to, not the
    generation budget of Dr. GRPO (verl#3741)."""
    width = groups.padded_width if groups.padded_width is not None else float(groups.lengths.max())
    if not width > 0:
        return torch.zeros_like(groups.lengths)
    return 1.0 / (groups.group_size[groups.index] * float(width))


@group_weights("token-sum")
def _token_sum(groups: Groups) -> torch.Tensor:
    """w_i = 1: the batch's token sum (verl's ``token-sum``, which times dp_size undoes the ranks' mean)."""
    return torch.ones_like(groups.lengths)


@group_weights("delta-l-norm")
def _delta_l_norm(groups: Groups) -> torch.Tensor:
    """w_i = x_i / (max_length sum_j x_j), x_i = |o_i|^-alpha (0 for an empty response): ΔL Normalization.

    He et al. 2025 (arXiv 2509.07558): the minimum-variance unbiased combination of the per-response
    gradients when Var(g_i) grows like |o_i| is x_i / sum_j x_j with alpha = 1; alpha < 1 trades variance
    for the weight of long responses. The authors' code (zerolllin/Delta-L-Normalization,
    ``verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage`` with ``use_grpopp``) scales each
    advantage by (|o_i| / mean |o|)^-alpha / mean_j (|o_j| / mean |o|)^-alpha over the whole batch, which is
    B x_i / sum_j x_j, then reduces with ``masked_mean_allavg``: a mean over B x the padded width (their
    rollouts are padded to the budget, max_length). So the reference's scope is ``batch``; at scope
    ``group`` each group is normalised to 1 and the groups averaged."""
    present = groups.lengths > 0
    x = torch.where(present, groups.lengths.clamp(min=1.0) ** -float(groups.alpha), torch.zeros_like(groups.lengths))
    total = _group_sum(x, groups.index, groups.n_groups)[groups.index]
    return _safe_div(x, total) / float(groups.max_length)


def _weight_function(rule: str) -> Callable[[Groups], torch.Tensor]:
    """The weight function of the canonical ``rule`` (its own, or that of the rule it shares, ``weights_of``)."""
    record = aggregator(rule)
    return GROUP_WEIGHTS[record.weights_of or record.name]


_OWN_WEIGHTS = {rule for rule in RULES if aggregator(rule).weights_of is None}
_UNWEIGHTED = _OWN_WEIGHTS - set(MICRO_BATCH_RULES) - set(GROUP_WEIGHTS)
if _UNWEIGHTED:
    raise ImportError(f"balagg.aggregation has no weights for the registered rules {sorted(_UNWEIGHTED)}")


def aggregation_weights(
    rule: str,
    lengths: Any,
    advantages: Any,
    group_ids: Any,
    *,
    scope: str | None = None,
    max_length: int | float | None = None,
    micro_batch_ids: Any = None,
    alpha: float | None = None,
    padded_width: int | float | None = None,
) -> torch.Tensor:
    """Per-response weights w_i >= 0 of ``rule`` (see the module docstring for the formulas).

    Args:
        rule: a name from :data:`RULES` or :data:`ALIASES`.
        lengths: [B] number of loss tokens of each response (>= 0).
        advantages: [B] finite advantages; only their signs (and, for ``balanced-agg-mass``, their
            magnitudes) matter.
        group_ids: [B] the group (prompt) of each response; any hashable values, any order.
        scope: ``group`` (mean of per-group losses) or ``batch`` (the batch is one group); None (the
            default) is the rule's registered default scope (:data:`DEFAULT_SCOPES`, an alias taking its
            rule's): ``batch`` for ``token-agg`` (DAPO's and verl's ``token-mean``), ``group`` for the rest.
        max_length: the constant length normaliser of ``dr-grpo`` (required there, ignored elsewhere).
        micro_batch_ids: [B] the micro-batch of each response (any hashable values), for
            ``token-agg-microbatch`` (default: one micro-batch); ignored by the other rules.
        alpha: ``delta-l-norm``'s exponent (default :data:`balagg.aggregators.ALPHA`); ignored elsewhere.
        padded_width: the width the batch is padded to, for ``seq-mean-token-sum-norm`` (default: the
            longest response); ignored elsewhere.

    Returns:
        [B] weights in the advantages' floating dtype (float32 for integer advantages), computed in
        float64. ``aggregate(per_token_loss, mask, weights)`` is then the rule's loss.
    """
    record = aggregator(rule)
    scope = record.default_scope if scope is None else scope
    if record.needs_max_length:
        if max_length is None:
            raise ValueError(f"rule {record.name!r} needs max_length (the constant length normaliser)")
        if not max_length > 0:
            raise ValueError(f"max_length must be positive, got {max_length}")
    lengths64, advantages64, index, n_groups, out_dtype = _validated(lengths, advantages, group_ids, scope)
    if lengths64.numel() == 0:
        return torch.zeros(0, dtype=out_dtype)
    if record.needs_micro_batches:
        return microbatch_token_weights(lengths64, micro_batch_ids).to(out_dtype)
    if alpha is not None and not (isinstance(alpha, (int, float)) and alpha >= 0):
        raise ValueError(f"alpha must be a non-negative number, got {alpha!r}")
    if padded_width is not None and not padded_width > 0:
        raise ValueError(f"padded_width must be positive, got {padded_width}")
    groups = Groups(lengths64, advantages64, index, n_groups, max_length,
                    alpha=ALPHA.default if alpha is None else float(alpha), padded_width=padded_width)
    weights = _weight_function(record.name)(groups)
    return (weights / n_groups if record.per_group else weights).to(out_dtype)


def microbatch_token_weights(lengths: Any, micro_batch_ids: Any = None) -> torch.Tensor:
    """verl's legacy FSDP token-mean as per-response weights: w_i = 1 / (T_m(i) * M).

    ``lengths``: [B] loss tokens per response; ``micro_batch_ids``: [B] micro-batch of each response
    (None: all one micro-batch); T_m = tokens of micro-batch m, M = number of micro-batches. Summing
    ``aggregate(loss_m, mask_m, w_m)`` over the micro-batches equals verl's loop
    ``sum_m masked_mean(loss_m, mask_m) / M`` (and its gradient); a micro-batch without tokens gets
    weight 0. Returns float64."""
    lengths64 = _as_1d("lengths", lengths).detach().to(torch.float64)
    if micro_batch_ids is None:
        micro_batch_ids = torch.zeros(lengths64.numel(), dtype=torch.long)
    index, n_micro = _group_index(micro_batch_ids, lengths64.numel())
    if lengths64.numel() == 0:
        return torch.zeros(0, dtype=torch.float64)
    tokens = _group_sum(lengths64, index, n_micro)
    return _safe_div(torch.ones_like(lengths64), tokens[index] * n_micro)


def aggregate(per_token_loss: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The weighted token sum ``sum_i weights_i * sum_t mask_it * per_token_loss_it`` (a scalar).

    A plain sum, so summing it over any split of the batch into micro-batches (with each row keeping its
    weight) gives the whole batch's loss and gradients."""
    if per_token_loss.dim() != 2:
        raise ValueError(f"per_token_loss must be [batch, tokens], got shape {tuple(per_token_loss.shape)}")
    if mask.shape != per_token_loss.shape:
        raise ValueError(
            f"mask shape {tuple(mask.shape)} does not match per_token_loss shape {tuple(per_token_loss.shape)}"
        )
    if weights.dim() != 1 or weights.numel() != per_token_loss.shape[0]:
        raise ValueError(
            f"weights must be [batch] = [{per_token_loss.shape[0]}], got shape {tuple(weights.shape)}"
        )
    per_response = (per_token_loss * mask.to(per_token_loss.dtype)).sum(-1)
    return (per_response * weights.to(per_token_loss.dtype)).sum()


def group_advantages(
    rewards: Any, group_ids: Any, *, std: str = "population", eps: float = 1e-6
) -> torch.Tensor:
    """GRPO advantages A_i = (r_i - mean_g) / (std_g + eps), 0 in groups whose rewards are all equal.

    ``std`` is ``population`` (the paper's analysis: a binary group with k of G correct then has
    A = +sqrt((G-k)/k) and -sqrt(k/(G-k))), ``sample`` (Bessel-corrected, as TRL) or ``none`` (Dr.GRPO)."""
    if std not in ("population", "sample", "none"):
        raise ValueError(f"unknown std normalisation {std!r}; valid: population, sample, none")
    rewards_t = _as_1d("rewards", rewards)
    rewards64 = rewards_t.detach().to(torch.float64)
    if not torch.isfinite(rewards64).all():
        raise ValueError("rewards must be finite")
    index, n_groups = _group_index(group_ids, rewards64.numel())
    count = _group_sum(torch.ones_like(rewards64), index, n_groups)
    mean = _group_sum(rewards64, index, n_groups) / count
    centred = rewards64 - mean[index]
    squares = _group_sum(centred**2, index, n_groups)
    if std == "none":
        return centred.float()
    dof = count - 1 if std == "sample" else count
    scale = torch.sqrt(_safe_div(squares, dof))[index]
    return torch.where(scale > 0, centred / (scale + eps), torch.zeros_like(centred)).float()


def length_diagnostics(
    lengths: Any,
    advantages: Any,
    group_ids: Any,
    *,
    max_length: int | float | None = None,
    rules: Sequence[str] | None = None,
) -> dict[str, float]:
    """Length statistics behind the paper's diagnosis, for one batch of responses.

    Keys:
        ``len_mean``, ``len_std`` (population), ``len_cv`` = std / mean over the batch;
        ``len_cv_within_group``: mean over groups (with non-zero mean length) of the within-group CV;
        ``len_pos_mean`` / ``len_neg_mean``: mean length of responses with A > 0 / A < 0 in mixed groups
        (groups holding both signs); ``len_gap`` = ``len_neg_mean - len_pos_mean``;
        ``mixed_group_frac``: share of groups that are mixed;
        ``side_weight/<rule>/pos|neg``: sum over the side of w_i |o_i| |A_i|, the total weight times
        advantage that ``rule`` (at its :data:`DEFAULT_SCOPES` scope) gives each side. Sequence and
        balanced aggregation give both sides of a binary group the same sqrt(k(G-k))/G; token
        aggregation tilts it towards the side with the longer responses (sign-length coupling).
        ``side_mass_ratio/<rule>`` = neg / pos of those sums (NaN when pos is 0): 1 for the balanced rules.
        ``token_weight/<rule>/pos_long|pos_short``: the effective weight per token w_i |A_i| averaged
        over correct (A > 0) responses longer than / at most the median length of the batch's correct
        responses (NaN when a half is empty): seq-agg gives long correct responses less per token.
        ``dr-grpo`` is included only when ``max_length`` is given; ``token-agg-microbatch`` never (its
        weights belong to a micro-batch split, not to the batch).
    Undefined statistics (no mixed group, empty batch) are NaN.
    """
    lengths64, advantages64, index, n_groups, _ = _validated(lengths, advantages, group_ids, "group")
    nan = float("nan")
    if lengths64.numel() == 0:
        return {"len_mean": nan, "len_std": nan, "len_cv": nan, "len_cv_within_group": nan,
                "len_pos_mean": nan, "len_neg_mean": nan, "len_gap": nan, "mixed_group_frac": nan}

    def mean_of(values: torch.Tensor) -> float:
        return float(values.mean()) if values.numel() else nan

    len_mean = float(lengths64.mean())
    len_std = float(lengths64.std(unbiased=False))
    group_size = _group_sum(torch.ones_like(lengths64), index, n_groups)
    group_mean = _group_sum(lengths64, index, n_groups) / group_size
    group_var = _group_sum((lengths64 - group_mean[index]) ** 2, index, n_groups) / group_size
    has_length = group_mean > 0
    within_cv = torch.sqrt(group_var[has_length]) / group_mean[has_length]

    positive, negative = advantages64 > 0, advantages64 < 0
    mixed_group = (_group_sum(positive.double(), index, n_groups) > 0) & (
        _group_sum(negative.double(), index, n_groups) > 0
    )
    in_mixed = mixed_group[index]
    len_pos_mean = mean_of(lengths64[positive & in_mixed])
    len_neg_mean = mean_of(lengths64[negative & in_mixed])

    stats = {
        "len_mean": len_mean,
        "len_std": len_std,
        "len_cv": len_std / len_mean if len_mean > 0 else nan,
        "len_cv_within_group": mean_of(within_cv),
        "len_pos_mean": len_pos_mean,
        "len_neg_mean": len_neg_mean,
        "len_gap": len_neg_mean - len_pos_mean,
        "mixed_group_frac": float(mixed_group.double().mean()),
    }
    pos_lengths = lengths64[positive]
    pos_long = positive & (lengths64 > pos_lengths.median()) if pos_lengths.numel() else positive
    pos_short = positive & ~pos_long
    for record in (aggregator(rule) for rule in (rules if rules is not None else RULES)):
        if (record.needs_max_length and max_length is None) or record.needs_micro_batches:
            continue  # dr-grpo needs max_length; token-agg-microbatch depends on the micro-batch split
        rule = record.name
        weights = aggregation_weights(
            rule, lengths64, advantages64, index, scope=record.default_scope, max_length=max_length
        ).double()
        carried = weights * lengths64 * advantages64.abs()
        stats[f"side_weight/{rule}/pos"] = float(carried[positive].sum())
        stats[f"side_weight/{rule}/neg"] = float(carried[negative].sum())
        pos_mass = stats[f"side_weight/{rule}/pos"]
        stats[f"side_mass_ratio/{rule}"] = stats[f"side_weight/{rule}/neg"] / pos_mass if pos_mass > 0 else nan
        per_token = weights * advantages64.abs()
        stats[f"token_weight/{rule}/pos_long"] = mean_of(per_token[pos_long])
        stats[f"token_weight/{rule}/pos_short"] = mean_of(per_token[pos_short])
    return stats
